"""Online inference of a policy: one forward pass for many concurrent requests (micro-batching).

A request hands over a :class:`Job`: the model that is to answer it (a :class:`ServedModel`,
resolved when the request arrived), a ``prepare`` callable giving its observations and masks
(``float32[N, obs_dim]``, ``bool[N, num_actions]``) and a ``finish`` callable turning its rows of
the forward pass into the answer. :class:`MicroBatcher` runs all of that in one worker thread,
off the event loop: it takes the first waiting job, keeps collecting (and preparing) jobs for at
most ``MAX_WAIT_S`` or until ``MAX_BATCH_ROWS`` rows are waiting, runs one forward pass per model
among them, finishes every job and hands each answer back to the request's event loop. The event
loop only parses HTTP and queues jobs, so it keeps accepting requests while a batch is encoded
(``bench/bench_serving.py``; measured in ``docs/measurements.md``, "Serving"). A model switch only
changes which ``ServedModel`` new requests resolve to: a job already queued keeps the model it was
given, and no request is dropped.

Generic: knows nothing of a game beyond ``ml.model.policy.PolicyNet``.
"""

from __future__ import annotations

import asyncio
import queue
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

import numpy as np
import torch

from ml.base.io import JSONObject
from ml.model.policy import PolicyNet

T = TypeVar("T")
"""The answer type of a request (what its ``finish`` returns)."""

MAX_WAIT_S = 0.002
"""How long the worker waits for more requests after the first one of a batch (seconds). 2 ms: the
bare forward pass of a 256x256 student on 64 rows takes about 0.2 ms on one CPU core
(``bench/bench_serving.py``), so a wait much longer than that only adds latency, and 2 ms is well under
one HTTP round trip on loopback (~1 ms for FastAPI), so a lone client loses little."""
MAX_BATCH_ROWS = 256
"""Most decision rows in one forward pass: beyond a few hundred rows an MLP forward on CPU grows
linearly (no more amortisation), and a cap bounds the latency one huge batch request adds to others.
A single request bigger than this still runs, alone."""
TORCH_THREADS = 1
"""Intra-op threads of torch, set (process-wide) when the worker starts: on a shared 2-core machine two
OpenMP threads made the 64-row forward pass 70x slower (103 ms against 1.5 ms) by spinning on each
other, and one core already runs a 64-row pass in about 1.5 ms (``bench/bench_serving.py``)."""
SWITCH_INTERVAL_S = 0.0005
"""Python's GIL switch interval, set (process-wide) when the worker starts; Python's default is 5 ms. The
worker encodes in Python while the event loop thread waits for the GIL after each socket call; with 5 ms
the loop stalled behind every encode (64 single clients: 457 and 590 req/s against 597 and 739 with
0.5 ms, same runs; ``docs/measurements.md``, "Serving")."""


@dataclass(frozen=True)
class ServedModel:
    """A loaded policy and where it came from (what a response names as the model that answered).

    Attributes:
        net: the policy, in eval mode; never modified once served.
        name: ``gen002`` for a student, the bot's name for a promoted bot.
        kind: ``student`` or ``bot``.
        path: the checkpoint file, relative to the repository.
        attempt_id: the attempt that produced it (``Attempt-Id`` trailer), when known.
        commit: that attempt's commit SHA, when known.
        generation: the generation of a student, when known.
        mtime_ns: the checkpoint file's modification time when loaded (a rewritten file is reloaded).
    """

    net: PolicyNet
    name: str
    kind: str
    path: str
    attempt_id: str | None = None
    commit: str | None = None
    generation: int | None = None
    mtime_ns: int = 0

    def describe(self) -> JSONObject:
        """The JSON description of the model (without the network)."""
        return {
            "name": self.name, "kind": self.kind, "path": self.path, "attempt_id": self.attempt_id,
            "commit": self.commit, "generation": self.generation,
        }  # fmt: skip


