"""The tracked seats' decisions as arrays, from the forward pass that takes them to the PPO update.

``Tracker`` holds the decisions of the games in flight in preallocated flat arrays (written
one block per forward pass, rewards added by index, compacted as games end) and hands a
finished game's episodes out as :class:`Rollout` arrays, which ``ml.play.collect`` joins per
chunk and ``ml.learn.ppo.ppo_update`` hands to torch without a copy: no Python object per
decision. Not CleanRL's ``[T, N]`` layout: that needs every env to make one learner decision
per step, while here the learner acts at a fraction of the steps (scripted seats play inside
``step``) and only finished games are kept, so decisions are stored flat, keyed by game and seat.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, fields

import numpy as np


@dataclass
class Rollout:
    """Decisions of a tracked seat (PPO transitions) as arrays, episode after episode.

    ``T`` decisions in all; an episode is a run of decisions that ends where ``done`` is True
    (every episode here is a finished game, so the last decision is always terminal).

    Attributes:
        obs: float32[T, obs_dim] observations.
        action_mask: bool[T, A] legal actions.
        action: int64[T] actions taken.
        log_prob: float32[T] behaviour log-probabilities of ``action``.
        value: float32[T] value estimates.
        reward: float32[T] reward after each decision (the seat's rewards up to its next
            decision, summed in float64, then rounded once).
        done: bool[T], True at an episode's last decision.
    """

    obs: np.ndarray
    action_mask: np.ndarray
    action: np.ndarray
    log_prob: np.ndarray
    value: np.ndarray
    reward: np.ndarray
    done: np.ndarray

    def __len__(self) -> int:
        return int(self.action.shape[0])

    @property
    def episodes(self) -> int:
        """Episodes held (terminal decisions)."""
        return int(self.done.sum())

    @classmethod
    def empty(cls, obs_dim: int, num_actions: int) -> Rollout:
        """No decisions."""
        return cls(np.zeros((0, obs_dim), np.float32), np.zeros((0, num_actions), bool), np.zeros(0, np.int64),
                   np.zeros(0, np.float32), np.zeros(0, np.float32), np.zeros(0, np.float32), np.zeros(0, bool))  # fmt: skip

    @classmethod
    def concat(cls, parts: Sequence[Rollout], obs_dim: int, num_actions: int) -> Rollout:
        """``parts`` one after the other (``obs_dim``, ``num_actions`` size an empty result)."""
        if not parts:
            return cls.empty(obs_dim, num_actions)
        if len(parts) == 1:
            return parts[0]
        return cls(*(np.concatenate([getattr(p, f.name) for p in parts]) for f in fields(cls)))


class Tracker:
    """The tracked seats' decisions of the games in flight, in growing flat arrays.

    Each decision is written once, where it is taken (one block per forward pass), keyed by
    ``game * num_players + seat`` (``game``: the game's start number in this run); a seat's
    rewards go to its last decision (``last[row, seat]``, -1 before its first); a finished
    game's decisions are taken out as its episodes. The arrays are compacted (the finished
    games' rows dropped) when they fill up, so their size follows the games in flight.
    """

    CAPACITY = 4096
    """Decisions the arrays hold at first."""

    def __init__(self, num_rows: int, num_players: int, obs_dim: int, num_actions: int) -> None:
        capacity = self.CAPACITY
        self.n = 0
        self.obs = np.zeros((capacity, obs_dim), np.float32)
        self.mask = np.zeros((capacity, num_actions), bool)
        self.action = np.zeros(capacity, np.int64)
        self.log_prob = np.zeros(capacity, np.float32)
        self.value = np.zeros(capacity, np.float32)
        self.reward = np.zeros(capacity, np.float64)
        self.key = np.zeros(capacity, np.int64)
        self.last = np.full((num_rows, num_players), -1, np.int64)
        self.live = np.zeros(capacity, bool)
        self.dims = (obs_dim, num_actions)
        self.stride = num_players

    def keys(self, games: np.ndarray, seats: np.ndarray) -> np.ndarray:
        """int64[k] keys of the seats ``seats`` of the games started as ``games``."""
        keys: np.ndarray = games * self.stride + seats
        return keys

    def add(self, games: np.ndarray, rows: np.ndarray, seats: np.ndarray, obs: np.ndarray, mask: np.ndarray,
            acted: tuple[np.ndarray, np.ndarray, np.ndarray]) -> None:  # fmt: skip
        """Append one decision per entry (k entries): the seats ``seats`` of the games started as
        ``games`` in ``rows`` (int64[k] each) saw ``obs`` and ``mask`` and took ``acted``: actions,
        log-probabilities and values."""
        keys = self.keys(games, seats)
        action, log_prob, value = acted
        k = len(keys)
        if self.n + k > len(self.key):
            self._make_room(k)
        at = slice(self.n, self.n + k)
        self.obs[at], self.mask[at], self.action[at] = obs, mask, action
        self.log_prob[at], self.value[at], self.reward[at], self.key[at] = log_prob, value, 0.0, keys
        self.live[at] = True
        self.last[rows, seats] = np.arange(self.n, self.n + k)
        self.n += k

    def reward_last(self, rows: np.ndarray, rewards: np.ndarray) -> None:
        """Add ``rewards`` (float64[k, S]) to each seat's last decision in ``rows`` (int64[k])."""
        last = self.last[rows]
        hit = (last >= 0) & (rewards != 0.0)
        if hit.any():
            self.reward[last[hit]] += rewards[hit]

    def take(self, game: int, row: int, seats: Sequence[int]) -> dict[int, Rollout]:
        """The episodes (seat -> ``Rollout``) of the finished game started as ``game`` in ``row``; frees the row."""
        out = {}
        keys = self.key[: self.n]
        for seat in seats:
            at = np.flatnonzero(keys == game * self.stride + seat)
            if len(at) == 0:
                out[seat] = Rollout.empty(*self.dims)
                continue
            done = np.zeros(len(at), bool)
            done[-1] = True
            out[seat] = Rollout(self.obs[at], self.mask[at], self.action[at], self.log_prob[at], self.value[at],
                                self.reward[at].astype(np.float32), done)  # fmt: skip
            self.live[at] = False
        self.last[row] = -1
        return out

    def _make_room(self, k: int) -> None:
        keep = np.flatnonzero(self.live[: self.n])
        need = len(keep) + k
        if need > len(self.key) // 2:  # grow as well: compaction alone would soon be needed again
            size = max(2 * len(self.key), 2 * need)
            for name in ("obs", "mask", "action", "log_prob", "value", "reward", "key", "live"):
                old = getattr(self, name)
                grown = np.zeros((size, *old.shape[1:]), old.dtype)
                grown[: len(keep)] = old[keep]
                setattr(self, name, grown)
        else:
            for name in ("obs", "mask", "action", "log_prob", "value", "reward", "key", "live"):
                arr = getattr(self, name)
                arr[: len(keep)] = arr[keep]
        moved = np.full(self.n, -1, np.int64)
        moved[keep] = np.arange(len(keep))
        held = self.last >= 0
        self.last[held] = moved[self.last[held]]
        self.live[len(keep) :] = False
        self.n = len(keep)
