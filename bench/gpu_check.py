"""GPU check: the supervised and PPO updates give the CPU's results on CUDA, up to float tolerance.

Trains the same student (same seed, same synthetic decisions) on the CPU and on CUDA, and
runs the same PPO update on the same synthetic episodes on both; prints the largest weight
difference, the agreement of greedy predictions, and samples/s on each device. Exits 1 if
the results differ beyond tolerance. Needs a CUDA device (prints and exits 0 without one).

Usage: python bench/gpu_check.py [--samples 40000]
"""

from __future__ import annotations

import argparse
import os
import sys
import time

os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")

import numpy as np
import torch
from bench_training import synthetic

from ml.config.sections import SelfplayParams, TrainParams
from ml.game.commander.actions import NUM_ACTIONS
from ml.game.commander.encoding import OBS_DIM
from ml.learn.ppo import ppo_update
from ml.learn.settings import RunSettings
from ml.learn.supervised import predict, train_student
from ml.model.policy import PolicyNet
from ml.play.buffer import Rollout

WEIGHT_TOL = 1e-3
"""Largest tolerated weight difference after training (float32 reductions differ in order on a GPU)."""


def max_diff(a: PolicyNet, b: PolicyNet) -> float:
    return max(
        float((x.cpu() - y.cpu()).abs().max()) for x, y in zip(a.state_dict().values(), b.state_dict().values(), strict=True)
    )


def episodes(n_episodes: int, length: int) -> Rollout:
    """``n_episodes`` random episodes of ``length`` uniform-policy decisions, each ending in a win or a loss."""
    rng = np.random.default_rng(1)
    t = n_episodes * length
    done = np.zeros(t, bool)
    done[length - 1 :: length] = True
    reward = np.zeros(t, np.float32)
    reward[done] = rng.choice([1.0, -1 / 3], size=n_episodes)
    return Rollout(rng.normal(size=(t, OBS_DIM)).astype(np.float32), np.ones((t, NUM_ACTIONS), bool),
                   rng.integers(NUM_ACTIONS, size=t), np.full(t, -np.log(NUM_ACTIONS), np.float32), np.zeros(t, np.float32),
                   reward, done)  # fmt: skip


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--samples", type=int, default=40_000, help="training samples (default: %(default)s)")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        print("no CUDA device: nothing to compare")
        return 0
    torch.use_deterministic_algorithms(True)
    print(f"torch {torch.__version__}, {torch.cuda.get_device_name(0)}")
    data = synthetic(20_000)
    cfg = TrainParams(epochs=2, batch_size=256, lr=1e-3, hidden_sizes=(256, 256), samples_per_epoch=args.samples // 2,
                      source_weights={"sim": 1.0, "ppo": 0.5}, value_coef=0.5)  # fmt: skip
    nets, rates = {}, {}
    for device in ("cpu", "cuda"):
        started = time.perf_counter()
        nets[device], metrics = train_student(data, data.subset(np.arange(2000)), cfg, RunSettings(3, device))
        rates[device] = metrics["train/samples_per_s"]
        print(f"supervised on {device}: {rates[device]:,.0f} samples/s, {time.perf_counter() - started:.1f} s")
    diff = max_diff(nets["cpu"], nets["cuda"])
    agree = float((predict(nets["cpu"], data) == predict(nets["cuda"], data)).mean())
    print(f"supervised: max weight difference {diff:.2e}, greedy predictions agree on {agree:.4f} of {len(data)} decisions")
    ppo_cfg = SelfplayParams(lr=3e-4, gamma=0.99, gae_lambda=0.95, clip_coef=0.2, ent_coef=0.01, vf_coef=0.5, max_grad_norm=0.5,
                             update_epochs=4, minibatch_size=512)  # fmt: skip
    eps = episodes(64, 60)
    updated = {}
    for device in ("cpu", "cuda"):
        torch.manual_seed(0)
        net = PolicyNet(OBS_DIM, (256, 256)).to(device)
        opt = torch.optim.Adam(net.parameters(), lr=ppo_cfg.lr, eps=1e-5)
        started = time.perf_counter()
        stats = ppo_update(net, opt, eps, ppo_cfg, torch.Generator().manual_seed(0), device)
        n = sum(len(e) for e in eps) * ppo_cfg.update_epochs
        print(f"PPO update on {device}: {n / (time.perf_counter() - started):,.0f} samples/s, pg_loss {stats['pg_loss']:.6f}")
        updated[device] = net
    ppo_diff = max_diff(updated["cpu"], updated["cuda"])
    print(f"PPO update: max weight difference {ppo_diff:.2e}")
    ok = diff < WEIGHT_TOL and ppo_diff < WEIGHT_TOL and agree > 0.99
    print("same results up to float tolerance" if ok else "RESULTS DIFFER beyond tolerance")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
