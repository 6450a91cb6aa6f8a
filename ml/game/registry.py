"""Which game the loop plays: the built-in Commander pod, any sequential OpenSpiel game, or a PettingZoo env.

``params.yaml`` names the game (``game.name``: ``commander`` or ``openspiel:<game>`` with
``game.openspiel_params``); :func:`make_game` turns the ``game`` and ``teacher`` sections into
a :class:`GameSpec`, the one object that rollout, stages and the dataset builder ask for the
environment, the observation and action sizes, the scripted players behind the controller
kinds ``heuristic`` (the game's teacher) and ``random``, and the record encoder.

============ ======================================= ========================================
             ``commander``                           ``openspiel:<game>``
============ ======================================= ========================================
env          ``CommanderPodEnv`` (one core game)     ``OpenSpielEnv`` (``ml.game.openspiel_env``)
batched      ``CoreGame`` (``ml.game.commander.core``) ``EnvGame`` (rows of envs, ``ml.game.env_game``)
obs_dim      ``ml.game.commander.encoding.OBS_DIM``                 the game's observation tensor size
num_actions  ``ml.game.commander.actions.NUM_ACTIONS``              ``num_distinct_actions()``
heuristic    the core's heuristic seat (Forge-like)  ``teacher.policy``: ``MCTSPlayer`` (MCTS, random
                                                     rollouts), ``UniformTeacher``, ``ISMCTSPlayer``
                                                     or ``CFRPlayer`` (``ml.game.openspiel_players``)
random       the core's random seat                  ``UniformPlayer``
encoder      ``RecordEncoder`` (reads ``players``)   ``ObservationEncoder`` (reads ``observation``)
============ ======================================= ========================================

``pettingzoo:<module>:<factory>`` (with ``game.env_kwargs``) is any PettingZoo AEC env the
user's module builds: rows of ``PettingZooEnv`` (``ml.game.pettingzoo_env``) in an ``EnvGame``,
the flattened observation and the env's action count, ``heuristic`` = ``teacher.policy``
(``random`` or ``<module>:<callable>``), ``random`` = a uniform legal move, the
``ObservationEncoder``; its records are OpenSpiel-kind records naming the game and ``env_version``.

A ``GameSpec`` holds plain values only, so it pickles into worker processes; the OpenSpiel
game object is loaded (and cached per process) on first use.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, TypedDict

import numpy as np
from typing_extensions import Unpack

from ml.base.io import JSONValue
from ml.game.record import RecordLike, record_field
from ml.game.spec import Encoder, ScriptedPlayer

if TYPE_CHECKING:
    from ml.config.sections import GameParams, TeacherParams
    from ml.game.commander.forge_record import DecisionRecord
    from ml.game.env_game import RecordingEnv, ScriptableEnv
    from ml.game.protocol import Game
    from ml.game.record import OpenSpielRecord

ObservationKind = Literal["observation", "information_state"]
"""What a seat of an OpenSpiel game observes (``game.observation``; ``ml.game.openspiel_env.observation_of``)."""

TeacherPolicy = Literal["heuristic", "uniform", "ismcts", "cfr"]
"""The teachers of OpenSpiel games (``teacher.policy``): MCTS, uniform, information-set MCTS, CFR+'s average policy."""

COMMANDER = "commander"
OPENSPIEL_PREFIX = "openspiel:"
PETTINGZOO_PREFIX = "pettingzoo:"


@functools.lru_cache(maxsize=16)
def load_openspiel(short_name: str, params: tuple[tuple[str, int | float | bool | str], ...] = ()) -> Any:
    """``pyspiel.load_game(short_name, dict(params))``, cached per process.

    Raises:
        ValueError: unknown game or bad parameters (pyspiel's message), or a game the loop
            cannot play (``ml.game.openspiel_env.check_game``).
    """
    import pyspiel  # lazy: the commander never needs it

    from ml.game.openspiel_env import check_game

    if short_name not in pyspiel.registered_names():
        raise ValueError(f"openspiel:{short_name}: no such OpenSpiel game (pyspiel.registered_names() lists them)")
    try:
        game = pyspiel.load_game(short_name, dict(params))
    except pyspiel.SpielError as e:
        raise ValueError(f"openspiel:{short_name} {dict(params)}: {str(e).splitlines()[0]}") from None
    check_game(game)
    return game


