"""Online inference of a policy: one forward pass for many concurrent requests (micro-batching).

A request hands over its observations and masks (``float32[N, obs_dim]``, ``bool[N, num_actions]``)
together with the model that is to answer them (a :class:`ServedModel`, resolved when the request
arrived). :class:`MicroBatcher` queues requests on an ``asyncio.Queue``; its worker takes the first
waiting request, then keeps collecting for at most ``MAX_WAIT_S`` or until ``MAX_BATCH_ROWS`` rows
are waiting, and runs one forward pass per model among them (in a worker thread, so the event loop
keeps accepting requests). A model switch only changes which ``ServedModel`` new requests resolve
to: a request already queued keeps the model it was given, and no request is dropped.

Generic: knows nothing of a game beyond ``ml.policy.PolicyNet``.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from ml.policy import PolicyNet

MAX_WAIT_S = 0.002
"""How long the worker waits for more requests after the first one of a batch (seconds). 2 ms: the
bare forward pass of a 256x256 student on 64 rows takes about 0.2 ms on one CPU core
(``bench/bench_serving.py``), so a wait much longer than that only adds latency, and 2 ms is well under
one HTTP round trip on loopback (~1 ms for FastAPI), so a lone client loses little."""
MAX_BATCH_ROWS = 256
"""Most decision rows in one forward pass: beyond a few hundred rows an MLP forward on CPU grows
linearly (no more amortisation), and a cap bounds the latency one huge batch request adds to others.
A single request bigger than this still runs, alone."""


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

    def describe(self) -> dict[str, Any]:
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
class _Request:
    model: ServedModel
    obs: np.ndarray
    mask: np.ndarray
    future: asyncio.Future = field(repr=False)


class MicroBatcher:
    """Batches concurrent requests into shared forward passes (see the module docstring).

    Args:
        max_wait_s: collection window after a batch's first request (``MAX_WAIT_S``).
        max_batch_rows: cap of rows per forward pass (``MAX_BATCH_ROWS``).

    Attributes:
        batches: forward passes run so far; rows: decision rows answered (for tests and the bench).
    """

    def __init__(self, max_wait_s: float = MAX_WAIT_S, max_batch_rows: int = MAX_BATCH_ROWS) -> None:
        self.max_wait_s, self.max_batch_rows = max_wait_s, max_batch_rows
        self.batches = self.rows = 0
        self._queue: asyncio.Queue[_Request] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._worker: asyncio.Task | None = None

    def _ensure_worker(self) -> asyncio.Queue[_Request]:
        """The queue of the running event loop, with its worker (started on first use in each loop:
        a test client may run every request in a fresh loop)."""
        loop = asyncio.get_running_loop()
        if self._queue is None or self._loop is not loop or self._worker is None or self._worker.done():
            self._queue, self._loop = asyncio.Queue(), loop
            self._worker = loop.create_task(self._run(self._queue), name="policy-micro-batcher")
        return self._queue

    async def submit(self, model: ServedModel, obs: np.ndarray, mask: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Answer one request with ``model`` (see :func:`policy_outputs` for the arrays and the result)."""
        queue = self._ensure_worker()
        future: asyncio.Future = asyncio.get_running_loop().create_future()
        await queue.put(_Request(model, obs, mask, future))
        return await future

    async def _run(self, queue: asyncio.Queue[_Request]) -> None:
        while True:
            batch = [await queue.get()]
            rows = len(batch[0].obs)
            deadline = time.perf_counter() + self.max_wait_s
            while rows < self.max_batch_rows:
                try:
                    if queue.empty():
                        left = deadline - time.perf_counter()
                        if left <= 0:
                            break
                        req = await asyncio.wait_for(queue.get(), left)
                    else:
                        req = queue.get_nowait()
                except asyncio.TimeoutError:
                    break
                batch.append(req)
                rows += len(req.obs)
            await self._answer(batch)

    async def _answer(self, batch: list[_Request]) -> None:
        """One forward pass per model in ``batch`` (off the event loop); every future gets its rows or the error."""
        groups: dict[int, list[_Request]] = {}
        for req in batch:
            groups.setdefault(id(req.model), []).append(req)
        for reqs in groups.values():
            try:
                obs = np.concatenate([r.obs for r in reqs])
                mask = np.concatenate([r.mask for r in reqs])
                actions, probs, values = await asyncio.to_thread(policy_outputs, reqs[0].model.net, obs, mask)
            except Exception as e:  # answer every waiting request, keep serving
                for r in reqs:
                    if not r.future.done():
                        r.future.set_exception(e)
                continue
            self.batches, self.rows = self.batches + 1, self.rows + len(obs)
            start = 0
            for r in reqs:
                end = start + len(r.obs)
                if not r.future.done():
                    r.future.set_result((actions[start:end], probs[start:end], values[start:end]))
                start = end
