"""The one chunk executor of every stage that plays games: this machine, or a Ray cluster.

A playing stage cuts its games into fixed chunks, each a pure function of its task (its
seeds and game indices) and of values shared by all chunks (weights, opponents, settings).
``make_executor(params.compute)`` runs the chunks:

* ``local``: in ``compute.workers`` processes of this machine (``ml.runtime.local_pool``; one:
  in this process, one after the other); self-play keeps its own process pool (``ml/play/collect.py``);
* ``ray``: each chunk is a Ray task (``max_retries`` re-runs of a chunk whose worker or node
  died, ``SPREAD`` over the nodes, ``cpus_per_chunk`` and ``resources`` reserved). A shared
  value goes to the object store once (``Executor.share``: the policy weights once per
  self-play round, frozen opponents once per stage) and each worker process reads it once
  (a small cache keyed by the object id). The ``ml`` package travels as a Ray ``py_modules``
  runtime environment, so workers need the dependencies installed (``constraints.txt``), never
  the repository.

Results come back in task order whatever the order of completion, so for the same params
``local`` and ``ray`` give the same bits (``tests/test_ray.py``; nodes must run the same
torch build on the same CPU architecture; ``ml.base.determinism`` caps every x86-64 node's vector
unit at AVX2, so AVX-512 and AVX2 nodes agree).

Ray is imported lazily: the project imports without it, and ``backend: ray`` without Ray is a
one-line ``ComputeError`` saying what to install. A ``host:port`` address is checked before
``ray.init`` (which retries for minutes where no GCS answers), within
``compute.connect_timeout_s``: a TCP connect to the address Ray dials, then the first gRPC call
of a Ray client (``grpc_check``, grpcio); a failure is one ``ComputeError`` line naming the address and
what is there.

The executors' base (``Executor``, ``LOCAL``, ``ComputeError``, the chunk helpers) is
``ml.runtime.executor``; the Ray side (the executor, the address check, the workers' runtime
environment) is ``ml.runtime.ray_cluster``, which imports Ray only when a cluster is asked for.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

from ml.runtime.executor import LOCAL, Executor
from ml.runtime.local_pool import ProcessExecutor
from ml.runtime.ray_cluster import RayExecutor

if TYPE_CHECKING:
    from ml.config.sections import ComputeParams


@contextmanager
def open_executor(cfg: ComputeParams | None, torch_threads: int = 1) -> Iterator[Executor]:
    """``make_executor`` as a context: the executor is closed when the block ends, however it ends.

    Raises:
        ComputeError: as ``make_executor``, or the cluster lost inside the block.
    """
    executor = make_executor(cfg, torch_threads)
    try:
        yield executor
    finally:
        executor.close()


def make_executor(cfg: ComputeParams | None, torch_threads: int = 1) -> Executor:
    """The executor of ``cfg`` (the ``compute`` params; None: ``LOCAL``, in this process).

    Raises:
        ComputeError: ``backend: ray`` without Ray installed, or a cluster that does not answer.
    """
    if cfg is None:
        return LOCAL
    if cfg.backend == "local":
        workers = cfg.workers or os.cpu_count() or 1
        return ProcessExecutor(workers, torch_threads) if workers > 1 else LOCAL
    return RayExecutor(cfg, torch_threads)
