"""The players of a PettingZoo game: its teacher (``teacher.policy``) and the uniform legal move.

The teacher (controller kind ``teacher``, the Elo anchor) is ``teacher.policy``: ``random``
(:class:`UniformMaskPlayer`) or ``<module>:<callable>``, called as ``fn(observation, mask)`` (or
``fn(observation, mask, rng=...)`` when it takes an ``rng`` parameter: a seeded
``numpy.random.Generator``) and returning a legal action index (:class:`CallablePlayer`). Both act
on the ``ml.game.pettingzoo.env.Decision`` of the agent to act.
"""

from __future__ import annotations

import inspect
import numbers
from collections.abc import Callable
from typing import Any

import numpy as np

from ml.game.pettingzoo.env import Decision
from ml.game.pettingzoo.load import PettingZooError, import_object, top_module_file

RANDOM_POLICY = "random"
"""``teacher.policy`` value of the uniform legal-move teacher."""


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