@torch.no_grad()
def policy_outputs(net: PolicyNet, obs: np.ndarray, action_mask: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Greedy actions, action probabilities and values of a batch, as ``PolicyNet.act(greedy=True)`` chooses.

    Args:
        net: the policy.
        obs: float32[B, obs_dim].
        action_mask: bool[B, num_actions], at least one legal action per row.

    Returns:
        ``(actions int64[B], probs float32[B, num_actions], values float32[B])``; illegal actions have
        probability exactly 0.
    """
    logits, value = net(torch.from_numpy(obs), torch.from_numpy(action_mask))
    return logits.argmax(dim=-1).numpy(), torch.softmax(logits, dim=-1).numpy(), value.numpy()


@dataclass
class Job:
    """One request's work, all of it run in the batcher's worker thread.

    Attributes:
        model: the model that answers it.
        prepare: ``() -> (obs float32[N, obs_dim], action_mask bool[N, num_actions])``; an exception
            it raises (a 422) is the request's answer.
        finish: ``(actions int64[N], probs float32[N, A], values float32[N]) -> answer`` of its rows.
    """

    model: ServedModel
    prepare: Callable[[], tuple[np.ndarray, np.ndarray]]
    finish: Callable[[np.ndarray, np.ndarray, np.ndarray], object]
    loop: asyncio.AbstractEventLoop = field(repr=False)
    future: asyncio.Future[Any] = field(repr=False)  # holds what the job's finish returned

    def settle(self, result: object = None, error: BaseException | None = None) -> None:
        """Hand the answer (or the error) to the request's event loop (thread-safe; a closed loop is ignored)."""

        def set_() -> None:
            if not self.future.done():  # the client may have gone away
                self.future.set_exception(error) if error is not None else self.future.set_result(result)

        try:
            self.loop.call_soon_threadsafe(set_)
        except RuntimeError:  # the loop is closed: nobody waits any more
            pass


class MicroBatcher:
    """Batches concurrent requests into shared forward passes, in one worker thread (module docstring).

    Args:
        max_wait_s: collection window after a batch's first request (``MAX_WAIT_S``).
        max_batch_rows: cap of rows per forward pass (``MAX_BATCH_ROWS``).
        torch_threads: torch's intra-op threads, set when the worker starts (``TORCH_THREADS``; None: unchanged).
        switch_interval_s: the GIL switch interval, set when the worker starts (``SWITCH_INTERVAL_S``; None: unchanged).

    Attributes:
        batches: forward passes run so far; rows: decision rows answered (for tests and the bench).
    """

    def __init__(
        self,
        max_wait_s: float = MAX_WAIT_S,
        max_batch_rows: int = MAX_BATCH_ROWS,
        torch_threads: int | None = TORCH_THREADS,
        switch_interval_s: float | None = SWITCH_INTERVAL_S,
    ) -> None:
        self.max_wait_s, self.max_batch_rows = max_wait_s, max_batch_rows
        self.torch_threads, self.switch_interval_s = torch_threads, switch_interval_s
        self.batches = self.rows = 0
        self._queue: queue.SimpleQueue[Job | None] = queue.SimpleQueue()
        self._worker: threading.Thread | None = None
        self._lock = threading.Lock()

    async def submit(
        self,
        model: ServedModel,
        prepare: Callable[[], tuple[np.ndarray, np.ndarray]],
        finish: Callable[[np.ndarray, np.ndarray, np.ndarray], T],
    ) -> T:
        """The answer of one request (see :class:`Job`); raises what ``prepare`` or ``finish`` raised."""
        loop = asyncio.get_running_loop()
        job = Job(model, prepare, finish, loop, loop.create_future())
        self._ensure_worker()
        self._queue.put(job)
        answer: T = await job.future
        return answer

    def close(self) -> None:
        """Stop the worker after the jobs already queued (a later ``submit`` starts a new one)."""
        with self._lock:
            worker, self._worker = self._worker, None
        if worker is not None:
            self._queue.put(None)
            worker.join()

    def _ensure_worker(self) -> None:
        with self._lock:
            if self._worker is None or not self._worker.is_alive():
                self._worker = threading.Thread(target=self._run, name="policy-micro-batcher", daemon=True)
                self._worker.start()

    def _run(self) -> None:
        if self.torch_threads is not None:
            torch.set_num_threads(self.torch_threads)
        if self.switch_interval_s is not None:
            sys.setswitchinterval(self.switch_interval_s)
        while True:
            first = self._queue.get()
            if first is None:
                return
            batch: list[tuple[Job, np.ndarray, np.ndarray]] = []
            rows = self._prepare(first, batch)
            deadline = time.perf_counter() + self.max_wait_s
            while rows < self.max_batch_rows:
                try:
                    job = self._queue.get(timeout=max(deadline - time.perf_counter(), 0.0))
                except queue.Empty:
                    break
                if job is None:
                    self._queue.put(None)  # stop after this batch
                    break
                rows += self._prepare(job, batch)
            self._answer(batch)

    @staticmethod
    def _prepare(job: Job, batch: list[tuple[Job, np.ndarray, np.ndarray]]) -> int:
        """Run ``job.prepare`` into ``batch``; its rows (0 when it failed: the job is answered with the error)."""
        try:
            obs, mask = job.prepare()
        except Exception as e:
            job.settle(error=e)
            return 0
        batch.append((job, obs, mask))
        return len(obs)

    def _answer(self, batch: list[tuple[Job, np.ndarray, np.ndarray]]) -> None:
        """One forward pass per model in ``batch``; every job gets its answer or the error."""
        groups: dict[int, list[tuple[Job, np.ndarray, np.ndarray]]] = {}
        for item in batch:
            groups.setdefault(id(item[0].model), []).append(item)
        for items in groups.values():
            try:
                obs = np.concatenate([o for _, o, _ in items])
                mask = np.concatenate([m for _, _, m in items])
                actions, probs, values = policy_outputs(items[0][0].model.net, obs, mask)
            except Exception as e:  # answer every waiting request, keep serving
                for job, _, _ in items:
                    job.settle(error=e)
                continue
            self.batches, self.rows = self.batches + 1, self.rows + len(obs)
            start = 0
            for job, o, _ in items:
                end = start + len(o)
                try:
                    job.settle(job.finish(actions[start:end], probs[start:end], values[start:end]))
                except Exception as e:
                    job.settle(error=e)
                start = end
