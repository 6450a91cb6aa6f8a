"""Typed interfaces between the generic learning modules and a game.

The generic modules (``ml.data.dataset``, ``ml.play.runner``, ``ml.play.collect``, ``ml.learn.ppo``, ``ml.judge.tournament``)
see a game only through these protocols and ``ml.game.protocol.GameSpec``; they never import a
game package (``ml.game.commander``, ``ml.game.openspiel``, ``ml.game.pettingzoo``).
``ml.game.registry`` makes the spec of a run's game.

==================== ====================================================================
``Encoder``          decision record -> ``float32[obs_dim]``, its label and legal actions
``ScriptedPlayer``   a non-learning controller (teacher, random): ``act(state) -> action``
``Game``             N games stepped together as arrays (``ml.game.protocol``)
==================== ====================================================================
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Any, Protocol

import numpy as np

from ml.game.record import RecordLike


class Encoder(Protocol):
    """Encoder and labeler of one game's decision records (dicts or ``ml.game.record`` models).

    Implementations: ``ml.game.commander.encoding.RecordEncoder`` (seat views),
    ``ml.game.aec.ObservationEncoder`` (the observation stored in OpenSpiel records),
    ``ml.game.commander.forge.ForgeEncoder`` (adds ``unlabelled``).

    Attributes:
        obs_dim: observation length.
        num_actions: size of the action space.
    """

    obs_dim: int
    num_actions: int

    def __call__(self, record: RecordLike) -> np.ndarray:
        """float32[obs_dim] observation of one record."""
        ...

    def encode_batch(self, records: Sequence[RecordLike]) -> np.ndarray:
        """float32[N, obs_dim] observations of ``records``."""
        ...

    def label(self, record: RecordLike) -> int | None:
        """Action index of the record's action, or None when it is not trainable."""
        ...

    def action_mask(self, record: RecordLike) -> np.ndarray:
        """bool[num_actions] legal actions of the record (all-ones when it stores none)."""
        ...


class ScriptedPlayer(Protocol):
    """A controller that is not a network: the game's teacher or the uniform random player."""

    def act(self, state: Any) -> int:
        """The action to take in the game state ``state`` (the env's ``state`` attribute)."""
        ...


class ResetSeeds:
    """The seed of each reset of an env: the ``seed`` given, which also seeds the draws of later
    seedless resets, or the next 31-bit draw of the generator the last given seed started (OS
    entropy before any). Python's ``random.Random``, so a seed gives the same games everywhere."""

    def __init__(self) -> None:
        self._rng = random.Random()

    def next(self, seed: int | None) -> int:
        """The game seed of a reset with ``seed`` (None: drawn)."""
        if seed is not None:
            self._rng = random.Random(seed)
            return seed
        return self._rng.getrandbits(31)
