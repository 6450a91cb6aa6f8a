"""Any PettingZoo AEC environment by import path (``game.name: pettingzoo:<module>:<factory>``), and its players.

:class:`PettingZooEnv` wraps the user's env (``<module>.<factory>(**game.env_kwargs)``) into the
record env the loop plays (``ml.game.env_game.ScriptableEnv``), the way
``ml.game.openspiel_env.OpenSpielEnv`` wraps a pyspiel game:

==================== ================================================================
Agents               ``player_<k>``: the env's ``possible_agents[k]``
Actions              the env's ``Discrete(n)`` (the same ``n`` for every agent, ``start`` 0)
Observation          ``{"observation": float32[obs_dim], "action_mask": int8[n]}``: the env's
                     observation flattened (C order), its mask from the observation dict
                     (``action_mask``) or, failing that, from ``infos[agent]["action_mask"]``
Rewards              the env's ``rewards`` after each step (PettingZoo: that step's rewards)
Outcome              first place = largest return summed over the game (a tie for it is a
                     ``draw``), ranking by return (``ml.game.openspiel_env.outcome_of``)
Scripted state       :class:`Decision`: the acting agent's observation as the env gives it
                     (not flattened) and its mask
Records              ``ml.game.record.OpenSpielRecord`` with ``game`` the run's name and
                     ``env_version`` (:func:`env_version`)
==================== ================================================================

The teacher (controller kind ``heuristic``, the Elo anchor) is ``teacher.policy``: ``random``
(:class:`UniformMaskPlayer`) or ``<module>:<callable>``, called as ``fn(observation, mask)`` (or
``fn(observation, mask, rng=...)`` when it takes an ``rng`` parameter: a seeded
``numpy.random.Generator``) and returning a legal action index (:class:`CallablePlayer`).

Validation (:func:`inspect_env`, at params load): the module imports, the factory exists and
builds an env, every agent's action space is ``Discrete``, the observation has a shape, a mask
is present after ``reset``; each refusal is one :class:`PettingZooError` line naming the param.
"""

from __future__ import annotations

import functools
import importlib
import importlib.metadata
import inspect
import numbers
import re
import sys
from collections.abc import Callable, Hashable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, NamedTuple

import numpy as np
from gymnasium import spaces
from pettingzoo import AECEnv

from ml.base.io import JSONObject, JSONValue
from ml.config.yaml_file import ParamsError
from ml.game.spec import ResetSeeds

PREFIX = "pettingzoo:"
RANDOM_POLICY = "random"
"""``teacher.policy`` value of the uniform legal-move teacher."""


class PettingZooError(ParamsError):
    """A PettingZoo game or teacher the loop cannot play; ``param`` is the params key it is about
    (``name``, ``env_kwargs``, ``pod_size`` of ``game``; ``policy`` of ``teacher``)."""

    def __init__(self, param: str, text: str) -> None:
        super().__init__(text)
        self.param = param

    def __reduce__(self) -> tuple[type[PettingZooError], tuple[str, str]]:
        """Pickled whole, so a worker's refusal (a Ray task's) reaches the driver as it was raised."""
        return PettingZooError, (self.param, str(self))


def import_object(path: str, param: str) -> Any:
    """The object ``<module>:<attr>`` names (``attr`` may be dotted).

    Raises:
        PettingZooError: a malformed path, a module that does not import (its first error
            line), or a missing attribute.
    """
    module_name, sep, attr = path.partition(":")
    if not sep or not module_name or not attr:
        raise PettingZooError(param, f"{path!r} is not '<module>:<callable>'")
    try:
        obj: Any = importlib.import_module(module_name)
    except Exception as e:  # the user's module: any error of its import is its own
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise PettingZooError(param, f"cannot import {module_name!r} (sys.path or an installed package): {first}") from None
    _ship(module_name)
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise PettingZooError(param, f"module {module_name!r} has no {attr!r}")
        obj = getattr(obj, part)
    if not callable(obj):
        raise PettingZooError(param, f"{path!r} is not callable")
    return obj


_SHIPPED: dict[str, None] = {}
"""The user modules imported in this process (an ordered set; :func:`shipped_modules`)."""


@functools.cache
def _project_distributions() -> frozenset[str]:
    """Normalised names of this project's requirements (extras included), which the Ray nodes install."""
    try:
        reqs = importlib.metadata.requires("distill-loop") or []
    except importlib.metadata.PackageNotFoundError:
        reqs = []
    return frozenset(re.split(r"[\s;<>=!~\[(]", r, maxsplit=1)[0].lower().replace("_", "-") for r in reqs)


