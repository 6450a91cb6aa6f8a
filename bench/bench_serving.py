"""Benchmark: the policy endpoint (``ml.api.policy``) against the bare forward pass, in the same run.

Starts a uvicorn server (a child process) serving the policy routes for a temporary repository
holding one student (``PolicyNet(OBS_DIM, (256, 256))``, the default ``train.hidden_sizes``), then
drives it from this process with 1 and 64 concurrent asyncio clients (httpx, keep-alive), each
sending teacher decision points as fast as answers come:

* single form: ``POST /api/ml/policy/act``, one decision point per request;
* batch form: ``POST /api/ml/policy/act/batch``, ``--batch`` decision points per request.

Prints requests/s, decisions/s and p50/p99 latency (ms) per setting, and the bare forward pass
(``ml.serving.policy_outputs``: the student's forward and softmax, no HTTP, no JSON, no encoding)
on 1 and 64 rows. Client and server share the machine's cores, so the figures are a floor.

Usage: python bench/bench_serving.py [--seconds 4] [--batch 64] [--port 8799]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
import numpy as np
import torch

from ml.game.commander.encoding import OBS_DIM, RecordEncoder
from ml.game.registry import commander
from ml.io import atomic_write_json
from ml.policy import PolicyNet, save_policy
from ml.records import read_records, record_to_json
from ml.serving import MAX_BATCH_ROWS, MAX_WAIT_S, policy_outputs
from ml.teacher import write_teacher_batch

TORCH_THREADS = 1
"""Intra-op threads of torch in the server and the bare pass: on a shared 2-core machine (load ~6) two
OpenMP threads made the 64-row forward pass 70x slower (103 ms against 1.5 ms) by spinning on each other."""


def serve(root: Path, port: int) -> None:
    """The server side (run in the child process)."""
    import uvicorn
    from fastapi import FastAPI

    from ml.api.policy import add_policy_routes

    torch.set_num_threads(TORCH_THREADS)
    app = FastAPI()
    add_policy_routes(app, root, lambda _: None, guard=[])
    uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning")


def make_repo(root: Path) -> list[dict]:
    """A student in ``root`` and teacher decision points (as client JSON) to send."""
    torch.manual_seed(0)
    save_policy(PolicyNet(OBS_DIM, (256, 256)).eval(), root / "data/merged/students/gen001.pt", {"generation": 1})
    atomic_write_json(root / "state/eval_history.json", [])
    write_teacher_batch(root / "teacher", commander(), batch_id="b", games=4, pod_size=4, max_turns=30, seed=5)
    points = []
    for rec in read_records(next((root / "teacher").glob("*.jsonl"))):
        obj = json.loads(record_to_json(rec))
        del obj["action"]
        points.append(obj)
    return points


def bare_forward(points: list[dict], seconds: float) -> dict[int, tuple[float, float]]:
    """Rows -> (calls/s, ms per call) of ``policy_outputs`` on encoded points."""
    torch.set_num_threads(TORCH_THREADS)
    torch.manual_seed(0)
    net = PolicyNet(OBS_DIM, (256, 256)).eval()
    enc = RecordEncoder()
    out = {}
    for rows in (1, 64):
        obs = enc.encode_batch(points[:rows])
        mask = np.stack([enc.action_mask(p) for p in points[:rows]])
        n, started = 0, time.perf_counter()
        while time.perf_counter() - started < seconds / 2:
            policy_outputs(net, obs, mask)
            n += 1
        elapsed = time.perf_counter() - started
        out[rows] = (n / elapsed, 1000 * elapsed / n)
    return out


async def drive(url: str, points: list[dict], clients: int, batch: int, seconds: float) -> tuple[int, list[float]]:
    """``clients`` concurrent loops for ``seconds``; returns (decisions answered, latencies in s)."""
    latencies: list[float] = []
    decisions = 0
    limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients)
    async with httpx.AsyncClient(base_url=url, limits=limits, timeout=30) as client:
        stop = time.perf_counter() + seconds

        async def loop(k: int) -> None:
            nonlocal decisions
            i = k
            while time.perf_counter() < stop:
                if batch == 1:
                    path, body = "/api/ml/policy/act", points[i % len(points)]
                else:
                    start = (i * batch) % (len(points) - batch)
                    path, body = "/api/ml/policy/act/batch", {"decisions": points[start : start + batch]}
                t0 = time.perf_counter()
                r = await client.post(path, json=body)
                latencies.append(time.perf_counter() - t0)
                r.raise_for_status()
                decisions += batch
                i += clients

        await asyncio.gather(*(loop(k) for k in range(clients)))
    return decisions, latencies


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--seconds", type=float, default=4.0, help="seconds per setting (default 4)")
    p.add_argument("--batch", type=int, default=64, help="decision points per batch request (default 64)")
    p.add_argument("--port", type=int, default=8799)
    p.add_argument("--serve", type=Path, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.serve:
        serve(args.serve, args.port)
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        points = make_repo(Path(tmp))
        server = subprocess.Popen([sys.executable, __file__, "--serve", tmp, "--port", str(args.port)])
        url = f"http://127.0.0.1:{args.port}"
        try:
            for _ in range(200):  # wait for the server
                try:
                    if httpx.get(url + "/api/ml/policy/models").status_code == 200:
                        break
                except httpx.TransportError:
                    time.sleep(0.1)
            asyncio.run(drive(url, points, 4, 1, 0.5))  # warm-up: model load, connections
            print(
                f"micro-batching window {MAX_WAIT_S * 1000:.1f} ms, cap {MAX_BATCH_ROWS} rows; torch threads {TORCH_THREADS}; "
                f"{len(points)} decision points"
            )
            print(f"{'form':8s} {'clients':>7s} {'req/s':>9s} {'decisions/s':>12s} {'p50 ms':>8s} {'p99 ms':>8s}")
            for batch in (1, args.batch):
                for clients in (1, 64):
                    decisions, lat = asyncio.run(drive(url, points, clients, batch, args.seconds))
                    ms = np.asarray(lat) * 1000
                    form = "single" if batch == 1 else f"batch{batch}"
                    print(
                        f"{form:8s} {clients:7d} {len(lat) / args.seconds:9.0f} {decisions / args.seconds:12.0f} "
                        f"{np.percentile(ms, 50):8.2f} {np.percentile(ms, 99):8.2f}",
                        flush=True,
                    )
        finally:
            server.terminate()
            server.wait(10)
        for rows, (calls, ms) in bare_forward(points, args.seconds).items():
            print(f"bare forward pass, {rows:2d} rows: {calls:9.0f} calls/s {calls * rows:12.0f} decisions/s {ms:8.3f} ms/call")
    return 0


if __name__ == "__main__":
    sys.exit(main())
