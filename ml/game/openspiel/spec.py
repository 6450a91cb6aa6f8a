"""Any sequential OpenSpiel game as the game of a run (``game.name: openspiel:<game>``).

============ ================================================================================
env          ``OpenSpielEnv`` (``ml.game.openspiel.env``)
batched      rows of envs (``ml.game.env_game.EnvGame``)
obs_dim      the game's observation tensor size (``game.observation``)
num_actions  ``num_distinct_actions()``
heuristic    ``teacher.policy``: ``MCTSPlayer`` (MCTS, random rollouts), ``UniformTeacher``,
             ``ISMCTSPlayer`` or ``CFRPlayer`` (``ml.game.openspiel.players``)
random       ``UniformPlayer``
encoder      ``ml.game.aec.ObservationEncoder`` (reads the records' ``observation``)
zero-sum     two players and zero-sum or constant-sum utilities; returns scaled by max |utility|
============ ================================================================================

The spec holds plain values only, so it pickles into worker processes; the OpenSpiel game
object is loaded (and cached per process) on first use.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, TypedDict

import pyspiel
from typing_extensions import Unpack

from ml.base.io import JSONValue
from ml.game.env_game import EnvRows, ScriptableEnv
from ml.game.openspiel import players
from ml.game.openspiel.env import ObservationKind, OpenSpielEnv, check_game, observation_of, observation_size
from ml.game.protocol import GameTree
from ml.game.spec import Encoder, ScriptedPlayer

if TYPE_CHECKING:
    from ml.config.sections import GameParams, TeacherParams

PREFIX = "openspiel:"


@functools.lru_cache(maxsize=16)
def load_openspiel(short_name: str, params: tuple[tuple[str, int | float | bool | str], ...] = ()) -> Any:
    """``pyspiel.load_game(short_name, dict(params))``, cached per process.

    Raises:
        ValueError: unknown game or bad parameters (pyspiel's message), or a game the loop
            cannot play (``ml.game.openspiel.env.check_game``).
    """
    if short_name not in pyspiel.registered_names():
        raise ValueError(f"openspiel:{short_name}: no such OpenSpiel game (pyspiel.registered_names() lists them)")
    try:
        game = pyspiel.load_game(short_name, dict(params))
    except pyspiel.SpielError as e:
        raise ValueError(f"openspiel:{short_name} {dict(params)}: {str(e).splitlines()[0]}") from None
    check_game(game)
    return game


class OpenSpielTeacher(TypedDict, total=False):
    """The teacher keywords of :func:`openspiel` (``OpenSpielSpec``'s fields of the same names; absent: their defaults)."""

    mcts_simulations: int
    mcts_rollouts: int
    mcts_uct_c: float
    teacher_policy: str
    cfr_iterations: int


TEACHER_NAMES = {
    "heuristic": "MCTS({s.mcts_simulations} simulations)",
    "uniform": "uniform",
    "ismcts": "ISMCTS({s.mcts_simulations} simulations)",
    "cfr": "CFR+ average policy ({s.cfr_iterations} iterations)",
}
"""``teacher.policy`` -> what :attr:`OpenSpielSpec.teacher_name` says (``s``: the spec)."""


@dataclass(frozen=True)
class OpenSpielSpec(EnvRows):
    """An OpenSpiel game (``ml.game.protocol.GameSpec``; see the module docstring).

    Attributes:
        name: ``openspiel:<game>``.
        num_players, obs_dim, num_actions: the game's sizes.
        openspiel_params: the game's own parameters, as sorted ``(key, value)`` pairs.
        mcts_simulations, mcts_rollouts, mcts_uct_c: the MCTS teacher (and ISMCTS's).
        teacher_policy: which teacher the ``teacher`` kind is (``teacher.policy``: ``heuristic``
            (MCTS), ``uniform``, ``ismcts``, ``cfr``).
        cfr_iterations: CFR+ iterations of the ``cfr`` teacher.
        observation: which tensor a seat observes (``game.observation``, ``ml.game.openspiel.env.ObservationKind``).
        teacher_explore: share of the ``cfr`` and ``ismcts`` teachers' moves drawn uniformly
            (``teacher.explore``; set for the teacher games only, :meth:`with_teacher_explore`).
        min_learner_decisions: a lower bound of one seat's decisions per game.
        env_version: ``""`` (the game's version is OpenSpiel's).
    """

    name: str
    num_players: int
    obs_dim: int
    num_actions: int
    openspiel_params: tuple[tuple[str, Any], ...] = ()
    mcts_simulations: int = 50
    mcts_rollouts: int = 1
    mcts_uct_c: float = 2.0
    teacher_policy: str = "heuristic"
    cfr_iterations: int = 100
    observation: ObservationKind = "observation"
    teacher_explore: float = 0.0
    min_learner_decisions: int = 1
    env_version: str = ""

    def openspiel_game(self) -> Any:
        """The loaded ``pyspiel.Game`` (cached per process)."""
        return load_openspiel(self.name[len(PREFIX) :], self.openspiel_params)

    @property
    def zero_sum(self) -> bool:
        """Two players and ``game.get_type().utility`` ``ZERO_SUM`` or ``CONSTANT_SUM``: one seat's gain
        is the other's loss (more than two players: a return is not one opponent's loss)."""
        if self.num_players != 2:
            return False
        utility = self.openspiel_game().get_type().utility
        return bool(utility in (pyspiel.GameType.Utility.ZERO_SUM, pyspiel.GameType.Utility.CONSTANT_SUM))

    @property
    def reward_scale(self) -> float:
        """``max(|min_utility|, |max_utility|)`` (or 1), the factor ``OpenSpielEnv`` divides its terminal rewards by."""
        game = self.openspiel_game()
        return float(max(abs(game.min_utility()), abs(game.max_utility())) or 1.0)

    @property
    def par_return(self) -> float:
        """Half of OpenSpiel's ``utility_sum()`` (0.0 for a zero-sum game; chips in poker).

        Raises:
            ValueError: a game that is not :attr:`zero_sum`.
        """
        if not self.zero_sum:
            raise ValueError(f"{self.name} is not a two-player zero-sum game: no par return")
        return float(self.openspiel_game().utility_sum()) / 2

    @property
    def teacher_name(self) -> str:
        """The teacher of ``teacher_policy`` with its budget (``MCTS(50 simulations)``)."""
        return TEACHER_NAMES[self.teacher_policy].format(s=self)

    def make_env(self, encoder: Encoder | None = None) -> ScriptableEnv:
        """A fresh ``OpenSpielEnv`` (``encoder`` ignored: the records carry their observation)."""
        return OpenSpielEnv(self.openspiel_game(), self.name, self.observation)

    def make_player(self, kind: str, seed: int) -> ScriptedPlayer:
        """``teacher``: the teacher of ``teacher_policy``; ``random``: ``UniformPlayer``.

        Raises:
            ValueError: another kind; a ``cfr`` teacher on a game too large for it.
        """
        if kind not in ("teacher", "random"):
            raise ValueError(f"no scripted player of kind {kind!r}; use teacher or random")
        if kind == "random":
            return players.UniformPlayer(seed)
        game = self.openspiel_game()
        if self.teacher_policy == "uniform":
            return players.UniformTeacher(seed, self.num_actions)
        if self.teacher_policy == "cfr":
            return players.CFRPlayer(game, seed, self.cfr_iterations, self.teacher_explore)
        if self.teacher_policy == "ismcts":
            return players.ISMCTSPlayer(game, seed, self.mcts_simulations, self.mcts_rollouts, self.mcts_uct_c,
                                        self.teacher_explore)  # fmt: skip
        return players.MCTSPlayer(game, seed, self.mcts_simulations, self.mcts_rollouts, self.mcts_uct_c)

    def with_teacher_explore(self, explore: float) -> OpenSpielSpec:
        """This game with ``teacher_explore`` set (the ``cfr`` and ``ismcts`` teachers read it)."""
        return replace(self, teacher_explore=explore)

    def fingerprint(self) -> list[JSONValue]:
        """``[name, num_players, [[key, value], ...]]`` of the game's parameters."""
        return [self.name, self.num_players, [list(kv) for kv in self.openspiel_params]]

    def tree(self) -> GameTree:
        """The loaded game, observed as the records are (``game.observation``)."""
        return GameTree(self.openspiel_game(), functools.partial(observation_of, kind=self.observation))


def openspiel(
    name: str,
    params: Mapping[str, int | float | bool | str] | None = None,
    observation: ObservationKind = "observation",
    **teacher: Unpack[OpenSpielTeacher],
) -> OpenSpielSpec:
    """An OpenSpiel game by short name (``kuhn_poker``) or full name (``openspiel:kuhn_poker``).

    Args:
        name: the game.
        params: the game's own parameters (``{"players": 4}``).
        observation: ``observation`` or ``information_state`` (``ml.game.openspiel.env.ObservationKind``).
        **teacher: ``mcts_simulations``, ``mcts_rollouts``, ``mcts_uct_c``, ``teacher_policy``, ``cfr_iterations``.

    Raises:
        ValueError: see :func:`load_openspiel`; a ``cfr`` teacher on a game of more than
            ``ml.game.openspiel.players.CFR_MAX_HISTORIES`` histories.
    """
    short = name.removeprefix(PREFIX)
    frozen = tuple(sorted((params or {}).items()))
    game = load_openspiel(short, frozen)
    limit = players.CFR_MAX_HISTORIES
    if teacher.get("teacher_policy") == "cfr" and players.count_histories(game, limit) > limit:
        raise ValueError(
            f"teacher.policy cfr: openspiel:{short} has more than {limit} histories "
            "(CFR+ walks the whole tree every iteration); use ismcts or uniform"
        )
    return OpenSpielSpec(
        PREFIX + short, game.num_players(), observation_size(game, observation), game.num_distinct_actions(),
        openspiel_params=frozen, observation=observation, **teacher,
    )  # fmt: skip


def from_params(game: GameParams, teacher: TeacherParams | None) -> OpenSpielSpec:
    """``ml.game.registry.make_game`` of an OpenSpiel game: :func:`openspiel` with the ``teacher`` knobs.

    Raises:
        ValueError: see :func:`openspiel`; ``game.pod_size`` differing from the game's players.
    """
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