@functools.cache
def _ship(module_name: str) -> None:
    """Remember the top-level module of ``module_name`` for Ray, unless it is this project or one of its requirements."""
    top = module_name.split(".")[0]
    dists = {d.lower().replace("_", "-") for d in importlib.metadata.packages_distributions().get(top, [])}
    if top in ("ml", "stages") or dists & _project_distributions():
        return
    file = top_module_file(module_name)
    if file is not None:
        _SHIPPED[file] = None


def shipped_modules() -> list[str]:
    """The folders and ``.py`` files of the user modules this process imported for a PettingZoo game or
    teacher (not this project's requirements, which every node installs): ``ml.runtime.ray_cluster.runtime_env``
    puts them into Ray's ``py_modules``, so the cluster needs no copy of them."""
    return list(_SHIPPED)


def factory_path(name: str) -> str:
    """``<module>:<factory>`` of a game name ``pettingzoo:<module>:<factory>``."""
    return name.removeprefix(PREFIX)


def freeze(value: JSONValue) -> Hashable:
    """``value`` with every dict turned into sorted ``(key, value)`` pairs and list into a tuple (hashable)."""
    if isinstance(value, Mapping):
        return tuple(sorted((k, freeze(v)) for k, v in value.items()))
    if isinstance(value, (list, tuple)):
        return tuple(freeze(v) for v in value)
    scalar: Hashable = value
    return scalar


@functools.cache
def _module_version(module_name: str) -> str:
    """``<distribution>==<version>`` of the installed package holding ``module_name``, else ``unpackaged``."""
    top = module_name.split(".")[0]
    dists = importlib.metadata.packages_distributions().get(top, [])
    for dist in dists:
        try:
            return f"{dist}=={importlib.metadata.version(dist)}"
        except importlib.metadata.PackageNotFoundError:
            continue
    return "unpackaged"


def env_version(env: AECEnv, module_name: str) -> str:
    """What names the env's version in records and metrics: ``<metadata name> <distribution>==<version>``,
    e.g. ``connect_four_v3 pettingzoo==1.27.0`` (PettingZoo's ``_v<k>`` suffix is the env's own version;
    ``unpackaged`` for a module on ``PYTHONPATH``; the factory's module name when metadata has no name)."""
    meta = getattr(env, "metadata", None) or {}
    return f"{meta.get('name') or module_name} {_module_version(module_name)}"


@dataclass(frozen=True)
class EnvInfo:
    """What :func:`inspect_env` learnt of an env.

    Attributes:
        num_players: ``len(possible_agents)``.
        obs_dim: size of the flattened observation.
        num_actions: ``n`` of the agents' ``Discrete(n)``.
        env_version: see :func:`env_version`.
        module_file: the file of the factory's top-level module (what Ray ships), or None.
    """

    num_players: int
    obs_dim: int
    num_actions: int
    env_version: str
    module_file: str | None


def _observation_shape(space: Any, agent: str) -> tuple[int, ...]:
    inner = space["observation"] if isinstance(space, spaces.Dict) and "observation" in space.spaces else space
    shape = getattr(inner, "shape", None)
    if isinstance(inner, spaces.Dict) or shape is None:
        raise PettingZooError("name", f"observation space of {agent} is {inner}; a Box (or any space with a shape) is needed")
    return tuple(int(n) for n in shape)


def split_observation(obs: object, info: Mapping[str, object] | None) -> tuple[object, np.ndarray | None]:
    """``(observation, mask)`` of what ``env.observe(agent)`` returned: the ``observation`` and
    ``action_mask`` of a dict observation, else the observation itself and ``info["action_mask"]``
    (None when neither has a mask)."""
    if isinstance(obs, Mapping) and "observation" in obs:
        mask = obs.get("action_mask")
        if mask is None and info is not None:
            mask = info.get("action_mask")
        return obs["observation"], None if mask is None else np.asarray(mask)
    mask = None if info is None else info.get("action_mask")
    return obs, None if mask is None else np.asarray(mask)


def top_module_file(module_name: str) -> str | None:
    """The folder of the package, or the ``.py`` file, that ``module_name``'s top-level module is (None: built in)."""
    top = sys.modules.get(module_name.split(".")[0])
    file = getattr(top, "__file__", None)
    if file is None:
        return None
    path = Path(file).resolve()
    return str(path.parent if path.name == "__init__.py" else path)


