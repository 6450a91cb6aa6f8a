"""Loading a user's PettingZoo AEC env by import path (``game.name: pettingzoo:<module>:<factory>``) and checking it.

Validation (:func:`inspect_env`, at params load): the module imports, the factory exists and
builds an env, every agent's action space is ``Discrete``, the observation has a shape, a mask
is present after ``reset``; each refusal is one :class:`PettingZooError` line naming the param.
The user modules imported here are remembered for Ray (:func:`shipped_modules`).
"""

from __future__ import annotations

import functools
import importlib
import importlib.metadata
import re
import sys
from collections.abc import Hashable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from gymnasium import spaces
from pettingzoo import AECEnv

from ml.base.io import JSONValue
from ml.config.yaml_file import ParamsError

PREFIX = "pettingzoo:"


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


def observation_shape(space: object, agent: str) -> tuple[int, ...]:
    """The shape of ``agent``'s observation in ``space`` (the ``observation`` of a Dict space).

    Raises:
        PettingZooError: a space without a shape (``param`` ``name``).
    """
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
    shapes = {observation_shape(env.observation_space(a), a) for a in agents}
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
