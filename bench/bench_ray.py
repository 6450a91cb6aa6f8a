"""Benchmark: self-play on a two-node Ray cluster against two local worker processes, in the same run.

Starts a Ray multi-node test cluster on this machine (``ray.cluster_utils.Cluster``: a head
node and a second node, one CPU each, their own raylets), then prints:

  * PPO self-play collection (``ml.learn.ppo.train_ppo``, the default 256x256 net, ``rollout_chunks``
    chunks per round) in learner decisions per second with ``selfplay.workers: 2`` (the
    reference) and with ``compute.backend: ray`` on the cluster, and their ratio (the cost of
    the cluster path; the issue asks for at least 0.85x). The two checkpoints must be equal.
  * the per-chunk scheduling overhead: a no-op chunk through ``Executor.map`` on the cluster
    and through a 2-process local pool, in milliseconds per chunk (wall time / chunks,
    2 slots), and the latency of one chunk submitted alone;
  * the object-store traffic per round: the pickled weights (sent once per round, read
    once per worker) and one chunk's result.

Usage: python bench/bench_ray.py [--rounds 3] [--rollout-steps 4096] [--chunks 8]
"""

from __future__ import annotations

import argparse
import pickle
import time
from concurrent.futures import ProcessPoolExecutor

import torch

from ml.config.params import SelfplayParams
from ml.config.sections import ComputeParams
from ml.game.commander.spec import commander
from ml.learn.ppo import train_ppo
from ml.learn.settings import RunSettings
from ml.model.policy import PolicyNet
from ml.play.collect import Collector, CollectSettings
from ml.runtime.compute import make_executor

MB = 2**20


def _noop(task: int, *shared: object) -> int:
    return task


def selfplay(cfg: SelfplayParams, executor=None) -> tuple[float, dict]:
    game = commander()
    torch.manual_seed(0)
    student = PolicyNet(game.obs_dim, (256, 256), game.num_actions)
    net, m = train_ppo(student, {}, cfg, game, RunSettings(3), executor=executor)
    return m["selfplay/decisions_per_s"], net.state_dict()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--rollout-steps", type=int, default=4096)
    ap.add_argument("--chunks", type=int, default=8)
    ap.add_argument("--noop-chunks", type=int, default=400)
    a = ap.parse_args()
    import ray
    from ray.cluster_utils import Cluster

    torch.set_num_threads(1)
    cluster = Cluster(
        initialize_head=True, head_node_args={"num_cpus": 1, "object_store_memory": 200 * MB, "include_dashboard": False}
    )
    cluster.add_node(num_cpus=1, object_store_memory=200 * MB)
    cluster.wait_for_nodes()
    executor = make_executor(ComputeParams(backend="ray", address=cluster.address))
    try:
        sp = SelfplayParams(learner_decisions=a.rounds * a.rollout_steps, rollout_steps=a.rollout_steps, rollout_chunks=a.chunks,
                            workers=2, opponent_mix={"teacher": 0.6, "self": 0.4})  # fmt: skip
        cfg = sp
        selfplay(sp.model_copy(update={"learner_decisions": a.rollout_steps // 4}), executor)  # warm the Ray workers
        local_dps, local_w = selfplay(cfg)
        ray_dps, ray_w = selfplay(cfg, executor)
        same = all(torch.equal(v, ray_w[k]) for k, v in local_w.items())
        print(f"self-play, {a.rounds} rounds of {a.rollout_steps} learner decisions in {a.chunks} chunks (256x256 net):")
        print(f"  2 local worker processes   {local_dps:8.0f} learner decisions/s (reference)")
        print(f"  2-node Ray cluster         {ray_dps:8.0f} learner decisions/s  ratio {ray_dps / local_dps:.2f}x")
        print(f"  checkpoints identical: {same}")

        n = a.noop_chunks
        executor.map(_noop, list(range(20)))  # warm
        t = time.perf_counter()
        executor.map(_noop, list(range(n)))
        ray_ms = (time.perf_counter() - t) / n * 1e3
        t = time.perf_counter()
        for i in range(50):
            executor.map(_noop, [i])
        ray_latency_ms = (time.perf_counter() - t) / 50 * 1e3
        with ProcessPoolExecutor(2) as pool:
            list(pool.map(_noop, range(20)))
            t = time.perf_counter()
            list(pool.map(_noop, range(n)))
            pool_ms = (time.perf_counter() - t) / n * 1e3
        print(f"per-chunk scheduling overhead ({n} no-op chunks, 2 slots):")
        print(f"  Ray cluster {ray_ms:6.2f} ms/chunk, one chunk alone {ray_latency_ms:6.2f} ms round trip")
        print(f"  local pool  {pool_ms:6.2f} ms/chunk  (ratio {ray_ms / pool_ms:.1f}x)")

        game = commander()
        net = PolicyNet(game.obs_dim, (256, 256), game.num_actions)
        weights = len(pickle.dumps({k: v.detach().cpu() for k, v in net.state_dict().items()}))
        collector = Collector(net, {}, CollectSettings(game, cfg.num_envs, cfg.opponent_mix), 1, a.chunks)
        chunk = collector.round(net, 1, a.rollout_steps)[0]
        result = len(pickle.dumps(chunk))
        print("object-store traffic per round:")
        print(f"  weights {weights / MB:.2f} MB (one put per round, one read per worker process)")
        print(f"  one chunk's result {result / MB:.2f} MB for {len(chunk.rollout)} learner decisions "
              f"({result / max(1, len(chunk.rollout)) / 1024:.1f} kB per decision)")  # fmt: skip
    finally:
        executor.close()
        ray.shutdown()
        cluster.shutdown()


if __name__ == "__main__":
    main()
