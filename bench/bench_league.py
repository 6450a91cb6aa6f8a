"""Benchmark: self-play's collection against a league, its members banked against each its own pass.

Plays the same pods twice through ``ml.play.runner.play_games`` on one core: one learning seat
(``agent``) against three opponent seats drawn as the ``full`` profile draws them (teacher 0.4,
league 0.3, self 0.3; a league member uniformly), with ``--members`` league networks of the
profile's width (random weights: the pace does not depend on them). Once each member answers
its own decisions (one forward pass per member per round: the reference), once all members
answer through one ``ml.model.policy.PolicyBank`` (one pass per round for the whole league, as
``ml.play.collect`` plays them). Prints the learner's decisions per second of each, the
decisions of all seats, and the ratio banked / reference, for each league size of ``--members``.

Usage (repository root): PYTHONPATH=. python bench/bench_league.py [--members 2,10,20,30] [--games 600]
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import torch

from ml.game.commander.spec import commander
from ml.model.policy import PolicyBank, PolicyNet
from ml.play.controller import Controller
from ml.play.runner import Keep, Pods, play_games
from ml.play.seating import game_seeds, rotated_seatings

MIX = {"teacher": 0.4, "league": 0.3, "self": 0.3}
"""The ``full`` profile's opponent mix (params.yaml)."""
WIDTH = (128, 128)
"""The ``full`` profile's ``train.hidden_sizes``."""


def seatings(members: int, games: int, seed: int) -> list[list[str]]:
    """Seat-rotated pods: ``agent`` and three opponents drawn from ``MIX`` (league members uniformly)."""
    rng = np.random.default_rng(seed)
    kinds, weights = list(MIX), np.array(list(MIX.values()))

    def opponents(_: int) -> list[str]:
        out = []
        for kind in rng.choice(kinds, size=3, p=weights / weights.sum()):
            out.append(f"member{rng.integers(members):02d}" if kind == "league" else str(kind))
        return out

    return rotated_seatings(games, 4, "agent", opponents)


def measure(members: int, games: int, num_envs: int, banked: bool) -> tuple[float, int, int]:
    """One pass over the pods: ``(seconds, learner decisions, decisions of all seats)``."""
    torch.manual_seed(0)
    game = commander(4, 30)
    agent = PolicyNet(game.obs_dim, WIDTH, game.num_actions)
    league = [PolicyNet(game.obs_dim, WIDTH, game.num_actions) for _ in range(members)]
    bank = PolicyBank(league) if banked else None
    controllers = {"agent": Controller("net", agent), "self": Controller("net", agent), "teacher": Controller("teacher")}
    controllers.update({f"member{i:02d}": Controller("net", net, bank=bank, member=i) for i, net in enumerate(league)})
    pods = Pods(seatings(members, games, 7), game_seeds(7, games))
    keep = Keep(track_seats=lambda seats: [seats.index("agent")])
    t = time.perf_counter()
    learner = everyone = 0
    for r in play_games(
        pods, controllers, game=game, num_envs=num_envs, generator=torch.Generator().manual_seed(0), keep=keep
    ):
        learner += sum(len(e) for e in r.transitions.values())
        everyone += r.decisions
    return time.perf_counter() - t, learner, everyone


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--members", default="2,10,20,30", help="league sizes, comma-separated (default 2,10,20,30)")
    parser.add_argument("--games", type=int, default=600, help="pods per measurement (default 600)")
    parser.add_argument("--num-envs", type=int, default=64, help="games in flight (the full profile's 64)")
    args = parser.parse_args()
    try:
        sizes = [int(x) for x in args.members.split(",")]
    except ValueError:
        parser.error(f"--members {args.members!r}: comma-separated integers")
    if min(sizes) < 1 or args.games < 1 or args.num_envs < 1:
        parser.error("--members, --games and --num-envs must be >= 1")
    torch.set_num_threads(1)
    commander(4, 30).warm_up()
    print(
        f"{'members':>7s} {'learner dec':>11s} {'all dec':>9s} {'own passes dec/s':>16s} {'banked dec/s':>12s} {'ratio':>6s}"
    )
    for k in sizes:
        own, learner, everyone = measure(k, args.games, args.num_envs, banked=False)
        banked, _, _ = measure(k, args.games, args.num_envs, banked=True)
        print(
            f"{k:7d} {learner:11,d} {everyone:9,d} {learner / own:16,.0f} {learner / banked:12,.0f} {own / banked:5.2f}x",
            flush=True,
        )


if __name__ == "__main__":
    main()
