"""Chunks in processes of this machine: ``compute.workers`` processes run a stage's chunks.

``ProcessExecutor`` is the ``local`` backend when more than one worker is asked for. Its pool
starts at the first ``map``/``imap`` with more than one chunk and serves every later call until
``close`` (``open_executor`` closes it with the stage's block, so the workers' CPU time is the
stage's). The workers are ``spawn``ed: fresh interpreters, no torch or OpenMP state of the
stage inherited; each takes the stage's torch threads and determinism as a Ray worker does
(``ml.runtime.ray_cluster``), and the environment, the CPU cap included, is the stage's. Tasks,
shared values and results travel pickled (the shared values with each task: a few hundred KB at
most, the networks' weights). A chunk is a pure function of its task and the shared values, so
the results, in task order, are the bits ``LOCAL`` gives (``tests/test_compute.py``). Self-play
keeps its own pool (``ml/play/collect.py``, ``selfplay.workers``).
"""

from __future__ import annotations

import multiprocessing as mp
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sized
from concurrent.futures import Future, ProcessPoolExecutor
from typing import Any

from ml.runtime.executor import Executor, R, Shared


def _run(fn: Callable[..., R], task: object, torch_threads: int, values: tuple[Any, ...]) -> R:
    """The body of every chunk in a worker: the stage's torch settings, then ``fn``."""
    import torch

    from ml.base.determinism import deterministic_torch

    if torch.get_num_threads() != torch_threads:
        torch.set_num_threads(torch_threads)
    deterministic_torch()
    return fn(task, *values)


class ProcessExecutor(Executor):
    """Runs chunks in ``workers`` local processes, results in task order.

    Attributes:
        slots: the worker processes (>= 2).
    """

    backend = "local"

    def __init__(self, workers: int, torch_threads: int = 1) -> None:
        if workers < 2:
            raise ValueError(f"ProcessExecutor needs at least 2 workers, got {workers}")
        self.slots = workers
        self.torch_threads = torch_threads
        self._pool: ProcessPoolExecutor | None = None

    def imap(self, fn: Callable[..., R], tasks: Iterable[object], *shared: Shared, window: int = 0) -> Iterator[R]:
        """Results in task order; up to ``window`` chunks (0: twice ``slots``) run ahead of the one
        being read. When the caller stops early (the gate's SPRT), the chunks not started are
        cancelled (those running finish in the background). A sized ``tasks`` of one chunk runs
        here, as ``LOCAL`` runs it."""
        if isinstance(tasks, Sized) and len(tasks) <= 1:  # one chunk: no process to start
            yield from super().imap(fn, tasks, *shared)
            return
        if self._pool is None:
            self._pool = ProcessPoolExecutor(self.slots, mp_context=mp.get_context("spawn"))
        pool, values = self._pool, tuple(s.value for s in shared)
        window = max(window or 2 * self.slots, 1)  # a chunk queued behind each running one: no worker waits on the reader
        todo = iter(tasks)
        pending: deque[Future[R]] = deque()
        try:
            for task in todo:
                pending.append(pool.submit(_run, fn, task, self.torch_threads, values))
                if len(pending) >= window:
                    break
            while pending:
                result = pending.popleft().result()
                for task in todo:
                    pending.append(pool.submit(_run, fn, task, self.torch_threads, values))
                    break
                yield result
        finally:
            for f in pending:
                f.cancel()

    def close(self) -> None:
        """Stop the workers (after the chunks still running); the next call starts a new pool."""
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool = None
