"""``ml.rollout.play_games``: scripted seats act at once so networks see full batches, and a
decision budget stops new games without discarding the games in flight."""

from __future__ import annotations

import torch

from ml.game.commander.encoding import OBS_DIM
from ml.policy import PolicyNet
from ml.rollout import Controller, game_seeds, play_games, rotated_seatings


class CountingNet(PolicyNet):
    """A policy that records the batch size of every forward pass."""

    def __init__(self) -> None:
        super().__init__(OBS_DIM, (16,))
        self.batches: list[int] = []

    def act(self, obs, action_mask, generator=None, greedy=False):
        self.batches.append(len(obs))
        return super().act(obs, action_mask, generator, greedy)


def _play(n_games: int, num_envs: int, budget: int | None, net: PolicyNet):
    seatings = rotated_seatings(n_games, 4, "agent", lambda g: ["heuristic"] * 3)
    controllers = {"agent": Controller("net", net), "heuristic": Controller("heuristic")}
    return list(
        play_games(seatings, game_seeds(3, n_games), controllers, pod_size=4, num_envs=num_envs, budget=budget,
                   generator=torch.Generator().manual_seed(0), track_seats=lambda seats: [seats.index("agent")])
    )  # fmt: skip


def test_every_forward_pass_answers_all_games_in_flight():
    torch.manual_seed(0)
    net = CountingNet()
    results = _play(24, 8, None, net)
    assert len(results) == 24
    # While at least 8 games are unfinished, every forward pass answers 8 decisions: the
    # heuristic seats never hold a game back.
    total = sum(len(r.transitions[r.seats.index("agent")]) for r in results)
    assert sum(net.batches) == total
    assert net.batches[0] == 8 and max(net.batches) == 8
    full = sum(1 for b in net.batches if b == 8)
    assert full >= (total - 8 * max(len(r.transitions[r.seats.index("agent")]) for r in results)) / 8


def test_budget_stops_new_games_and_keeps_the_games_in_flight():
    torch.manual_seed(0)
    net = PolicyNet(OBS_DIM, (16,))
    unlimited = _play(40, 4, None, net)
    limited = _play(40, 4, 100, net)
    steps = [len(r.transitions[r.seats.index("agent")]) for r in limited]
    assert 4 <= len(limited) < 40  # stopped starting games ...
    assert sum(steps) >= 100 and all(s > 0 for s in steps)  # ... and finished every game it started
    assert all(r.outcome for r in limited)
    assert sorted(r.index for r in limited) == list(range(len(limited)))  # the first games of the list
    assert len(unlimited) == 40
    again = _play(40, 4, 100, net)  # deterministic
    assert [(r.game_id, r.decisions, r.outcome) for r in again] == [(r.game_id, r.decisions, r.outcome) for r in limited]
