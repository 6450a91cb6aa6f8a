"""Benchmark: the policy endpoint (``ml.api.policy``) against the bare forward pass, in the same run.

Starts a uvicorn server (a child process) serving the policy routes for a temporary repository
holding one student (``PolicyNet(OBS_DIM, (256, 256))``, the default ``train.hidden_sizes``), then
drives it from this process with 1 and 64 concurrent asyncio clients, each on its own keep-alive
connection, sending teacher decision points as fast as answers come:

* single form: ``POST /api/ml/policy/act``, one decision point per request;
* batch form: ``POST /api/ml/policy/act/batch``, ``--batch`` decision points per request.

Prints requests/s, decisions/s, p50/p99 latency (ms) and the CPU time per request of server and
client per setting, the bare forward pass (``ml.model.serving.policy_outputs``: the student's forward
and softmax, no HTTP, no JSON, no encoding) on 1 and 64 rows, and the endpoint's encoding alone
(``RecordEncoder.encode_batch`` of validated decision points, as the batcher's worker calls it) per
point on 1 and 64 rows. Client and server share the machine's
cores, so the figures are a floor. The client is a minimal HTTP/1.1 writer/reader on asyncio streams
(:func:`raw_post`): httpx's ``AsyncClient`` spent about 10 ms of CPU per request at 64 concurrent
connections on the 2-core machine, so it, not the server, capped the 64-client figures
(``--client httpx`` runs it for comparison; ``docs/measurements.md``, "Serving").

Usage: python bench/bench_serving.py [--seconds 4] [--batch 64] [--port 8799] [--client raw|httpx]
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
import psutil
import torch

from ml.base.io import atomic_write_json
from ml.data.batch_files import read_records, record_to_json
from ml.game.commander.encoding import OBS_DIM, RecordEncoder
from ml.game.commander.spec import commander
from ml.model.policy import PolicyNet, save_policy
from ml.model.serving import MAX_BATCH_ROWS, MAX_WAIT_S, SWITCH_INTERVAL_S, TORCH_THREADS, policy_outputs
from ml.play.teacher import write_teacher_batch


def serve(root: Path, port: int) -> None:
    """The server side (run in the child process)."""
    import uvicorn
    from fastapi import FastAPI

    from ml.api.policy import add_policy_routes

    app = FastAPI()  # the batcher's worker sets torch's threads (ml.model.serving.TORCH_THREADS)
    add_policy_routes(app, root, lambda _: None, guard=[])
    uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning")


def make_repo(root: Path) -> list[dict]:
    """A student in ``root`` and teacher decision points (as client JSON) to send."""
    torch.manual_seed(0)
    save_policy(PolicyNet(OBS_DIM, (256, 256)).eval(), root / "data/merged/students/gen001.pt", {"generation": 1})
    atomic_write_json(root / "state/eval_history.json", [])
    write_teacher_batch(root / "teacher", commander(), batch_id="b", games=4, seed=5)
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


def encoding_cost(points: list[dict], seconds: float) -> dict[int, float]:
    """Rows -> microseconds per decision point of ``RecordEncoder.encode_batch`` on validated points
    (``ml.api.policy.DecisionPoint``, what the endpoint encodes); the first call (numba's load) untimed."""
    from ml.api.policy import DecisionPoint

    enc = RecordEncoder()
    models = [DecisionPoint.model_validate(p) for p in points]
    enc.encode_batch(models[:1])
    out = {}
    for rows in (1, 64):
        n, started = 0, time.perf_counter()
        while time.perf_counter() - started < seconds / 2:
            for start in range(0, len(models) - rows + 1, rows):
                enc.encode_batch(models[start : start + rows])
                n += rows
        out[rows] = 1e6 * (time.perf_counter() - started) / n
    return out


def request_body(points: list[dict], batch: int, i: int) -> tuple[str, bytes]:
    """The path and JSON body of request ``i`` (one point, or ``batch`` consecutive points)."""
    if batch == 1:
        return "/api/ml/policy/act", json.dumps(points[i % len(points)]).encode()
    start = (i * batch) % (len(points) - batch)
    return "/api/ml/policy/act/batch", json.dumps({"decisions": points[start : start + batch]}).encode()


async def raw_post(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, path: str, body: bytes) -> bytes:
    """One HTTP/1.1 keep-alive POST of a JSON body; the response body (raises unless the status is 200)."""
    head = f"POST {path} HTTP/1.1\r\nHost: bench\r\nContent-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
    writer.write(head.encode() + body)
    status, *headers = (await reader.readuntil(b"\r\n\r\n")).decode("latin-1").split("\r\n")
    length = next(int(h.split(":", 1)[1]) for h in headers if h.lower().startswith("content-length:"))
    data = await reader.readexactly(length)
    if not status.startswith("HTTP/1.1 200"):
        raise RuntimeError(f"{status}: {data[:300]!r}")
    return data


async def drive(
    url: str, points: list[dict], clients: int, batch: int, seconds: float, client: str = "raw"
) -> tuple[int, list[float]]:
    """``clients`` concurrent loops for ``seconds``, one connection each; returns (decisions answered, latencies in s)."""
    latencies: list[float] = []
    decisions = 0
    stop = time.perf_counter() + seconds
    host, port = url.removeprefix("http://").split(":")
    limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients)
    async with httpx.AsyncClient(base_url=url, limits=limits, timeout=30) as pool:

        async def loop(k: int) -> None:
            nonlocal decisions
            i = k
            reader, writer = await asyncio.open_connection(host, int(port)) if client == "raw" else (None, None)
            while time.perf_counter() < stop:
                path, body = request_body(points, batch, i)
                t0 = time.perf_counter()
                if reader is not None and writer is not None:
                    await raw_post(reader, writer, path, body)
                else:
                    (await pool.post(path, content=body, headers={"Content-Type": "application/json"})).raise_for_status()
                latencies.append(time.perf_counter() - t0)
                decisions += batch
                i += clients
            if writer is not None:
                writer.close()

        await asyncio.gather(*(loop(k) for k in range(clients)))
    return decisions, latencies


