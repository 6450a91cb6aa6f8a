"""Any PettingZoo AEC env as the game of a run (``game.name: pettingzoo:<module>:<factory>``, ``game.env_kwargs``).

============ ================================================================================
env          ``PettingZooEnv`` (``ml.game.pettingzoo.env``) over the user's env
batched      rows of envs (``ml.game.env_game.EnvGame``)
obs_dim      the flattened observation's size
num_actions  the env's ``Discrete(n)``
heuristic    ``teacher.policy``: ``random`` or ``<module>:<callable>`` (``ml.game.pettingzoo.players``)
random       a uniform legal move
encoder      ``ml.game.aec.ObservationEncoder``; the records name the game and ``env_version``
zero-sum     no (the returns are the env's rewards, unscaled: ``ml.game.protocol.NotZeroSum``)
============ ================================================================================
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ml.base.io import JSONValue
from ml.game.env_game import EnvRows, ScriptableEnv
from ml.game.pettingzoo.env import PettingZooEnv
from ml.game.pettingzoo.load import PettingZooError, freeze, inspect_env
from ml.game.pettingzoo.players import RANDOM_POLICY, make_teacher
from ml.game.protocol import NotZeroSum
from ml.game.spec import Encoder, ScriptedPlayer

if TYPE_CHECKING:
    from ml.config.sections import GameParams, TeacherParams

PREFIX = "pettingzoo:"


@dataclass(frozen=True)
class PettingZooSpec(EnvRows, NotZeroSum):
    """A user's PettingZoo AEC env (``ml.game.protocol.GameSpec``; see the module docstring).

    Attributes:
        name: ``pettingzoo:<module>:<factory>``.
        num_players, obs_dim, num_actions: the env's sizes (``ml.game.pettingzoo.load.inspect_env``).
        env_kwargs: the factory's arguments (``ml.game.pettingzoo.load.freeze``d).
        teacher_policy: the teacher (``teacher.policy``: ``random`` or ``<module>:<callable>``).
        env_version: ``ml.game.pettingzoo.load.env_version`` (records, metrics).
        min_learner_decisions: a lower bound of one seat's decisions per game.
    """

    name: str
    num_players: int
    obs_dim: int
    num_actions: int
    env_kwargs: tuple[tuple[str, Any], ...] = ()
    teacher_policy: str = RANDOM_POLICY
    env_version: str = ""
    min_learner_decisions: int = 1

    @property
    def teacher_name(self) -> str:
        """``teacher.policy <policy>``."""
        return f"teacher.policy {self.teacher_policy}"

    def make_env(self, encoder: Encoder | None = None) -> ScriptableEnv:
        """A fresh ``PettingZooEnv`` (``encoder`` ignored: the records carry their observation)."""
        return PettingZooEnv(self.name, dict(self.env_kwargs), self.env_version)

    def make_player(self, kind: str, seed: int) -> ScriptedPlayer:
        """``teacher``: the teacher of ``teacher_policy``; ``random``: a uniform legal move
        (``ml.game.pettingzoo.players.make_teacher``).

        Raises:
            ValueError: another kind.
            PettingZooError: a teacher callable that does not import.
        """
        if kind not in ("teacher", "random"):
            raise ValueError(f"no scripted player of kind {kind!r}; use teacher or random")
        return make_teacher(self.teacher_policy if kind == "teacher" else RANDOM_POLICY, seed)

    def with_teacher_explore(self, explore: float) -> PettingZooSpec:
        """This game: its teachers draw every move themselves."""
        return self

    def fingerprint(self) -> list[JSONValue]:
        """``[name, num_players, [], [[key, value], ...] of env_kwargs, teacher_policy, env_version]``."""
        return [self.name, self.num_players, [], [list(kv) for kv in self.env_kwargs], self.teacher_policy, self.env_version]

    def tree(self) -> None:
        """None: an env is played forward only."""
        return None


def pettingzoo(name: str, env_kwargs: Mapping[str, JSONValue] | None = None, policy: str = RANDOM_POLICY) -> PettingZooSpec:
    """A PettingZoo AEC env by import path (``pettingzoo:<module>:<factory>``), checked by
    ``ml.game.pettingzoo.load.inspect_env`` (cached per process).

    Args:
        name: the game, with or without the ``pettingzoo:`` prefix.
        env_kwargs: keyword arguments of the factory (``game.env_kwargs``).
        policy: the teacher, ``random`` or ``<module>:<callable>`` (``teacher.policy``).

    Raises:
        PettingZooError: see ``inspect_env``; ``param`` names the key.
    """
    full = name if name.startswith(PREFIX) else PREFIX + name
    frozen = tuple(sorted((k, freeze(v)) for k, v in (env_kwargs or {}).items()))
    info = inspect_env(full, frozen)
    return PettingZooSpec(full, info.num_players, info.obs_dim, info.num_actions, frozen, policy, info.env_version)


def from_params(game: GameParams, teacher: TeacherParams | None) -> PettingZooSpec:
    """``ml.game.registry.make_game`` of a PettingZoo game: :func:`pettingzoo` with ``game.env_kwargs`` and ``teacher.policy``.

    Raises:
        PettingZooError: a refused env or teacher, or ``pod_size`` differing from ``possible_agents``.
    """
    policy = RANDOM_POLICY if teacher is None else teacher.policy
    if policy != RANDOM_POLICY and ":" not in policy:
        raise PettingZooError("policy", f"{policy!r}: a PettingZoo game's teacher is 'random' or '<module>:<callable>'")
    spec = pettingzoo(game.name, game.env_kwargs, policy)
    if spec.num_players != game.pod_size:
        raise PettingZooError(
            "pod_size", f"{game.pod_size}, but {game.name} has {spec.num_players} possible_agents; set pod_size to it"
        )
    return spec
