"""PettingZoo AEC adapter over any sequential OpenSpiel game (``openspiel_v0``); its players are ``ml.game.openspiel.players``.

What it shares with the PettingZoo adapter (agents, spaces, game ids, records, the outcome) is
``ml.game.aec``'s.

==================== ================================================================
Import               ``from ml.game.openspiel.env import OpenSpielEnv``
Actions              Discrete(game.num_distinct_actions())
Parallel API         no (``is_parallelizable: False``); simultaneous-move games are refused
Agents               ``player_0 .. player_{n-1}`` (OpenSpiel player index)
Observation          Dict(observation: Box(float32[obs_dim]), action_mask: Box(int8[num_actions]))
Observation values   ``state.observation_tensor(player)`` (``information_state_tensor`` for
                     games without an observation tensor, or with ``observation="information_state"``)
Chance nodes         sampled inside the env from ``chance_outcomes()`` with a numpy
                     Generator seeded by ``reset(seed)``
Rewards              zero-sum games: OpenSpiel's returns / max |utility|; other games: the
                     project's zero-sum outcome scheme (first place +1, others -1/(n-1), draw 0)
Termination          all agents terminate together when the OpenSpiel state is terminal
==================== ================================================================

Outcome: first place is the seat with the largest return; a tie for the largest return is a
``draw``. The ranking (for Plackett-Luce ratings) orders seats by return, ties by seat.

Version History:
    v0: first version.
"""

from __future__ import annotations

from typing import Any, ClassVar, Literal

import numpy as np
import pyspiel

from ml.base.io import JSONObject
from ml.game.aec import FlatAECEnv, IllegalMoveError, outcome_of

ObservationKind = Literal["observation", "information_state"]
"""What the env gives as a seat's observation (``game.observation``): ``observation``, the game's
observation tensor (the information-state tensor for games without one); ``information_state``,
the information-state tensor (perfect recall: the seat's whole history of the game)."""


def observation_size(game: pyspiel.Game, kind: ObservationKind = "observation") -> int:
    """Length of the flat observation the env gives (see :data:`ObservationKind`).

    Raises:
        ValueError: the game provides neither tensor, or no information-state tensor for ``information_state``.
    """
    provides = game.get_type()
    if kind == "observation" and provides.provides_observation_tensor:
        return int(np.prod(game.observation_tensor_shape()))
    if provides.provides_information_state_tensor:
        return int(np.prod(game.information_state_tensor_shape()))
    if kind == "information_state":
        raise ValueError(f"{game}: game.observation information_state: the game provides no information-state tensor")
    raise ValueError(f"{game}: provides neither an observation tensor nor an information-state tensor")


def observation_of(state: pyspiel.State, player: int, kind: ObservationKind = "observation") -> list[float]:
    """The flat observation of ``player`` in ``state`` (see :func:`observation_size`)."""
    tensor: list[float]  # pyspiel has no type stubs
    if kind == "observation" and state.get_game().get_type().provides_observation_tensor:
        tensor = state.observation_tensor(player)
    else:
        tensor = state.information_state_tensor(player)
    return tensor


def check_game(game: pyspiel.Game) -> None:
    """Refuse games the loop cannot play.

    Raises:
        ValueError: simultaneous-move games, games whose rewards are not terminal-only, games
            without a flat observation.
    """
    kind = game.get_type()
    if kind.dynamics != pyspiel.GameType.Dynamics.SEQUENTIAL:
        raise ValueError(f"{kind.short_name}: only sequential games are supported (dynamics {kind.dynamics})")
    if kind.reward_model != pyspiel.GameType.RewardModel.TERMINAL:
        raise ValueError(f"{kind.short_name}: only terminal-reward games are supported (MCTSBot needs them)")
    observation_size(game)


