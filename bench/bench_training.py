"""Benchmark: supervised training throughput against a bare torch loop of the same network.

Prints samples/s of ``ml.learn.supervised.train_student`` (mixture sampling, masked
cross-entropy plus value loss, Adam) on synthetic decisions, and of a bare loop doing
only the forward/backward/step of the same MLP on the same batch size (the reference,
measured in the same run), with their ratio: the cost of the data pipeline.

Usage: python bench/bench_training.py [--samples 200000]
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import torch

from ml.config.sections import TrainParams
from ml.data.decisions import DecisionSet
from ml.game.commander.actions import NUM_ACTIONS
from ml.game.commander.encoding import OBS_DIM
from ml.learn.settings import RunSettings
from ml.learn.supervised import train_student
from ml.model.policy import PolicyNet


def synthetic(n: int) -> DecisionSet:
    rng = np.random.default_rng(0)
    src = np.asarray(["sim"] * (n // 2) + ["ppo"] * (n - n // 2), dtype=object)
    return DecisionSet(
        rng.normal(size=(n, OBS_DIM)).astype(np.float32), np.ones((n, NUM_ACTIONS), bool), rng.integers(0, NUM_ACTIONS, n),
        rng.normal(size=n).astype(np.float32), src, src.copy(),
    )  # fmt: skip


def bare_loop(samples: int, batch: int) -> float:
    torch.manual_seed(0)
    net = PolicyNet(OBS_DIM, (256, 256))
    opt = torch.optim.Adam(net.parameters(), lr=1e-3)
    x, y = torch.randn(batch, OBS_DIM), torch.randint(0, NUM_ACTIONS, (batch,))
    started = time.perf_counter()
    for _ in range(samples // batch):
        logits, _ = net(x)
        loss = torch.nn.functional.cross_entropy(logits, y)
        opt.zero_grad()
        loss.backward()
        opt.step()
    return (samples // batch) * batch / (time.perf_counter() - started)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--samples", type=int, default=200_000, help="samples per measurement (default: %(default)s)")
    args = parser.parse_args()
    torch.set_num_threads(1)
    data = synthetic(50_000)
    cfg = TrainParams(epochs=1, batch_size=256, lr=1e-3, hidden_sizes=(256, 256), samples_per_epoch=args.samples,
                      source_weights={"sim": 1.0, "ppo": 0.5}, value_coef=0.5)  # fmt: skip
    _, metrics = train_student(data, data.subset(np.arange(1000)), cfg, RunSettings(0))
    ours = metrics["train/samples_per_s"]
    reference = bare_loop(args.samples, 256)
    print(f"{'benchmark':52s} {'samples/s':>10s} {'vs bare':>8s}")
    print(f"{'supervised student (ml.learn.supervised), batch 256':52s} {ours:10,.0f} {ours / reference:7.2f}x")
    print(f"{'bare forward/backward/Adam, same MLP (reference)':52s} {reference:10,.0f} {1.0:7.2f}x")


if __name__ == "__main__":
    main()