@functools.lru_cache(maxsize=16)
def inspect_env(name: str, env_kwargs: tuple[tuple[str, Hashable], ...] = ()) -> EnvInfo:
    """Build the env of ``name`` once, reset it with seed 0 and check what the loop needs (cached per process).

    Args:
        name: ``pettingzoo:<module>:<factory>``.
        env_kwargs: ``game.env_kwargs`` as :func:`freeze` gives them.

    Raises:
        PettingZooError: see the module docstring.
    """
    path = factory_path(name)
    factory = import_object(path, "name")
    try:
        env = factory(**_thaw(env_kwargs))
    except Exception as e:  # the user's factory: any error is its own
        raise PettingZooError("env_kwargs", f"{path}(**{_thaw(env_kwargs)}) failed: {type(e).__name__}: {e}") from None
    if not isinstance(env, AECEnv):
        raise PettingZooError("name", f"{path} returned a {type(env).__name__}, not a PettingZoo AECEnv")
    agents = list(env.possible_agents)
    if len(agents) < 1:
        raise PettingZooError("name", f"{path}: the env has no possible_agents")
    sizes = set()
    for agent in agents:
        act = env.action_space(agent)
        if not isinstance(act, spaces.Discrete):
            raise PettingZooError("name", f"{path}: action space of {agent} is {act}; the loop needs Discrete actions")
        if int(act.start) != 0:
            raise PettingZooError("name", f"{path}: action space of {agent} starts at {act.start}; the loop needs start 0")
        sizes.add(int(act.n))
    if len(sizes) != 1:
        raise PettingZooError("name", f"{path}: the agents' action spaces differ in size ({sorted(sizes)}); they must agree")
    shapes = {_observation_shape(env.observation_space(a), a) for a in agents}
    if len(shapes) != 1:
        raise PettingZooError("name", f"{path}: the agents' observation shapes differ ({sorted(shapes)}); they must agree")
    (num_actions,), (shape,) = sizes, shapes
    env.reset(seed=0)
    agent = env.agent_selection
    _, mask = split_observation(env.observe(agent), env.infos.get(agent))
    if mask is None:
        raise PettingZooError(
            "name", f"{path}: no action_mask for {agent} (neither in the observation dict nor in infos[agent])"
        )
    if mask.shape != (num_actions,):
        raise PettingZooError("name", f"{path}: action_mask of {agent} has shape {mask.shape}, the actions are {num_actions}")
    module_name = path.split(":")[0]
    info = EnvInfo(len(agents), int(np.prod(shape)), num_actions, env_version(env, module_name), top_module_file(module_name))
    env.close()
    return info


def _thaw(frozen: Any) -> Any:
    """The keyword dict of :func:`freeze`'s pairs (nested pairs stay tuples: YAML lists come back as tuples)."""
    return dict(frozen)


class Decision(NamedTuple):
    """What a scripted player of a PettingZoo game sees (``PettingZooEnv.state``).

    Attributes:
        observation: the acting agent's observation as the env gives it (e.g. int8[6, 7, 2]).
        mask: int8[num_actions], 1 for a legal action.
    """

    observation: Any
    mask: np.ndarray


class IllegalMoveError(ValueError):
    """An action outside the acting agent's mask."""


