"""The batched ``Game`` protocol: N games in flight as arrays, stepped together.

``ml.play.rollout.play_games`` plays every game through it (``ml.game.registry.GameSpec.batched``);
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

from collections.abc import Mapping, Sequence
from typing import Protocol

import numpy as np

from ml.base.io import JSONObject

PLAYER_SEED_STRIDE = 7
"""A scripted seat's generator is seeded with ``seed * PLAYER_SEED_STRIDE + seat`` (``ml.play.rollout``, and
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
            scripted: seat -> scripted player kind (``heuristic`` or ``random``), seeded with
                ``seed * PLAYER_SEED_STRIDE + seat`` as ``ml.play.rollout`` seeds ``GameSpec.make_player``; the other
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
