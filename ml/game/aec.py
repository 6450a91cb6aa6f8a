"""What the AEC adapters of OpenSpiel games and PettingZoo envs share (``ml.game.openspiel.env``,
``ml.game.pettingzoo.env``): the env's agents, spaces, per-game bookkeeping and records
(:class:`FlatAECEnv`, whose agents, spaces and bookkeeping the Commander pod's envs share too:
``ml.game.commander.pod_env``), the outcome of final returns (:func:`outcome_of`) and the
encoder of records that carry their observation (:class:`ObservationEncoder`).

==================== ================================================================
Agents               ``player_0 .. player_{n-1}``
Actions              Discrete(num_actions), the same for every agent
Observation          Dict(observation: Box(float32[obs_dim]), action_mask: Box(int8[num_actions]))
Game ids             ``game-<index>-<seed>``: ``index`` from ``reset(options={"game_index": ...})``,
                     else the env's count of resets
Outcome              first place = the seat with the largest return; a tie for it is a ``draw``;
                     the ranking orders seats by return, ties by seat
Records              ``ml.game.record.OpenSpielRecord``: the acting seat's flat observation and mask
==================== ================================================================
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from gymnasium import spaces
from pettingzoo import AECEnv

from ml.base.io import JSONObject
from ml.game.record import RecordLike, record_field
from ml.game.spec import ResetSeeds


class IllegalMoveError(ValueError):
    """An action outside the legal mask of the acting player."""


def outcome_of(returns: Sequence[float]) -> tuple[str, int | None, list[int]]:
    """``(outcome, winner, ranking)`` from final returns: first place = max return, ties -> draw."""
    best = max(returns)
    top = [s for s, r in enumerate(returns) if r == best]
    winner = top[0] if len(top) == 1 else None
    ranking = sorted(range(len(returns)), key=lambda s: (-returns[s], s))
    return (f"win_seat_{winner}" if winner is not None else "draw"), winner, ranking


class FlatAECEnv(AECEnv):  # pettingzoo ships no type information (no py.typed)
    """An AEC env of flat observations and one ``Discrete`` action space (see the module docstring).

    Subclasses deal a game in ``reset`` (calling :meth:`_start_game` first) and give the record
    fields of the acting seat to :meth:`_record`.

    Args:
        game_name: the name written into records (``openspiel:kuhn_poker``, ``pettingzoo:<module>:<factory>``).
        num_players: seats.
        obs_dim: length of the flat observation.
        num_actions: size of the action space.

    Attributes:
        game_id: the game dealt by the last ``reset`` (``""`` before it).
        decisions: decisions applied in that game.
    """

    def __init__(self, game_name: str, num_players: int, obs_dim: int, num_actions: int) -> None:
        super().__init__()
        self.game_name = game_name
        self.num_players, self.obs_dim, self.num_actions = num_players, obs_dim, num_actions
        self.render_mode = None
        self.possible_agents = [f"player_{i}" for i in range(num_players)]
        self._observation_space = spaces.Dict(
            {
                "observation": spaces.Box(-np.inf, np.inf, shape=(obs_dim,), dtype=np.float32),
                "action_mask": spaces.Box(0, 1, shape=(num_actions,), dtype=np.int8),
            }
        )
        self._action_space = spaces.Discrete(num_actions)
        self._seeds = ResetSeeds()
        self._games = 0
        self.game_id = ""
        self.decisions = 0

    def observation_space(self, agent: str) -> spaces.Dict:
        """The same Dict space for every agent."""
        return self._observation_space

    def action_space(self, agent: str) -> spaces.Discrete:
        """Discrete(num_actions) for every agent."""
        return self._action_space

    def _start_game(self, seed: int | None, options: dict[str, object] | None) -> int:
        """Name the game a ``reset(seed, options)`` deals and zero its decisions; returns its seed
        (``seed``, or drawn from the last one given: ``ml.game.spec.ResetSeeds``)."""
        game_seed = self._seeds.next(seed)
        index = (options or {}).get("game_index", self._games)
        self._games += 1
        self.game_id = f"game-{index}-{game_seed}"
        self.decisions = 0
        return game_seed

    def _record(self, seat: int, observation: list[float], mask: list[int], env_version: str | None = None) -> JSONObject:
        """The record of the decision ``seat`` is about to make (``ml.game.record.OpenSpielRecord``'s
        field order; ``env_version`` after ``game`` when given)."""
        head: JSONObject = {"game_id": self.game_id, "turn": self.decisions + 1, "phase": "play", "active_seat": seat,
                            "game": self.game_name}  # fmt: skip
        if env_version is not None:
            head["env_version"] = env_version
        return {**head, "num_players": self.num_players, "observation": observation, "action_mask": mask}

    def _start_agents(self, first_seat: int = 0) -> None:
        """Every agent live with zero rewards and empty infos, ``first_seat`` to act (a reset's AEC bookkeeping)."""
        self.agents = self.possible_agents[:]
        self.rewards = {a: 0.0 for a in self.agents}
        self._cumulative_rewards = {a: 0.0 for a in self.agents}
        self.terminations = {a: False for a in self.agents}
        self.truncations = {a: False for a in self.agents}
        self.infos: dict[str, dict[str, object]] = {a: {} for a in self.agents}
        self._skip_agent_selection = None
        self.agent_selection = self.possible_agents[first_seat]

    def render(self) -> None:
        """No rendering (``render_modes`` is empty)."""
        return None

    def close(self) -> None:
        """Nothing to release."""
        return None


class ObservationEncoder:
    """Encoder and labeler of records that carry their own observation (OpenSpiel games, PettingZoo envs).

    Args:
        obs_dim: observation length of the game.
        num_actions: the game's number of distinct actions.
    """

    def __init__(self, obs_dim: int, num_actions: int) -> None:
        self.obs_dim, self.num_actions = obs_dim, num_actions

    def __call__(self, record: RecordLike) -> np.ndarray:
        """The record's ``observation`` as float32[obs_dim].

        Raises:
            ValueError: the observation has another length (a file of another game).
        """
        obs = np.asarray(record_field(record, "observation"), dtype=np.float32)
        if obs.shape != (self.obs_dim,):
            raise ValueError(
                f"game {record_field(record, 'game_id')!r}: observation has {obs.size} values, this game has {self.obs_dim}"
            )
        return obs

    def encode_batch(self, records: Sequence[RecordLike]) -> np.ndarray:
        """float32[N, obs_dim] observations of ``records``."""
        out = np.zeros((len(records), self.obs_dim), dtype=np.float32)
        for i, rec in enumerate(records):
            out[i] = self(rec)
        return out

    def label(self, record: RecordLike) -> int | None:
        """The record's ``action.action_idx``."""
        idx: int | None = record_field(record_field(record, "action"), "action_idx")
        return idx

    def action_mask(self, record: RecordLike) -> np.ndarray:
        """bool[num_actions]: the stored mask, or all-ones when a record has none."""
        mask = record_field(record, "action_mask")
        return np.ones(self.num_actions, dtype=bool) if mask is None else np.asarray(mask, dtype=bool)