class PettingZooEnv(AECEnv):  # pettingzoo ships no type information (no py.typed)
    """A user's PettingZoo AEC env as the loop's record env (see the module docstring).

    Args:
        name: ``pettingzoo:<module>:<factory>`` (written into records as ``game``).
        env_kwargs: keyword arguments of the factory.
        version: the records' ``env_version`` (:func:`inspect_env`).

    Raises:
        PettingZooError: the factory does not import.
    """

    metadata: ClassVar[dict[str, Any]] = {"name": "pettingzoo_adapter_v0", "is_parallelizable": False, "render_modes": []}

    def __init__(self, name: str, env_kwargs: Mapping[str, JSONValue], version: str) -> None:
        super().__init__()
        self.env: AECEnv = import_object(factory_path(name), "name")(**env_kwargs)
        self.game_name, self.env_version = name, version
        self._names = list(self.env.possible_agents)
        self.possible_agents = [f"player_{i}" for i in range(len(self._names))]
        self._seat = {a: i for i, a in enumerate(self._names)}
        self.num_players = len(self._names)
        act = self.env.action_space(self._names[0])
        self.num_actions = int(act.n)
        self.obs_dim = int(np.prod(_observation_shape(self.env.observation_space(self._names[0]), self._names[0])))
        self.render_mode = None
        self._observation_space = spaces.Dict(
            {
                "observation": spaces.Box(-np.inf, np.inf, shape=(self.obs_dim,), dtype=np.float32),
                "action_mask": spaces.Box(0, 1, shape=(self.num_actions,), dtype=np.int8),
            }
        )
        self._action_space = spaces.Discrete(self.num_actions)
        self._seeds = ResetSeeds()
        self._games = 0
        self.game_id = ""
        self.decisions = 0
        self.returns = np.zeros(self.num_players, np.float64)

    def observation_space(self, agent: str) -> spaces.Dict:
        """The same Dict space for every agent."""
        return self._observation_space

    def action_space(self, agent: str) -> spaces.Discrete:
        """Discrete(num_actions) for every agent."""
        return self._action_space

    def _name(self, inner: str) -> str:
        return self.possible_agents[self._seat[inner]]

    def _sync(self) -> None:
        """Mirror the inner env's agents, selection, rewards and flags under the ``player_<k>`` names."""
        env = self.env
        self.agents = [self._name(a) for a in env.agents]
        self.rewards = {self._name(a): float(r) for a, r in env.rewards.items()}
        for a, r in env.rewards.items():
            self.returns[self._seat[a]] += float(r)
        self.terminations = {self._name(a): bool(t) for a, t in env.terminations.items()}
        self.truncations = {self._name(a): bool(t) for a, t in env.truncations.items()}
        self._cumulative_rewards = {self._name(a): float(r) for a, r in env._cumulative_rewards.items()}
        self.infos = {self._name(a): i for a, i in env.infos.items()}
        if env.agents:
            self.agent_selection = self._name(env.agent_selection)

    def reset(self, seed: int | None = None, options: dict[str, object] | None = None) -> None:
        """Start a new game with ``env.reset(seed=...)`` (later seedless resets draw seeds from ``seed``).

        Args:
            seed: game seed, or None.
            options: ``{"game_index": int}`` names the game ``game-<index>-<seed>``.
        """
        game_seed = self._seeds.next(seed)
        index = (options or {}).get("game_index", self._games)
        self._games += 1
        self.game_id = f"game-{index}-{game_seed}"
        self.decisions = 0
        self.env.reset(seed=game_seed)
        self.returns[:] = 0.0
        self._sync()

    def _acting(self) -> tuple[str, Any, np.ndarray]:
        """``(inner agent, raw observation, int8 mask)`` of the agent to act."""
        agent = self.env.agent_selection
        obs, mask = split_observation(self.env.observe(agent), self.env.infos.get(agent))
        if mask is None:
            raise PettingZooError("name", f"{self.game_name}: no action_mask for {agent} in {self.game_id}")
        return agent, obs, np.asarray(mask, dtype=np.int8)

    def step(self, action: int | None) -> None:
        """Apply ``action`` for ``agent_selection`` (``None`` for a dead agent).

        Raises:
            IllegalMoveError: an action outside the mask.
        """
        agent = self.env.agent_selection
        if self.env.terminations[agent] or self.env.truncations[agent]:
            self.env.step(None)
        else:
            _, _, mask = self._acting()
            if action is None or not 0 <= int(action) < self.num_actions or not mask[int(action)]:
                legal = np.flatnonzero(mask).tolist()
                raise IllegalMoveError(f"{self.game_id}: action {action!r} is not legal for {agent}; legal: {legal}")
            self.env.step(int(action))
            self.decisions += 1
        self._sync()

    @property
    def state(self) -> Decision:
        """The acting agent's :class:`Decision` (what the scripted players act on)."""
        _, obs, mask = self._acting()
        return Decision(obs, mask)

    def observe(self, agent: str) -> dict[str, np.ndarray]:
        """``{"observation": float32[obs_dim], "action_mask": int8[num_actions]}`` of ``agent``
        (the mask all zeros unless ``agent`` is to act)."""
        inner = self._names[self.possible_agents.index(agent)]
        obs, mask = split_observation(self.env.observe(inner), self.env.infos.get(inner))
        out = np.zeros(self.num_actions, np.int8)
        if self.env.agents and inner == self.env.agent_selection and mask is not None:
            out[:] = np.asarray(mask, dtype=np.int8)
        return {"observation": np.asarray(obs, dtype=np.float32).reshape(-1), "action_mask": out}

    def decision_record(self) -> JSONObject:
        """Record of the decision the acting agent is about to make (``ml.game.record.OpenSpielRecord``)."""
        agent, obs, mask = self._acting()
        return {
            "game_id": self.game_id,
            "turn": self.decisions + 1,
            "phase": "play",
            "active_seat": self._seat[agent],
            "game": self.game_name,
            "env_version": self.env_version,
            "num_players": self.num_players,
            "observation": np.asarray(obs, dtype=np.float32).reshape(-1).tolist(),
            "action_mask": mask.astype(int).tolist(),
        }

    def describe_action(self, action: int) -> JSONObject:
        """The record's ``action`` object (call before ``step``): ``type: move``, ``raw`` (the index), ``action_idx``."""
        return {"type": "move", "raw": str(int(action)), "action_idx": int(action)}

    def game_result(self) -> tuple[str, str, int | None, list[int]]:
        """``(game_id, outcome, winner, ranking)`` of the finished game from the summed rewards."""
        from ml.game.openspiel_env import outcome_of

        outcome, winner, ranking = outcome_of(self.returns.tolist())
        return self.game_id, outcome, winner, ranking

    def render(self) -> None:
        """No rendering (``render_modes`` is empty)."""
        return None

    def close(self) -> None:
        """Close the wrapped env."""
        self.env.close()


