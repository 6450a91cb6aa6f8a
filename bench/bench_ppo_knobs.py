"""Benchmark: PPO self-play's learner decisions per second of wall, by the knobs that set its pace.

Runs ``ml.learn.ppo.train_ppo`` on the Commander pod (MLP 256x256 from a fresh init, opponents
heuristic 0.4 / league 0.3 / self 0.3 with one frozen league member) for ``--decisions`` learner
decisions under each setting, the reference first: ``89bb6bb``'s ``full`` selfplay knobs (16
games in flight, rounds of 4,096 decisions in 8 chunks, 4 update epochs of 512-decision
minibatches). Prints per setting the collection's decisions/s, the update's samples/s
(decisions x epochs per second of update), the update's share of the wall and the overall
decisions/s with its ratio to the reference measured in the same run.

Usage: python bench/bench_ppo_knobs.py [--decisions 200000] [--workers 0]
"""

from __future__ import annotations

import argparse
import time

import torch

from ml.config.sections import SelfplayParams
from ml.game.commander.encoding import OBS_DIM
from ml.game.commander.spec import commander
from ml.learn.ppo import train_ppo
from ml.learn.settings import RunSettings
from ml.model.policy import PolicyNet

MIX = {"teacher": 0.4, "league": 0.3, "self": 0.3}
SETTINGS = {
    "89bb6bb full (reference)": dict(num_envs=16, rollout_steps=4096, rollout_chunks=8, update_epochs=4, minibatch_size=512),
    "64 games, 2 chunks": dict(num_envs=64, rollout_steps=8192, rollout_chunks=2, update_epochs=4, minibatch_size=512),
    "+ minibatch 1024": dict(num_envs=64, rollout_steps=8192, rollout_chunks=2, update_epochs=4, minibatch_size=1024),
    "+ 3 epochs (full today)": dict(num_envs=64, rollout_steps=8192, rollout_chunks=2, update_epochs=3, minibatch_size=1024),
    "+ 2 epochs, minibatch 2048": dict(
        num_envs=64, rollout_steps=8192, rollout_chunks=2, update_epochs=2, minibatch_size=2048
    ),
}


def measure(knobs: dict[str, int], decisions: int, workers: int) -> dict[str, float]:
    """One ``train_ppo`` run of ``decisions`` learner decisions with ``knobs``; its speeds."""
    torch.manual_seed(0)
    net = PolicyNet(OBS_DIM, (256, 256))
    league = {"frozen:gen000": PolicyNet(OBS_DIM, (256, 256))}
    cfg = SelfplayParams(learner_decisions=decisions, workers=workers, opponent_mix=MIX, **knobs)
    t = time.perf_counter()
    _, m = train_ppo(net, league, cfg, commander(4, 30), RunSettings(0))
    wall = time.perf_counter() - t
    return {
        "collect": m["selfplay/decisions_per_s"],
        "update": m["selfplay/update_samples_per_s"],
        "update_share": m["selfplay/update_s"] / wall,
        "overall": m["selfplay/decisions"] / wall,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--decisions", type=int, default=200_000, help="learner decisions per setting (default 200000)")
    parser.add_argument("--workers", type=int, default=0, help="rollout processes (0: one per core)")
    args = parser.parse_args()
    if args.decisions < 1 or args.workers < 0:
        parser.error("--decisions must be >= 1 and --workers >= 0")
    torch.set_num_threads(1)
    print(f"{'setting':30s} {'collect dec/s':>13s} {'update samp/s':>13s} {'update share':>12s} {'dec/s':>9s} {'ratio':>6s}")
    reference = None
    for name, knobs in SETTINGS.items():
        r = measure(knobs, args.decisions, args.workers)
        reference = reference or r["overall"]
        print(f"{name:30s} {r['collect']:13,.0f} {r['update']:13,.0f} {r['update_share']:12.0%} {r['overall']:9,.0f} "
              f"{r['overall'] / reference:5.2f}x", flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
