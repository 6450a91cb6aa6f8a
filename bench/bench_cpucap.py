"""Benchmark: the speed cost of the AVX2 cap of ``ml.base.determinism``.

Runs two fixed workloads in a fresh process per setting and round, settings interleaved:
supervised training (``ml.learn.supervised.train_student``, 60,000 samples of
``bench_training``'s synthetic set, MLP 256x256, batch 256) and PPO self-play
(``ml.learn.ppo.train_ppo``, 6,000 learner decisions, one worker, with the update's share timed
apart). Figures are CPU seconds of the process (``time.process_time``), the least of
``--rounds``, so other jobs on the machine move them less than wall time would.

Settings: ``native`` (``DISTILL_NATIVE_CPU=1``: what the machine offers), ``cap`` (the
project's), ``mkl-avx2`` (the cap with ``MKL_CBWR=AVX2``, MKL's Intel-only branch, for
comparison).

Usage: python bench/bench_cpucap.py [--rounds 3]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

SETTINGS = {
    "native": {"DISTILL_NATIVE_CPU": "1"},
    "cap": {},
    "mkl-avx2": {"DISTILL_NATIVE_CPU": "1", "ATEN_CPU_CAPABILITY": "avx2", "MKL_ENABLE_INSTRUCTIONS": "AVX2",
                 "MKL_CBWR": "AVX2", "ONEDNN_MAX_CPU_ISA": "AVX2", "NPY_DISABLE_CPU_FEATURES": "X86_V4 AVX512_ICL AVX512_SPR"},
}  # fmt: skip


def workload() -> dict[str, float | str]:
    """CPU seconds of the two workloads in this process, and torch's CPU capability."""
    import ml.learn.ppo  # noqa: I001  (first: importing ml applies the cap before numpy and torch load)
    import numpy as np
    import torch
    from bench_training import synthetic
    from ml.game.commander.encoding import OBS_DIM
    from ml.game.commander.spec import commander
    from ml.model.policy import PolicyNet
    from ml.config.sections import SelfplayParams, TrainParams
    from ml.learn.ppo import train_ppo
    from ml.learn.settings import RunSettings
    from ml.learn.supervised import train_student

    torch.set_num_threads(1)
    data = synthetic(50_000)
    cfg = TrainParams(epochs=1, batch_size=256, lr=1e-3, hidden_sizes=(256, 256), samples_per_epoch=60_000,
                      source_weights={"sim": 1.0, "ppo": 0.5}, value_coef=0.5)  # fmt: skip
    t = time.process_time()
    train_student(data, data.subset(np.arange(1000)), cfg, RunSettings(0))
    supervised = time.process_time() - t
    update = [0.0]
    ppo_update = ml.learn.ppo.ppo_update

    def timed(*args, **kwargs):
        t0 = time.process_time()
        out = ppo_update(*args, **kwargs)
        update[0] += time.process_time() - t0
        return out

    ml.learn.ppo.ppo_update = timed
    pc = SelfplayParams(learner_decisions=6000, num_envs=16, rollout_steps=3000, lr=3e-4, gamma=0.995, gae_lambda=0.95, clip_coef=0.2,
                        ent_coef=0.01, vf_coef=0.5, max_grad_norm=0.5, update_epochs=4, minibatch_size=512,
                        opponent_mix={"teacher": 1.0}, workers=1, rollout_chunks=8)  # fmt: skip
    torch.manual_seed(0)
    t = time.process_time()
    train_ppo(PolicyNet(OBS_DIM, (256, 256)), {}, pc, commander(4, 30), RunSettings(0))
    ppo = time.process_time() - t
    return {"capability": str(torch.backends.cpu.get_cpu_capability()), "supervised": supervised, "ppo": ppo,
            "update": update[0], "collect": ppo - update[0]}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3, help="runs per setting; the least is shown (default: %(default)s)")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(workload()))
        return
    here = Path(__file__).resolve().parent
    env = {k: v for k, v in os.environ.items() if k not in {k for s in SETTINGS.values() for k in s}}
    env["PYTHONPATH"] = os.pathsep.join([str(here), str(here.parent), env.get("PYTHONPATH", "")])
    best: dict[str, dict] = {}
    for _ in range(args.rounds):
        for name, extra in SETTINGS.items():
            out = subprocess.run([sys.executable, __file__, "--child"], env={**env, **extra}, capture_output=True,
                                 text=True, check=True)  # fmt: skip
            r = json.loads(out.stdout.strip().splitlines()[-1])
            best[name] = {k: min(v, best[name][k]) if name in best and k != "capability" else v for k, v in r.items()}
    print(f"{'setting':10s} {'torch':>7s} {'supervised s':>13s} {'PPO s':>7s} {'update s':>9s} {'collect s':>10s}  (CPU s)")
    for name, r in best.items():
        print(
            f"{name:10s} {r['capability']:>7s} {r['supervised']:13.2f} {r['ppo']:7.2f} {r['update']:9.2f} {r['collect']:10.2f}"
        )


if __name__ == "__main__":
    main()