class UniformMaskPlayer:
    """Uniformly random legal actions from a seeded generator (``teacher.policy: random``, controller ``random``)."""

    def __init__(self, seed: int) -> None:
        self._rng = np.random.default_rng(int(seed) % 2**63)

    def act(self, state: Decision) -> int:
        """A uniformly drawn action of ``state.mask``."""
        legal = np.flatnonzero(state.mask)
        return int(legal[self._rng.integers(len(legal))])


class CallablePlayer:
    """The user's teacher ``fn(observation, mask[, rng=Generator]) -> action`` (``teacher.policy: <module>:<callable>``).

    Args:
        fn: the callable.
        seed: seeds the ``rng`` it gets when it takes one.
        name: its ``<module>:<callable>`` (for errors).

    Raises:
        PettingZooError (from ``act``, ``param`` ``policy``): ``fn`` answered something that is not
            an int, or an action outside the mask.
    """

    def __init__(self, fn: Callable[..., object], seed: int, name: str = "") -> None:
        self._fn, self.name = fn, name
        self._rng = np.random.default_rng(int(seed) % 2**63) if _takes_rng(fn) else None

    def act(self, state: Decision) -> int:
        """``fn``'s action for ``state``."""
        extra = {} if self._rng is None else {"rng": self._rng}
        answer = self._fn(state.observation, state.mask.copy(), **extra)
        legal = np.flatnonzero(state.mask).tolist()
        if isinstance(answer, (bool, np.bool_)) or not isinstance(answer, (numbers.Integral, np.integer)):
            raise PettingZooError(
                "policy",
                f"teacher.policy {self.name}: answered {answer!r} ({type(answer).__name__}), not an action index; legal: {legal}",
            )
        action = int(answer)
        if not 0 <= action < len(state.mask) or not state.mask[action]:
            raise PettingZooError("policy", f"teacher.policy {self.name}: answered action {action}, not legal: {legal}")
        return action


def _takes_rng(fn: Callable[..., Any]) -> bool:
    try:
        return "rng" in inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return False


def check_teacher_policy(value: str) -> str:
    """``teacher.policy`` when it is ``random`` or an importable ``<module>:<callable>``; other values
    (``heuristic`` and the OpenSpiel teachers) are left to the rest of the validation.

    Raises:
        PettingZooError: a ``<module>:<callable>`` that does not import or is not callable.
    """
    if ":" in value:
        import_object(value, "policy")
    return value


def make_teacher(policy: str, seed: int) -> UniformMaskPlayer | CallablePlayer:
    """The teacher of a PettingZoo game: ``random`` or ``<module>:<callable>`` (see the module docstring).

    Raises:
        PettingZooError: another value (``policy``), or a callable that does not import.
    """
    if policy == RANDOM_POLICY:
        return UniformMaskPlayer(seed)
    if ":" not in policy:
        raise PettingZooError(
            "policy",
            f"a PettingZoo game's teacher is 'random' or '<module>:<callable>' (observation, mask -> action), not {policy!r}",
        )
    return CallablePlayer(import_object(policy, "policy"), seed, policy)


def policy_module_file(policy: str) -> str | None:
    """The file Ray ships for a ``<module>:<callable>`` teacher (``top_module_file``), else None."""
    if ":" not in policy:
        return None
    import_object(policy, "policy")
    return top_module_file(policy.split(":")[0])
