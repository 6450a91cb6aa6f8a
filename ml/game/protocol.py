"""What the generic modules see of a game: the :class:`GameSpec` of a run and its batched :class:`Game`.

A game kind is a package under ``ml.game`` (``commander``, ``openspiel``, ``pettingzoo``) whose
``spec`` module implements :class:`GameSpec`; ``ml.game.registry.make_game`` makes the one a
run's params name. The generic modules (``ml.play``, ``ml.learn``, ``ml.judge``, ``ml.data``)
ask the spec, never which kind it is.

``ml.play.runner.play_games`` plays every game through :class:`Game` (``GameSpec.batched``);
implementations: ``ml.game.commander.core.game.CoreGame`` (the compiled Commander core, arrays
stepped by numba kernels) and ``ml.game.env_game.EnvGame`` (rows of PettingZoo AEC envs at
Python speed: OpenSpiel games over ``pyspiel`` states, PettingZoo envs).

A game of the batch lives in a *row* (0..N-1). Rows are dealt with :meth:`Game.reset`, then
stepped together with :meth:`Game.step`: the seat to act in each row plays the action given
for it (``-1``: none), then the row's scripted seats play inside ``step`` until a seat that
the caller answers (a network, or a scripted seat whose decisions are recorded) is to act or
the game ends.

Buffers (owned by the game, overwritten by the calls that name them):

=========== ================= ===============================================================
attribute   dtype, shape      meaning
=========== ================= ===============================================================
obs         float32[N, D]     observations written by :meth:`Game.observe`
mask        bool[N, A]        legal actions of the seat to act (written by :meth:`Game.observe`)
rewards     float64[N, S]     each seat's reward over the last ``step`` (zero-sum per game)
done        bool[N]           the row's game is over
to_act      int[N]            the seat to act (meaningless where ``done``)
decisions   int[N]            decisions applied in the row's game so far (every seat's)
=========== ================= ===============================================================

Rewards are float64 so a seat's reward equals the Python float the AEC env gives
(``-1/(n-1)`` is not a float32 value).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, NamedTuple, Protocol

import numpy as np

from ml.base.io import JSONObject, JSONValue
from ml.game.spec import Encoder, ScriptedPlayer

PLAYER_SEED_STRIDE = 7
"""A scripted seat's generator is seeded with ``seed * PLAYER_SEED_STRIDE + seat`` (``ml.play.runner``, and
the ``Game`` implementations that play scripted seats themselves)."""


class Game(Protocol):
    """N games stepped together (see the module docstring).

    Attributes:
        num_games: N, the rows.
        num_players: S, seats per game.
        obs_dim: D, observation length.
        num_actions: A, size of the action space.
        obs, mask, rewards, done, to_act, decisions: the buffers of the module docstring.
    """

    num_games: int
    num_players: int
    obs_dim: int
    num_actions: int
    obs: np.ndarray
    mask: np.ndarray
    rewards: np.ndarray
    done: np.ndarray
    to_act: np.ndarray
    decisions: np.ndarray

    def reset(
        self,
        row: int,
        seed: int,
        scripted: Mapping[int, str],
        surfaced: bool,
        decks: Sequence[int] | None = None,
        index: int = 0,
    ) -> None:
        """Deal a game into ``row`` from ``seed``, as the game's AEC env ``reset(seed=seed)`` does.

        Args:
            row: the row (0..N-1); the game in it is replaced.
            seed: the game seed.
            scripted: seat -> scripted player kind (``teacher`` or ``random``), seeded with
                ``seed * PLAYER_SEED_STRIDE + seat`` as ``ml.game.env_game.EnvGame`` seeds ``GameSpec.make_player``; the other
                seats are answered by the caller.
            surfaced: the scripted seats' decisions are surfaced (``step`` stops at them and
                :meth:`scripted_actions` gives their choices) so the caller can record them.
            decks: the game's deck indices, one per seat, before the seat shuffle; None draws
                them from ``seed`` as the env does (a game that deals no decks accepts only None).
            index: the game's number in its run, for games whose ``game_id`` names it
                (OpenSpiel's ``game-<index>-<seed>``; the Commander's ids do not).

        No seat acts here; call ``step`` with ``-1`` for the row to let scripted seats play.

        Raises:
            ValueError: an unknown scripted kind, or ``decks`` of another length.
        """
        ...

    def step(self, actions: np.ndarray) -> int:
        """Play ``actions[g]`` (int64[N], -1: none) in each row, then the rows' scripted seats
        (not the surfaced ones) until a caller-answered seat is to act or the game ends;
        ``rewards`` gets what each seat got in between. Returns the decisions applied.

        Raises:
            ValueError: an illegal action.
        """
        ...

    def observe(self, rows: np.ndarray) -> None:
        """Write the observation and the legal mask of the seat to act in ``rows`` (int64[k])
        into ``obs[rows]`` and ``mask[rows]``."""
        ...

    def scripted_actions(self, rows: np.ndarray) -> np.ndarray:
        """int64[k]: the choices of the surfaced scripted seats to act in ``rows`` (their
        generators draw as the object players would); call ``step`` with them next."""
        ...

    def is_scripted(self, row: int) -> bool:
        """The seat to act in ``row`` is a scripted seat (surfaced: ``step`` stopped at it)."""
        ...

    def teacher_policy(self, row: int) -> list[float]:
        """The game's teacher's distribution (float[num_actions], zero on illegal moves) at the
        decision of the seat to act in ``row``, whoever plays that seat: the label
        ``export.targets: teacher`` writes into the records (DAgger: Ross, Gordon and Bagnell
        2011, "A Reduction of Imitation Learning and Structured Prediction to No-Regret Online
        Learning", AISTATS).

        Raises:
            ValueError: the game's teacher keeps no distribution (a heuristic or MCTS teacher).
        """
        ...

    def record(self, row: int, action: int) -> JSONObject:
        """The decision record of the seat to act in ``row`` with its ``action`` object for
        ``action`` (call before ``step``), as the AEC env's ``decision_record`` and
        ``describe_action`` build it.

        Raises:
            ValueError: ``action`` is not legal now.
        """
        ...

    def result(self, row: int) -> tuple[str, str, int | None, list[int]]:
        """``(game_id, outcome, winner, ranking)`` of the finished game in ``row``, as the AEC
        env's ``game_result``."""
        ...


class RecordingEnv(Protocol):
    """A PettingZoo AEC env of one game with the record methods the loop needs (``CommanderPodEnv``,
    ``OpenSpielEnv``, ``PettingZooEnv``).

    Attributes:
        agents, agent_selection, rewards, terminations, truncations: the AEC API's; agents
            are named ``player_<seat>``.
    """

    agents: list[str]
    agent_selection: str
    rewards: dict[str, float]
    terminations: dict[str, bool]
    truncations: dict[str, bool]

    def reset(self, seed: int | None = None, options: dict[str, object] | None = None) -> None: ...

    def step(self, action: int | None) -> None: ...

    def observe(self, agent: str) -> dict[str, np.ndarray]:
        """``{"observation": float32[obs_dim], "action_mask": int8[num_actions]}``."""
        ...

    def decision_record(self) -> JSONObject:
        """The record of the decision the agent to act is about to make."""
        ...

    def describe_action(self, action: int) -> JSONObject:
        """The record's ``action`` object for ``action`` (before ``step``)."""
        ...

    def game_result(self) -> tuple[str, str, int | None, list[int]]:
        """``(game_id, outcome, winner, ranking)`` of the finished game."""
        ...


class GameTree(NamedTuple):
    """A game whose whole tree exact algorithms walk (``ml.judge.nashconv``).

    Attributes:
        game: the ``pyspiel.Game``.
        observe: ``(state, player) -> float[obs_dim]``: the observation a network reads in a
            ``pyspiel.State`` (the one the game's records hold).
    """

    game: Any
    observe: Callable[[Any, int], list[float]]


class GameSpec(Protocol):
    """The game of a run: sizes, players, encoders, how returns are scored, and its batched play.

    Implementations (frozen dataclasses of plain values: a spec pickles into worker processes):
    ``ml.game.commander.spec.CommanderSpec``, ``ml.game.openspiel.spec.OpenSpielSpec``,
    ``ml.game.pettingzoo.spec.PettingZooSpec``.
    """

    @property
    def name(self) -> str:
        """``commander``, ``openspiel:<game>`` or ``pettingzoo:<module>:<factory>`` (``game.name``)."""
        ...

    @property
    def num_players(self) -> int:
        """Seats per game (``game.pod_size``)."""
        ...

    @property
    def obs_dim(self) -> int:
        """Observation length."""
        ...

    @property
    def num_actions(self) -> int:
        """Size of the action space."""
        ...

    @property
    def min_learner_decisions(self) -> int:
        """A lower bound of one seat's decisions per game, to size game lists."""
        ...

    @property
    def env_version(self) -> str:
        """The version of the env the records name (a PettingZoo game's; ``""`` for the others)."""
        ...

    @property
    def teacher_name(self) -> str:
        """What the ``teacher`` controller is in this game (for logs and reports)."""
        ...

    @property
    def zero_sum(self) -> bool:
        """A player's mean return against another is a strength scale with a known parity
        (:attr:`par_return`): a two-player game with zero-sum or constant-sum utilities. Such
        games are judged in their own currency (``ml.judge.mean_return``)."""
        ...

    @property
    def reward_scale(self) -> float:
        """Chips per unit of a seat's reward: returns times this are the game's own utilities (1.0 where they are)."""
        ...

    @property
    def par_return(self) -> float:
        """The mean return of a player against an equal one in a :attr:`zero_sum` game.

        Raises:
            ValueError: a game that is not :attr:`zero_sum`.
        """
        ...

    def make_env(self, encoder: Encoder | None = None) -> RecordingEnv:
        """A fresh PettingZoo AEC env of one game (``encoder``: the observation encoder of a game
        whose records do not carry their observation; ignored by the others)."""
        ...

    def batched(self, num_games: int, encoder: Encoder | None = None) -> Game:
        """The game as a batched :class:`Game` of ``num_games`` rows, its scripted seats those of :meth:`make_player`.

        Raises:
            ValueError: an ``encoder`` the game cannot play with.
        """
        ...

    def warm_up(self) -> None:
        """Compile, or load from a cache, what the game compiles (once per process), so that what
        a stage times afterwards is play; nothing for games that compile nothing."""
        ...

    def make_player(self, kind: str, seed: int) -> ScriptedPlayer:
        """The scripted player behind a controller kind, ``teacher`` (the game's teacher) or ``random``.

        Raises:
            ValueError: another kind, or a game whose scripted seats play inside its batched ``step``.
        """
        ...

    def encoder(self) -> Encoder:
        """A new record encoder of this game."""
        ...

    def teacher_encoder(self, forge_dir: Path | None) -> Encoder:
        """The encoder teacher data is labelled with (``forge_dir``: the imported Forge folder, or None).

        Raises:
            ml.base.io.DataFileError: a bad card table in ``forge_dir``.
        """
        ...

    def with_teacher_explore(self, explore: float) -> GameSpec:
        """This game with its teacher drawing a share ``explore`` of its moves uniformly
        (``teacher.explore``; the same game where the teacher does not explore)."""
        ...

    def fingerprint(self) -> list[JSONValue]:
        """The values that make this game what a student is trained for (``ml.learn.reuse.training_fingerprint``)."""
        ...

    def tree(self) -> GameTree | None:
        """The game's tree for exact algorithms, or None for a game that has none at hand."""
        ...


class NotZeroSum:
    """The scoring members of ``GameSpec`` for a game that is not two-player zero-sum (a pod ranked by
    first place, a user's env): no chips scale, no par return. The spec gives ``name``."""

    name: str

    @property
    def zero_sum(self) -> bool:
        """False: a return is no strength scale against one opponent."""
        return False

    @property
    def reward_scale(self) -> float:
        """1.0: returns are the game's own."""
        return 1.0

    @property
    def par_return(self) -> float:
        """Raises ValueError: the game is not zero-sum."""
        raise ValueError(f"{self.name} is not a two-player zero-sum game: no par return")
