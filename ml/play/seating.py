"""How the games of a stage are seated and seeded: the agent rotated through the seats, and the simulator seeds."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np


def rotated_seatings(n_games: int, pod_size: int, agent: str, others: Callable[[int], Sequence[str]]) -> list[list[str]]:
    """Seatings with ``agent`` rotated through the seats: game g puts it in seat ``g % pod_size``.

    The one way seats are rotated (self-play, export, gate deals, rating tournaments): over any
    ``pod_size`` consecutive games the agent sits in every seat once, so no seat's advantage
    (the first turn) favours or hurts it.

    Args:
        n_games: games.
        pod_size: players per pod.
        agent: controller key of the agent.
        others: ``game -> controller keys`` of the other ``pod_size - 1`` seats, in seat order;
            called once per game, in game order (so a caller's RNG draws happen in that order).

    Raises:
        ValueError: ``others`` gave another number of seats.
    """
    out = []
    for g in range(n_games):
        seats = list(others(g))
        if len(seats) != pod_size - 1:
            raise ValueError(f"game {g}: {len(seats)} other seats in a pod of {pod_size}")
        seats.insert(g % pod_size, agent)
        out.append(seats)
    return out


def game_seeds(seed: int, n_games: int) -> list[int]:
    """``n_games`` distinct simulator seeds drawn from ``seed`` (numpy Generator)."""
    rng = np.random.default_rng(seed)
    return [int(x) for x in rng.choice(2**31 - 1, size=n_games, replace=False)]