class ObservationEncoder:
    """Encoder and labeler of records that carry their own observation (OpenSpiel games).

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


class OpenSpielTeacher(TypedDict, total=False):
    """The teacher keywords of :func:`openspiel` (``GameSpec``'s fields of the same names; absent: their defaults)."""

    mcts_simulations: int
    mcts_rollouts: int
    mcts_uct_c: float
    teacher_policy: str
    cfr_iterations: int


@dataclass(frozen=True)
class GameSpec:
    """The game of a run (see the module docstring).

    Attributes:
        name: ``commander``, ``openspiel:<game>`` or ``pettingzoo:<module>:<factory>``.
        num_players: seats per game (``game.pod_size``).
        obs_dim: observation length.
        num_actions: size of the action space.
        max_turns: the commander's round cap (unused by OpenSpiel games, which end by their rules).
        openspiel_params: the game's own parameters, as sorted ``(key, value)`` pairs.
        mcts_simulations, mcts_rollouts, mcts_uct_c: the MCTS teacher of OpenSpiel games (and ISMCTS's).
        teacher_policy: which teacher the ``heuristic`` kind is (``teacher.policy``; the commander's is ``heuristic``).
        cfr_iterations: CFR+ iterations of the ``cfr`` teacher.
        teacher_explore: share of the ``cfr`` and ``ismcts`` teachers' moves drawn uniformly
            (``teacher.explore``; set for the teacher games only, ``ml.play.teacher.write_teacher_batch``).
        observation: which OpenSpiel tensor a seat observes (``game.observation``,
            ``ml.game.openspiel_env.ObservationKind``).
        min_learner_decisions: a lower bound of one seat's decisions per game, to size game lists.
        env_kwargs: a PettingZoo game's factory arguments (``ml.game.pettingzoo_env.freeze``d).
        teacher_policy: a PettingZoo game's teacher (``teacher.policy``).
        env_version: a PettingZoo game's ``ml.game.pettingzoo_env.env_version`` (records, metrics).
    """

    name: str
    num_players: int
    obs_dim: int
    num_actions: int
    max_turns: int = 30
    openspiel_params: tuple[tuple[str, Any], ...] = ()
    mcts_simulations: int = 50
    mcts_rollouts: int = 1
    mcts_uct_c: float = 2.0
    min_learner_decisions: int = 10
    env_kwargs: tuple[tuple[str, Any], ...] = ()
    teacher_policy: str = "heuristic"
    env_version: str = ""
    cfr_iterations: int = 100
    observation: ObservationKind = "observation"
    teacher_explore: float = 0.0

    @property
    def is_openspiel(self) -> bool:
        return self.name.startswith(OPENSPIEL_PREFIX)

    @property
    def is_pettingzoo(self) -> bool:
        """A user's PettingZoo AEC env (``pettingzoo:<module>:<factory>``, ``ml.game.pettingzoo_env``)."""
        return self.name.startswith(PETTINGZOO_PREFIX)

    @property
    def is_commander(self) -> bool:
        """The built-in pod; every other game's records carry their own observation."""
        return self.name == COMMANDER

    def _pettingzoo_env(self) -> ScriptableEnv:
        from ml.game.pettingzoo_env import PettingZooEnv

        return PettingZooEnv(self.name, dict(self.env_kwargs), self.env_version)

    @property
    def zero_sum(self) -> bool:
        """Whether the game is judged in its own currency, the mean return (``ml.judge.mean_return.ReturnSPRT``).

        True for a two-player OpenSpiel game whose type declares zero-sum or constant-sum
        utilities (``game.get_type().utility``: ``ZERO_SUM`` or ``CONSTANT_SUM``): one seat's
        gain is the other's loss, so a player's mean return against another is a strength
        scale with a known parity (:attr:`par_return`). False for the commander (a pod of
        ``pod_size`` players ranked by first place) and for any other OpenSpiel game
        (general-sum, or more than two players: a return there is not one opponent's loss).
        """
        if not self.is_openspiel or self.num_players != 2:
            return False
        import pyspiel  # lazy: the commander never needs it

        utility = self.openspiel_game().get_type().utility
        return utility in (pyspiel.GameType.Utility.ZERO_SUM, pyspiel.GameType.Utility.CONSTANT_SUM)

    @property
    def reward_scale(self) -> float:
        """Chips per unit of a seat's reward: the returns of ``ml.play.rollout.GameResult`` times this
        are the game's own utilities. OpenSpiel games: ``max(|min_utility|, |max_utility|)`` (or
        1), the factor ``OpenSpielEnv`` divides its terminal rewards by; the commander: 1.0."""
        if not self.is_openspiel:
            return 1.0
        game = self.openspiel_game()
        return float(max(abs(game.min_utility()), abs(game.max_utility())) or 1.0)

    @property
    def par_return(self) -> float:
        """The mean return of a player against an equal one in a :attr:`zero_sum` game: half
        of OpenSpiel's ``utility_sum()`` (0.0 for a zero-sum game; chips in poker).

        Raises:
            ValueError: a game that is not :attr:`zero_sum`.
        """
        if not self.zero_sum:
            raise ValueError(f"{self.name} is not a two-player zero-sum game: no par return")
        return float(self.openspiel_game().utility_sum()) / 2

    def openspiel_game(self) -> Any:
        """The loaded ``pyspiel.Game`` (cached). Raises ValueError for the commander."""
        if not self.is_openspiel:
            raise ValueError(f"{self.name} is not an OpenSpiel game")
        return load_openspiel(self.name[len(OPENSPIEL_PREFIX) :], self.openspiel_params)

    def make_env(self, encoder: Encoder | None = None) -> RecordingEnv:
        """A fresh PettingZoo AEC env of one game (``encoder``: the commander's, else ignored):
        ``CommanderPodEnv`` (one game of the compiled core), ``OpenSpielEnv`` or ``PettingZooEnv``."""
        if self.is_pettingzoo:
            return self._pettingzoo_env()
        if self.is_openspiel:
            from ml.game.openspiel_env import OpenSpielEnv

            return OpenSpielEnv(self.openspiel_game(), self.name, self.observation)
        from ml.game.commander.env import CommanderPodEnv

        return CommanderPodEnv(pod_size=self.num_players, max_turns=self.max_turns, encoder=encoder)

    def _scriptable_env(self) -> ScriptableEnv:
        """A fresh env the rows of ``EnvGame`` hold: ``OpenSpielEnv`` or ``PettingZooEnv``."""
        if self.is_pettingzoo:
            return self._pettingzoo_env()
        from ml.game.openspiel_env import OpenSpielEnv

        return OpenSpielEnv(self.openspiel_game(), self.name, self.observation)

    def batched(self, num_games: int, encoder: Encoder | None = None) -> Game:
        """The game as a batched ``ml.game.protocol.Game`` of ``num_games`` rows: the commander's
        compiled core (``CoreGame``, its scripted seats played inside its ``step``), or rows of
        AEC envs (``ml.game.env_game.EnvGame``: OpenSpiel states, PettingZoo envs) with the
        scripted players of :meth:`make_player`.

        Args:
            num_games: rows (games in flight).
            encoder: the commander's: the one its core implements (``RecordEncoder``) or None;
                ignored by other games (their records carry their observation).

        Raises:
            ValueError: a commander ``encoder`` other than ``RecordEncoder`` (the core encodes
                live games with the compiled encoder only).
        """
        if self.is_commander:
            from ml.game.commander.core.game import CoreGame
            from ml.game.commander.encoding import RecordEncoder

            if encoder is not None and type(encoder) is not RecordEncoder:
                raise ValueError(f"the commander's core plays with its RecordEncoder, not {type(encoder).__name__}")
            return CoreGame(num_games, self.num_players, self.max_turns)
        from ml.game.env_game import EnvGame

        return EnvGame(self._scriptable_env, self.make_player, num_games, self.num_players, self.obs_dim,
                       self.num_actions)  # fmt: skip

    def warm_up(self) -> None:
        """Compile, or load from numba's cache, the game's compiled kernels now (the commander core:
        about 70 s cold on a 2-core machine, 2-3 s cached; ``ml.game.commander.core.warmup``), so that
        what a stage times and shows in its progress bar afterwards is play. Once per process; other
        games have nothing to compile."""
        if self.is_commander:
            from ml.game.commander.core.warmup import warm_up

            warm_up()

    def make_player(self, kind: str, seed: int) -> ScriptedPlayer:
        """The scripted player behind a controller kind of an OpenSpiel or PettingZoo game:
        ``heuristic`` (the game's teacher, ``teacher_policy``) or ``random``. The commander has
        none: its scripted seats play inside its core (``CoreGame``; ``seat_kind``).

        Raises:
            ValueError: another kind; the commander; a ``cfr`` teacher on a game too large for it.
        """
        if kind not in ("heuristic", "random"):
            raise ValueError(f"no scripted player of kind {kind!r}; use heuristic or random")
        if self.is_commander:
            raise ValueError("the commander's scripted seats play inside its core (CoreGame), not as player objects")
        if self.is_pettingzoo:  # the teacher is teacher.policy (ml.game.pettingzoo_env.make_teacher)
            from ml.game.pettingzoo_env import RANDOM_POLICY, make_teacher

            return make_teacher(self.teacher_policy if kind == "heuristic" else RANDOM_POLICY, seed)
        from ml.game import openspiel_players as ose

        if kind == "random":
            return ose.UniformPlayer(seed)
        game = self.openspiel_game()
        if self.teacher_policy == "uniform":
            return ose.UniformTeacher(seed, self.num_actions)
        if self.teacher_policy == "cfr":
            return ose.CFRPlayer(game, seed, self.cfr_iterations, self.teacher_explore)
        if self.teacher_policy == "ismcts":
            return ose.ISMCTSPlayer(game, seed, self.mcts_simulations, self.mcts_rollouts, self.mcts_uct_c,
                                    self.teacher_explore)  # fmt: skip
        return ose.MCTSPlayer(game, seed, self.mcts_simulations, self.mcts_rollouts, self.mcts_uct_c)

    def encoder(self) -> Encoder:
        """A new record encoder of this game (``RecordEncoder`` or ``ObservationEncoder``)."""
        if not self.is_commander:
            return ObservationEncoder(self.obs_dim, self.num_actions)
        from ml.game.commander.encoding import RecordEncoder

        return RecordEncoder()

    def teacher_encoder(self, forge_dir: Path | None) -> Encoder:
        """The encoder teacher data is labelled with: for the commander, ``encoder()`` with the
        imported Forge folder's card table and partial attack labels
        (``ml.game.commander.forge.teacher_encoder``); any other game's ``encoder()``.

        Args:
            forge_dir: the imported Forge folder (``data/forge``), or None.

        Raises:
            ml.base.io.DataFileError: a bad card table in ``forge_dir``.
        """
        if not self.is_commander:
            return self.encoder()
        from ml.game.commander.forge import teacher_encoder

        return teacher_encoder(self.encoder(), forge_dir)

    @property
    def teacher_name(self) -> str:
        """What the ``heuristic`` controller is in this game (for logs and reports)."""
        if self.is_pettingzoo:
            return f"teacher.policy {self.teacher_policy}"
        if not self.is_openspiel:
            return "Forge-like heuristic"
        return {
            "heuristic": f"MCTS({self.mcts_simulations} simulations)",
            "uniform": "uniform",
            "ismcts": f"ISMCTS({self.mcts_simulations} simulations)",
            "cfr": f"CFR+ average policy ({self.cfr_iterations} iterations)",
        }[self.teacher_policy]


def record_model(obj: object) -> type[DecisionRecord] | type[OpenSpielRecord]:
    """The record kind of a JSON object or record: ``OpenSpielRecord`` when it has an
    ``observation``, else the commander's (Forge's) ``DecisionRecord``."""
    from ml.game.commander.forge_record import DecisionRecord
    from ml.game.record import OpenSpielRecord

    if isinstance(obj, (DecisionRecord, OpenSpielRecord)):
        return type(obj)
    return OpenSpielRecord if isinstance(obj, dict) and "observation" in obj else DecisionRecord


def commander(pod_size: int = 4, max_turns: int = 30) -> GameSpec:
    """The built-in Commander pod."""
    from ml.game.commander.actions import NUM_ACTIONS
    from ml.game.commander.encoding import OBS_DIM

    return GameSpec(COMMANDER, pod_size, OBS_DIM, NUM_ACTIONS, max_turns, min_learner_decisions=10)


def openspiel(
    name: str,
    params: Mapping[str, int | float | bool | str] | None = None,
    observation: ObservationKind = "observation",
    **teacher: Unpack[OpenSpielTeacher],
) -> GameSpec:
    """An OpenSpiel game by short name (``kuhn_poker``) or full name (``openspiel:kuhn_poker``).

    Args:
        name: the game.
        params: the game's own parameters (``{"players": 4}``).
        observation: ``observation`` or ``information_state`` (``ml.game.openspiel_env.ObservationKind``).
        **teacher: ``mcts_simulations``, ``mcts_rollouts``, ``mcts_uct_c``, ``teacher_policy``, ``cfr_iterations``.

    Raises:
        ValueError: see :func:`load_openspiel`; a ``cfr`` teacher on a game of more than
            ``ml.game.openspiel_players.CFR_MAX_HISTORIES`` histories.
    """
    from ml.game.openspiel_env import observation_size
    from ml.game.openspiel_players import CFR_MAX_HISTORIES, count_histories

    short = name.removeprefix(OPENSPIEL_PREFIX)
    frozen = tuple(sorted((params or {}).items()))
    game = load_openspiel(short, frozen)
    if teacher.get("teacher_policy") == "cfr" and count_histories(game, CFR_MAX_HISTORIES) > CFR_MAX_HISTORIES:
        raise ValueError(
            f"teacher.policy cfr: openspiel:{short} has more than {CFR_MAX_HISTORIES} histories "
            "(CFR+ walks the whole tree every iteration); use ismcts or uniform"
        )
    return GameSpec(
        OPENSPIEL_PREFIX + short, game.num_players(), observation_size(game, observation), game.num_distinct_actions(),
        openspiel_params=frozen, min_learner_decisions=1, observation=observation, **teacher,
    )  # fmt: skip


def pettingzoo(name: str, env_kwargs: Mapping[str, JSONValue] | None = None, policy: str = "random") -> GameSpec:
    """A PettingZoo AEC env by import path (``pettingzoo:<module>:<factory>``), checked by
    ``ml.game.pettingzoo_env.inspect_env`` (cached per process).

    Args:
        name: the game, with or without the ``pettingzoo:`` prefix.
        env_kwargs: keyword arguments of the factory (``game.env_kwargs``).
        policy: the teacher, ``random`` or ``<module>:<callable>`` (``teacher.policy``).

    Raises:
        ml.game.pettingzoo_env.PettingZooError: see ``inspect_env``; ``param`` names the key.
    """
    from ml.game.pettingzoo_env import freeze, inspect_env

    full = name if name.startswith(PETTINGZOO_PREFIX) else PETTINGZOO_PREFIX + name
    frozen = tuple(sorted((k, freeze(v)) for k, v in (env_kwargs or {}).items()))
    info = inspect_env(full, frozen)
    return GameSpec(
        full, info.num_players, info.obs_dim, info.num_actions, min_learner_decisions=1, env_kwargs=frozen,
        teacher_policy=policy, env_version=info.env_version,
    )  # fmt: skip


def make_game(game: GameParams, teacher: TeacherParams | None = None) -> GameSpec:
    """The GameSpec of the ``game`` and ``teacher`` sections of params (``ml.config.params``).

    Args:
        game: ``GameParams`` (``name``, ``pod_size``, ``max_turns``, ``openspiel_params``).
        teacher: ``TeacherParams`` (``policy``, ``cfr_iterations``, ``mcts_*``), or None for the defaults.

    Raises:
        ValueError: an unknown game name, ``pod_size`` differing from the game's players, a
            ``teacher.policy`` other than ``heuristic`` for the commander, a ``cfr`` teacher on a
            game too large for it.
    """
    if game.name == COMMANDER:
        if teacher is not None and teacher.policy != "heuristic":
            raise ValueError(f"teacher.policy {teacher.policy!r} is for OpenSpiel games; the commander's teacher is heuristic")
        return commander(game.pod_size, game.max_turns)
    if game.name.startswith(PETTINGZOO_PREFIX):
        return _pettingzoo_game(game, teacher)
    if not game.name.startswith(OPENSPIEL_PREFIX):
        raise ValueError(
            f"game.name must be {COMMANDER!r}, 'openspiel:<game>' or 'pettingzoo:<module>:<factory>', got {game.name!r}"
        )
    knobs: OpenSpielTeacher = {}
    if teacher is not None:
        knobs = OpenSpielTeacher(
            mcts_simulations=teacher.mcts_simulations,
            mcts_rollouts=teacher.mcts_rollouts,
            mcts_uct_c=teacher.mcts_uct_c,
            cfr_iterations=teacher.cfr_iterations,
            teacher_policy=teacher.policy,
        )
    spec = openspiel(game.name, game.openspiel_params, game.observation, **knobs)
    if spec.num_players != game.pod_size:
        raise ValueError(
            f"game.pod_size is {game.pod_size} but {game.name} has {spec.num_players} players; set pod_size to it"
        )
    return spec


def _pettingzoo_game(game: GameParams, teacher: TeacherParams | None) -> GameSpec:
    """``make_game`` of a PettingZoo game: :func:`pettingzoo` with ``game.env_kwargs`` and ``teacher.policy``.

    Raises:
        ml.game.pettingzoo_env.PettingZooError: a refused env, or ``pod_size`` differing from ``possible_agents``.
    """
    from ml.game.pettingzoo_env import PettingZooError

    policy = "random" if teacher is None else teacher.policy
    if policy != "random" and ":" not in policy:
        raise PettingZooError("policy", f"{policy!r}: a PettingZoo game's teacher is 'random' or '<module>:<callable>'")
    spec = pettingzoo(game.name, game.env_kwargs, policy)
    if spec.num_players != game.pod_size:
        raise PettingZooError(
            "pod_size", f"{game.pod_size}, but {game.name} has {spec.num_players} possible_agents; set pod_size to it"
        )
    return spec