def cpu_s(proc: psutil.Process) -> float:
    """User plus system CPU seconds of ``proc`` so far."""
    t = proc.cpu_times()
    return t.user + t.system


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--seconds", type=float, default=4.0, help="seconds per setting (default 4)")
    p.add_argument("--batch", type=int, default=64, help="decision points per batch request (default 64)")
    p.add_argument("--port", type=int, default=8799)
    p.add_argument("--client", choices=("raw", "httpx"), default="raw", help="HTTP client of the drivers (default raw)")
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
            asyncio.run(drive(url, points, 4, 1, 0.5, args.client))  # warm-up: model load, connections
            print(
                f"micro-batching window {MAX_WAIT_S * 1000:.1f} ms, cap {MAX_BATCH_ROWS} rows; torch threads {TORCH_THREADS}, GIL switch interval {SWITCH_INTERVAL_S * 1000:g} ms; "
                f"{len(points)} decision points; client {args.client}"
            )
            print(
                f"{'form':8s} {'clients':>7s} {'req/s':>9s} {'decisions/s':>12s} {'p50 ms':>8s} {'p99 ms':>8s} "
                f"{'server cpu ms/req':>17s} {'client cpu ms/req':>17s}"
            )
            me, srv = psutil.Process(), psutil.Process(server.pid)
            for batch in (1, args.batch):
                for clients in (1, 64):
                    cpu0 = (cpu_s(srv), cpu_s(me))
                    decisions, lat = asyncio.run(drive(url, points, clients, batch, args.seconds, args.client))
                    srv_ms, me_ms = (1000 * (cpu_s(x) - c) / len(lat) for x, c in zip((srv, me), cpu0, strict=True))
                    ms = np.asarray(lat) * 1000
                    form = "single" if batch == 1 else f"batch{batch}"
                    print(
                        f"{form:8s} {clients:7d} {len(lat) / args.seconds:9.0f} {decisions / args.seconds:12.0f} "
                        f"{np.percentile(ms, 50):8.2f} {np.percentile(ms, 99):8.2f} {srv_ms:17.2f} {me_ms:17.2f}",
                        flush=True,
                    )
        finally:
            server.terminate()
            server.wait(10)
        for rows, (calls, per_call) in bare_forward(points, args.seconds).items():
            print(
                f"bare forward pass, {rows:2d} rows: {calls:9.0f} calls/s {calls * rows:12.0f} decisions/s {per_call:8.3f} ms/call"
            )
        for rows, us in encoding_cost(points, args.seconds).items():
            print(f"encoding alone,    {rows:2d} rows: {us:9.1f} us a decision point")
    return 0


if __name__ == "__main__":
    sys.exit(main())
