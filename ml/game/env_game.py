"""A batched ``ml.game.protocol.Game`` over N PettingZoo AEC envs: the protocol at Python speed.

OpenSpiel games (``ml.game.openspiel.env.OpenSpielEnv``, one ``pyspiel`` state per row) and
PettingZoo envs (``ml.game.pettingzoo.env.PettingZooEnv``) play through it; the tests also run
the Commander's object engine through it (``ml.game.commander.reference``), the oracle the
compiled core is checked against (``tests/test_runner.py``). Each row holds one env and the scripted players of its seats
(``GameSpec.make_player(kind, seed * PLAYER_SEED_STRIDE + seat)``); ``step`` applies each
row's action with ``env.step``, then lets the row's scripted seats act on ``env.state``
until a caller-answered seat is to act, stepping terminated agents out (the AEC dead-step
convention) and summing every seat's rewards of the step.

The envs must have, beside the AEC API, the record methods of ``ml.game.protocol.RecordingEnv``
and the ``state`` of :class:`ScriptableEnv`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from ml.base.io import JSONObject
from ml.game.aec import ObservationEncoder
from ml.game.protocol import PLAYER_SEED_STRIDE, Game, RecordingEnv
from ml.game.record import POLICY_DECIMALS
from ml.game.spec import Encoder, ScriptedPlayer


class ScriptableEnv(RecordingEnv, Protocol):
    """A ``RecordingEnv`` whose game state the scripted players act on (``OpenSpielEnv``, ``PettingZooEnv``)."""

    @property
    def state(self) -> Any:
        """The game state ``ScriptedPlayer.act`` takes."""
        ...


def _seat(agent: str) -> int:
    """The seat of an AEC agent name ``player_<k>``."""
    return int(agent.split("_")[1])


class EnvGame:
    """``num_games`` rows of AEC envs (``ml.game.protocol.Game``).

    Args:
        make_env: a fresh env (one per game dealt).
        make_player: ``(kind, seed) -> ScriptedPlayer`` (``GameSpec.make_player``).
        num_games, num_players, obs_dim, num_actions: the batch's sizes.

    Raises:
        ValueError: ``num_games`` < 1.
    """

    def __init__(
        self,
        make_env: Callable[[], ScriptableEnv],
        make_player: Callable[[str, int], ScriptedPlayer],
        num_games: int,
        num_players: int,
        obs_dim: int,
        num_actions: int,
    ) -> None:
        if num_games < 1:
            raise ValueError("EnvGame needs num_games >= 1")
        self._make_env, self._make_player = make_env, make_player
        self.num_games, self.num_players, self.obs_dim, self.num_actions = num_games, num_players, obs_dim, num_actions
        self.obs = np.zeros((num_games, obs_dim), np.float32)
        self.mask = np.zeros((num_games, num_actions), bool)
        self.rewards = np.zeros((num_games, num_players), np.float64)
        self.done = np.ones(num_games, bool)  # no game dealt yet
        self.to_act = np.zeros(num_games, np.int64)
        self.decisions = np.zeros(num_games, np.int64)
        self._envs: list[ScriptableEnv | None] = [None] * num_games
        self._players: list[dict[int, ScriptedPlayer]] = [{} for _ in range(num_games)]
        self._labelers: list[dict[int, ScriptedPlayer]] = [{} for _ in range(num_games)]  # teacher_policy's
        self._seeds = np.zeros(num_games, np.int64)
        self._surfaced = np.zeros(num_games, bool)
        self._pending = np.zeros((num_games, num_players), np.float64)  # rewards of a reset, given with the next step

    def _env(self, row: int) -> ScriptableEnv:
        env = self._envs[row]
        if env is None:
            raise ValueError(f"row {row} has no game; reset it first")
        return env

    def reset(
        self,
        row: int,
        seed: int,
        scripted: Mapping[int, str],
        surfaced: bool,
        decks: Sequence[int] | None = None,
        index: int = 0,
    ) -> None:
        """Deal ``row`` with ``env.reset(seed=seed, options={"game_index": index})`` (``ml.game.protocol.Game.reset``).

        Raises:
            ValueError: ``decks`` given (these envs deal their own), or an unknown scripted kind.
        """
        if decks is not None:
            raise ValueError("this game deals its own decks; decks must be None")
        env = self._make_env()
        env.reset(seed=seed, options={"game_index": index})
        self._envs[row] = env
        self._players[row] = {s: self._make_player(kind, seed * PLAYER_SEED_STRIDE + s) for s, kind in scripted.items()}
        self._seeds[row] = seed
        self._labelers[row] = {}
        self._surfaced[row] = surfaced
        self.decisions[row] = 0
        self.rewards[row] = 0.0
        self._pending[row] = 0.0
        self._skip_dead_steps(row, self._pending[row])
        self._settle(row)

    def step(self, actions: np.ndarray) -> int:
        """``ml.game.protocol.Game.step``; raises the env's ValueError on an illegal action."""
        self.rewards[:] = self._pending
        self._pending[:] = 0.0
        applied = 0
        for row in range(self.num_games):
            if self.done[row]:
                continue
            if actions[row] >= 0:
                self._apply(row, int(actions[row]))
                applied += 1
            if not self._surfaced[row]:
                applied += self._play_scripted(row)
            self._settle(row)
        return applied

    def _play_scripted(self, row: int) -> int:
        env, players, n = self._env(row), self._players[row], 0
        while env.agents:
            player = players.get(_seat(env.agent_selection))
            if player is None:
                break
            self._apply(row, player.act(env.state))
            n += 1
        return n

    def _apply(self, row: int, action: int) -> None:
        env = self._env(row)
        env.step(action)
        self.decisions[row] += 1
        self._collect(env, self.rewards[row])
        self._skip_dead_steps(row, self.rewards[row])

    @staticmethod
    def _collect(env: RecordingEnv, into: np.ndarray) -> None:
        for agent, r in env.rewards.items():
            if r:
                into[_seat(agent)] += r

    def _skip_dead_steps(self, row: int, into: np.ndarray) -> None:
        env = self._env(row)
        while env.agents and (env.terminations[env.agent_selection] or env.truncations[env.agent_selection]):
            env.step(None)
            self._collect(env, into)

    def _settle(self, row: int) -> None:
        env = self._env(row)
        self.done[row] = not env.agents
        if env.agents:
            self.to_act[row] = _seat(env.agent_selection)

    def observe(self, rows: np.ndarray) -> None:
        """``ml.game.protocol.Game.observe``: ``env.observe`` of the agent to act in each row."""
        for row in rows.tolist():
            env = self._env(row)
            seen = env.observe(env.agent_selection)
            self.obs[row] = seen["observation"]
            self.mask[row] = seen["action_mask"].astype(bool)

    def scripted_actions(self, rows: np.ndarray) -> np.ndarray:
        """``ml.game.protocol.Game.scripted_actions``: each surfaced row's scripted player's ``act``."""
        out = np.zeros(len(rows), np.int64)
        for i, row in enumerate(rows.tolist()):
            env = self._env(row)
            out[i] = self._players[row][_seat(env.agent_selection)].act(env.state)
        return out

    def is_scripted(self, row: int) -> bool:
        """``ml.game.protocol.Game.is_scripted``."""
        return int(self.to_act[row]) in self._players[row]

    def teacher_policy(self, row: int) -> list[float]:
        """``ml.game.protocol.Game.teacher_policy``: the ``policy_vector`` of a teacher of the seat
        (``ml.game.openspiel.players.DistributionPlayer``, made with the seat's player seed and
        kept for the row's game), not the row's players: their draws are untouched.

        Raises:
            ValueError: the teacher has no ``policy_vector``.
        """
        seat, env = int(self.to_act[row]), self._env(row)
        labelers = self._labelers[row]
        if seat not in labelers:
            labelers[seat] = self._make_player("teacher", int(self._seeds[row]) * PLAYER_SEED_STRIDE + seat)
        player = labelers[seat]
        if (vector := getattr(player, "policy_vector", None)) is None:
            raise ValueError(f"the teacher ({type(player).__name__}) keeps no distribution to label a decision with")
        policy: list[float] = vector(env.state)
        return policy

    def record(self, row: int, action: int) -> JSONObject:
        """``env.decision_record()`` with ``action`` set to ``env.describe_action(action)``, and
        ``policy`` (rounded to ``ml.game.record.POLICY_DECIMALS``) when the acting seat is a
        scripted player that keeps the distribution it drew ``action`` from (``last_policy``,
        ``ml.game.openspiel.players.DistributionPlayer``)."""
        env = self._env(row)
        rec = env.decision_record()
        rec["action"] = env.describe_action(action)
        player = self._players[row].get(int(self.to_act[row]))
        if (policy := getattr(player, "last_policy", None)) is not None:
            rec["policy"] = [round(float(p), POLICY_DECIMALS) for p in policy]
        return rec

    def result(self, row: int) -> tuple[str, str, int | None, list[int]]:
        """``env.game_result()``."""
        return self._env(row).game_result()