class OpenSpielEnv(FlatAECEnv):
    """A sequential OpenSpiel game as a PettingZoo AEC environment.

    Args:
        game: the loaded game (``pyspiel.load_game``).
        game_name: the name written into records, e.g. ``openspiel:kuhn_poker``.
        observation: which tensor a seat observes (:data:`ObservationKind`).

    Raises:
        ValueError: see :func:`check_game` and :func:`observation_size`.
    """

    metadata: ClassVar[dict[str, Any]] = {"name": "openspiel_v0", "is_parallelizable": False, "render_modes": []}

    def __init__(self, game: pyspiel.Game, game_name: str | None = None, observation: ObservationKind = "observation") -> None:
        check_game(game)
        name = game_name or f"openspiel:{game.get_type().short_name}"
        super().__init__(name, game.num_players(), observation_size(game, observation), game.num_distinct_actions())
        self.game = game
        self.observation_kind: ObservationKind = observation
        self.zero_sum = game.get_type().utility == pyspiel.GameType.Utility.ZERO_SUM
        self.reward_scale = max(abs(game.min_utility()), abs(game.max_utility())) or 1.0
        self.agent_name_mapping = {a: i for i, a in enumerate(self.possible_agents)}
        self._state: pyspiel.State | None = None

    @property
    def state(self) -> pyspiel.State:
        """The underlying OpenSpiel state (what the scripted players act on).

        Raises:
            RuntimeError: before the first ``reset``.
        """
        if self._state is None:
            raise RuntimeError("call reset() first")
        return self._state

    def reset(self, seed: int | None = None, options: dict[str, object] | None = None) -> None:
        """Start a new game; ``seed`` seeds the chance-node sampling (later seedless resets draw from it).

        Args:
            seed: game seed, or None.
            options: ``{"game_index": int}`` names the game ``game-<index>-<seed>``.
        """
        game_seed = self._start_game(seed, options)
        self._rng = np.random.default_rng(game_seed)
        self._state = self.game.new_initial_state()
        self._start_agents()
        self._settle()

    def step(self, action: int | None) -> None:
        """Apply ``action`` for ``agent_selection`` (``None`` for a dead agent).

        Raises:
            IllegalMoveError: an action outside the mask.
        """
        agent = self.agent_selection
        if self.terminations[agent] or self.truncations[agent]:
            self._was_dead_step(action)
            return
        self._cumulative_rewards[agent] = 0.0
        for a in self.agents:
            self.rewards[a] = 0.0
        legal = self.state.legal_actions()
        if action is None or int(action) not in legal:
            raise IllegalMoveError(f"{self.game_id}: action {action!r} is not legal for {agent}; legal: {legal}")
        self.state.apply_action(int(action))
        self.decisions += 1
        self._settle()

    def _settle(self) -> None:
        """Sample chance nodes, end the game (rewards, terminations) or pick the next agent."""
        st = self.state
        while st.is_chance_node():
            actions, probs = zip(*st.chance_outcomes(), strict=True)
            st.apply_action(int(actions[self._rng.choice(len(actions), p=np.asarray(probs) / np.sum(probs))]))
        if st.is_terminal():
            returns = st.returns()
            outcome, winner, _ = outcome_of(returns)
            n = self.num_players
            for a, seat in self.agent_name_mapping.items():
                if self.zero_sum:
                    self.rewards[a] = returns[seat] / self.reward_scale
                elif winner is not None:
                    self.rewards[a] = 1.0 if seat == winner else -1.0 / (n - 1)
                self.terminations[a] = True
                self.infos[a] = {"outcome": outcome, "returns": returns}
        else:
            self.agent_selection = self.possible_agents[st.current_player()]
        self._accumulate_rewards()
        self._deads_step_first()

    def observe(self, agent: str) -> dict[str, np.ndarray]:
        """Observation of ``agent``: ``{"observation": float32[obs_dim], "action_mask": int8[num_actions]}``.

        The mask is all zeros unless ``agent`` is to act.
        """
        seat = self.agent_name_mapping[agent]
        obs = np.asarray(observation_of(self.state, seat, self.observation_kind), dtype=np.float32)
        mask = np.zeros(self.num_actions, dtype=np.int8)
        if not self.state.is_terminal() and self.state.current_player() == seat:
            mask[self.state.legal_actions(seat)] = 1
        return {"observation": obs, "action_mask": mask}

    def decision_record(self) -> JSONObject:
        """Record of the decision the current agent is about to make (``ml.game.record.OpenSpielRecord``)."""
        seat = self.state.current_player()
        mask = [0] * self.num_actions
        for a in self.state.legal_actions(seat):
            mask[a] = 1
        return self._record(seat, observation_of(self.state, seat, self.observation_kind), mask)

    def describe_action(self, action: int) -> JSONObject:
        """The record's ``action`` object (call before ``step``): ``type``, ``raw``, ``action_idx``."""
        raw = self.state.action_to_string(self.state.current_player(), int(action))
        return {"type": "move", "raw": raw[:200], "action_idx": int(action)}

    def game_result(self) -> tuple[str, str, int | None, list[int]]:
        """``(game_id, outcome, winner, ranking)`` of the finished game."""
        outcome, winner, ranking = outcome_of(self.state.returns())
        return self.game_id, outcome, winner, ranking
