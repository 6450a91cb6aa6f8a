"""Markdown tables of a finished run on an OpenSpiel game (docs/openspiel.md).

    python bench/openspiel_tables.py --repo /tmp/cr8 [--student-games 200]

Prints, per accepted generation: the gate's figures (the PPO agent against ``pod_size - 1``
MCTS teachers, 95% interval by deal), the NashConv figures of ``metrics/train.json`` where
the game has them, and with ``--student-games N`` the supervised student's own first-place
rate and mean return against the teachers (greedy, seat-rotated on the same deals, N
games); then the latest
Elo table. Reads ``state/eval_history.json``, ``state/elo_history.json``, ``params.yaml``
and ``data/students`` of the run.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import torch

from ml.config.params import load_params
from ml.game.registry import make_game
from ml.judge.stats import DealTally
from ml.model.policy import load_policy
from ml.play.controller import Controller
from ml.play.runner import Pods, play_games
from ml.play.seating import game_seeds, rotated_seatings


def student_vs_teachers(repo: Path, games: int, seed: int = 99) -> dict[str, tuple[int, int, float, float, float]]:
    """``{student: (wins, games, low, high, mean return)}`` of each generation's student against the teachers.

    The student (greedy) is rotated through the seats of the same deals; the mean return is
    in the game's units (chips for poker: OpenSpiel's returns, not the env's scaled rewards).
    """
    params = load_params(repo / "params.yaml")
    game = make_game(params.game, params.teacher)
    scale = game.make_env().reward_scale if game.make_env().zero_sum else 1.0
    n = game.num_players
    seeds = [s for s in game_seeds(seed, max(1, games // n)) for _ in range(n)]
    seatings = rotated_seatings(len(seeds), n, "student", lambda g: ["teacher"] * (n - 1))
    folders = [repo / "data/merged/students", repo / "data/students"]  # merged: the last generation's too
    out = {}
    for path in max((sorted(f.glob("*.pt")) for f in folders), key=len):
        net, _ = load_policy(path)
        ctrl = {"student": Controller("net", net, greedy=True), "teacher": Controller("teacher")}
        played = play_games(Pods(seatings, seeds), ctrl, num_envs=8, generator=torch.Generator().manual_seed(seed), game=game)
        results = sorted(played, key=lambda r: r.index)  # game order: deal d is games d*n .. d*n+n-1
        seat = [r.seats.index("student") for r in results]
        won = [r.winner == s for r, s in zip(results, seat, strict=True)]
        tally = DealTally()  # the n games of a deal share its seed: the deal is the unit
        for d in range(0, len(won), n):
            tally.add(sum(won[d : d + n]), len(won[d : d + n]))
        wins = tally.successes
        low, high = tally.interval()
        mean_return = float(np.mean([r.returns[s] * scale for r, s in zip(results, seat, strict=True)]))
        out[path.stem] = (wins, len(results), low, high, mean_return)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repo", type=Path, required=True)
    ap.add_argument("--student-games", type=int, default=0)
    args = ap.parse_args()
    history = json.loads((args.repo / "state/eval_history.json").read_text())
    students = student_vs_teachers(args.repo, args.student_games) if args.student_games else {}
    print(
        "| gen | verdict | PPO agent win rate vs teachers [95%] | games | student win rate vs teachers [95%] "
        "| student mean return | NashConv student | teacher (empirical) | uniform |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for h in history:
        f, train = h["figures"], h["metrics"].get("train", {})
        s = students.get(f"gen{h['generation']:03d}")
        st = f"{s[0] / s[1]:.3f} [{s[2]:.3f}, {s[3]:.3f}] ({s[1]} games) | {s[4]:+.3f}" if s else "- | -"
        nc = [train.get(k) for k in ("train/nash_conv", "train/nash_conv_teacher_empirical", "train/nash_conv_uniform")]
        ncs = " | ".join(f"{x:.3f}" if x is not None else "-" for x in nc)
        print(
            f"| {h['generation']} | {h['verdict']} | {f['win_rate']:.3f} [{f['win_rate_low']:.3f}, {f['win_rate_high']:.3f}] "
            f"| {f['eval_games']} | {st} | {ncs} |"
        )
    elo = json.loads((args.repo / "state/elo_history.json").read_text())[-1]
    print(f"\nElo after {elo['attempt_id']} ({elo['games']} games; heuristic = the MCTS teacher, anchored at 1500)\n")
    print("| player | Elo | 95% interval | games |\n|---|---|---|---|")
    for r in elo["table"]:
        print(f"| {r['player']} | {r['elo']:.0f} | [{r['low']:.0f}, {r['high']:.0f}] | {r['games']} |")


if __name__ == "__main__":
    main()