class EnvRows:
    """The ``ml.game.protocol.GameSpec`` methods of a game played as rows of AEC envs whose records
    carry their observation (``OpenSpielSpec``, ``PettingZooSpec``): batched play by :class:`EnvGame`,
    the ``ml.game.aec.ObservationEncoder``, nothing to compile.

    The spec gives ``num_players``, ``obs_dim``, ``num_actions``, ``make_env`` (a fresh
    :class:`ScriptableEnv`; the encoder ignored) and ``make_player``.
    """

    num_players: int
    obs_dim: int
    num_actions: int

    def make_env(self, encoder: Encoder | None = None) -> ScriptableEnv:
        """A fresh env of one game."""
        raise NotImplementedError

    def make_player(self, kind: str, seed: int) -> ScriptedPlayer:
        """The scripted player of a controller kind."""
        raise NotImplementedError

    def batched(self, num_games: int, encoder: Encoder | None = None) -> Game:
        """``num_games`` rows of :meth:`make_env`'s envs with :meth:`make_player`'s players (``encoder`` ignored)."""
        return EnvGame(self.make_env, self.make_player, num_games, self.num_players, self.obs_dim, self.num_actions)

    def warm_up(self) -> None:
        """Nothing to compile."""
        return None

    def encoder(self) -> Encoder:
        """An ``ml.game.aec.ObservationEncoder`` of the game's sizes (the records carry their observation)."""
        return ObservationEncoder(self.obs_dim, self.num_actions)

    def teacher_encoder(self, forge_dir: Path | None) -> Encoder:
        """:meth:`encoder` (``forge_dir`` is the commander's)."""
        return self.encoder()
