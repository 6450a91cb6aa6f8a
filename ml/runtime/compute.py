"""The one chunk executor of every stage that plays games: this machine, or a Ray cluster.

A playing stage cuts its games into fixed chunks, each a pure function of its task (its
seeds and game indices) and of values shared by all chunks (weights, opponents, settings).
``make_executor(params.compute)`` runs the chunks:

* ``local``: in this process, one after the other (self-play keeps its own process pool,
  ``ml/play/collect.py``);
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
"""

from __future__ import annotations

import logging
import os
import socket
import time
from collections import OrderedDict, deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypedDict, TypeVar

import numpy as np

from ml.base.determinism import cpu_env

if TYPE_CHECKING:
    from ml.config.sections import ComputeParams

logger = logging.getLogger(__name__)

R = TypeVar("R")
"""What a chunk function returns."""

INSTALL_HINT = 'pip install -e ".[ray]"'

LOOPBACK_HOSTS = ("localhost", "127.0.0.1", "::1")
"""Hosts Ray's ``ray.init(address=...)`` replaces by this machine's address (sync partner:
``ray._common.network_utils.is_localhost``, used by ``ray._private.services.resolve_ip_for_localhost``)."""
GCS_CHECK_PATH = "/ray.rpc.NodeInfoGcsService/GetClusterId"
"""The gRPC method a Ray client calls first (``gcs_service.proto``; it needs no cluster id): answered only by a GCS."""


class ComputeError(RuntimeError):
    """The compute backend cannot run the stage: Ray missing, the cluster unreachable, or lost mid-stage (one line)."""


@dataclass(frozen=True)
class Shared:
    """A value every chunk of a stage reads: the value itself (``local``) or its object-store ref (``ray``).

    Attributes:
        key: identifies the value (the object id on Ray) for the workers' cache.
        value: the value (``local``), else None.
        ref: ``[ObjectRef]`` (``ray``; in a list so Ray hands the ref, not the value, to the task).
    """

    key: str
    value: Any = None
    ref: list[Any] | None = None


def chunk_ranges(n: int, size: int) -> list[range]:
    """Game indices ``0..n-1`` cut into consecutive ranges of ``size`` (the last may be shorter; 0: one range).

    Raises:
        ValueError: ``n`` or ``size`` is negative.
    """
    if n < 0 or size < 0:
        raise ValueError(f"chunk_ranges needs n >= 0 and size >= 0, got n={n}, size={size}")
    size = size or max(n, 1)
    return [range(a, min(a + size, n)) for a in range(0, n, size)]


def chunk_seed(seed: int, k: int) -> int:
    """The sampling seed of chunk ``k`` of a stage seeded ``seed``: ``seed`` itself for chunk 0 (one chunk
    plays as the stage did before chunks existed), else a SeedSequence draw (< 2**31) from ``(seed, k)``."""
    if k == 0:
        return seed
    return int(np.random.SeedSequence([seed & 0xFFFFFFFF, k]).generate_state(1)[0] >> 1)


class Executor:
    """Runs chunk functions ``fn(task, *shared_values)``; ``local`` runs them here, in order.

    Attributes:
        backend: ``local`` or ``ray``.
        slots: chunks that can run at once (1 here; the cluster's CPUs / ``cpus_per_chunk`` on Ray).
    """

    backend = "local"
    slots = 1

    def share(self, value: object) -> Shared:
        """Make ``value`` readable by every chunk (on Ray: one ``ray.put``)."""
        return Shared(str(id(value)), value=value)

    def map(
        self,
        fn: Callable[..., R],
        tasks: Sequence[object],
        *shared: Shared,
        on_result: Callable[[int, R], object] | None = None,
    ) -> list[R]:
        """``[fn(task, *shared values) for task in tasks]``, in task order.

        ``on_result(index, result)`` is called as each chunk finishes (in order of completion
        on Ray): progress bars count finished work from every node through it.

        Raises:
            ComputeError: the cluster was lost (Ray).
            Exception: what ``fn`` raised.
        """
        out = []
        for i, task in enumerate(tasks):
            out.append(fn(task, *(s.value for s in shared)))
            if on_result is not None:
                on_result(i, out[-1])
        return out

    def imap(self, fn: Callable[..., R], tasks: Iterable[object], *shared: Shared, window: int = 0) -> Iterator[R]:
        """Lazy ``map`` for stages that may stop early (the gate's SPRT): results in task order.

        On Ray up to ``window`` chunks (0: ``slots``) run ahead of the one being read; the ones
        still running when the caller stops are cancelled.
        """
        for task in tasks:
            yield fn(task, *(s.value for s in shared))

    def close(self) -> None:
        """Release the backend (on Ray: disconnect, and stop a Ray this executor started)."""


LOCAL = Executor()
"""The in-process executor (the default of every function that takes ``executor=``)."""

# ------------------------------------------------------------------------------------------------ the address check


def grpc_check(target: str, path: str | None, timeout_s: float) -> str | None:
    """Whether the server at ``target`` (``host:port``) speaks gRPC and, with ``path``, answers that
    unary method; None when it does, else what was found, in words. Bounded by ``timeout_s`` seconds.

    grpcio's channel is READY only after the HTTP/2 handshake (SETTINGS exchanged), which a plain
    TCP or HTTP/1 server never completes; the call then sends an empty request message, a valid
    protobuf of every message whose fields are all optional (``GetClusterIdRequest`` has none):
    the GCS answers it, another gRPC server (the raylet) answers ``UNIMPLEMENTED``.

    Raises:
        ComputeError: grpcio is not installed (``pip install -e ".[ray]"``).
    """
    try:
        import grpc
    except ImportError:
        raise ComputeError('compute.backend ray needs grpcio to check compute.address: pip install -e ".[ray]"') from None
    deadline = time.monotonic() + timeout_s
    service = path.split("/")[1] if path else ""
    with grpc.insecure_channel(target, options=[("grpc.enable_http_proxy", 0)]) as channel:
        try:
            grpc.channel_ready_future(channel).result(timeout=timeout_s)
        except grpc.FutureTimeoutError:
            return f"no HTTP/2 (gRPC) answer within {timeout_s:g} s (compute.connect_timeout_s)"
        if path is None:
            return None
        try:
            channel.unary_unary(path)(b"", timeout=max(0.1, deadline - time.monotonic()))
        except grpc.RpcError as e:
            code = e.code()  # a failed call's RpcError is also a grpc.Call
            if code == grpc.StatusCode.UNIMPLEMENTED:
                return f"it speaks gRPC but has no {service} service (its call ended without a reply)"
            if code == grpc.StatusCode.DEADLINE_EXCEEDED:
                return f"it speaks gRPC but its {service} did not answer within {timeout_s:g} s (compute.connect_timeout_s)"
            return f"it speaks gRPC but its {service} call failed: {code.name}"
    return None


# ------------------------------------------------------------------------------------------------ Ray workers


class RayRuntimeEnv(TypedDict):
    """Ray's ``runtime_env`` of every chunk (:func:`runtime_env`): ``py_modules`` and ``excludes``
    are paths and patterns, ``env_vars`` the variables set in each worker."""

    py_modules: list[str]
    excludes: list[str]
    env_vars: dict[str, str]


_CACHE: OrderedDict[str, Any] = OrderedDict()
_CACHE_SIZE = 8


def runtime_env() -> RayRuntimeEnv:
    """The Ray runtime environment of every chunk: the ``ml`` package and the user's modules of a
    PettingZoo game (``ml.game.pettingzoo_env.shipped_modules``: its env factory and teacher, when
    they are not installed requirements of this project) as ``py_modules``, and the driver's
    ``PYTHONHASHSEED`` and CPU cap (``ml.base.determinism``) as ``env_vars``, so a worker's first torch
    operator already sees it."""
    import sys

    user = sys.modules.get("ml.game.pettingzoo_env")
    return {
        "py_modules": [str(Path(__file__).resolve().parents[1]), *(user.shipped_modules() if user is not None else [])],
        "excludes": ["__pycache__", "*.pyc", "api/static", "api/templates"],
        "env_vars": {"PYTHONHASHSEED": os.environ.get("PYTHONHASHSEED", "0"), **cpu_env()},
    }


def _resolve(s: tuple[str, list[Any]]) -> Any:
    """A shared value in a Ray worker, fetched from the object store once per worker process."""
    key, ref = s
    if key in _CACHE:
        _CACHE.move_to_end(key)
        return _CACHE[key]
    import ray

    value = ray.get(ref[0])
    _CACHE[key] = value
    while len(_CACHE) > _CACHE_SIZE:
        _CACHE.popitem(last=False)
    return value


def _run_chunk(fn: Callable[..., Any], task: Any, torch_threads: int, *shared: tuple[str, list[Any]]) -> Any:
    """The body of every Ray task: the stage's torch settings, the shared values, then ``fn``."""
    import torch

    if torch.get_num_threads() != torch_threads:
        torch.set_num_threads(torch_threads)
    torch.use_deterministic_algorithms(True)
    return fn(task, *(_resolve(s) for s in shared))


class RayExecutor(Executor):
    """Chunks as Ray tasks on the cluster of ``cfg`` (see the module docstring).

    Args:
        cfg: the ``compute`` params (``backend: ray``).
        torch_threads: torch threads per chunk (``base.torch_threads``, as in a local stage).

    Raises:
        ComputeError: Ray is not installed, or nothing answers at ``cfg.address``, or what answers
            is not a Ray GCS (``_probe``), or ``ray.init`` fails.
    """

    backend = "ray"

    def __init__(self, cfg: ComputeParams, torch_threads: int = 1) -> None:
        try:
            import ray
        except ImportError:
            raise ComputeError(f"compute.backend is ray but Ray is not installed: {INSTALL_HINT}") from None
        self.cfg = cfg
        self.address = cfg.address
        self._ray = ray
        self._started = False
        self._probe()
        if not ray.is_initialized():
            self._connect()
        resources = ray.cluster_resources()  # type: ignore[no-untyped-call]  # ray leaves it unannotated
        self.slots = max(1, int(resources.get("CPU", 1) // cfg.cpus_per_chunk))
        self._remote = ray.remote(_run_chunk).options(
            num_cpus=cfg.cpus_per_chunk,
            resources=dict(cfg.resources) or None,
            max_retries=cfg.max_retries,
            retry_exceptions=False,
            scheduling_strategy="SPREAD",
        )
        self._torch_threads = torch_threads
        logger.info("compute: ray cluster %s, %d chunk slots", self.address, self.slots)

    def _probe(self) -> None:
        """Fail in one line, within ``connect_timeout_s``, unless a ``host:port`` address is a Ray GCS
        (``ray://host:port``: a gRPC server, the Ray Client's); Ray itself retries for minutes.

        The probe dials what Ray dials: Ray replaces a loopback host (``localhost``, ``127.0.0.1``,
        ``::1``) by this machine's address (``ray.util.get_node_ip_address``), the address it hands
        to the other nodes, so a server listening on loopback only is not what Ray reaches.
        """
        address = self.address
        if address in ("local", "auto"):
            return
        client = address.startswith("ray://")
        host, port = address.removeprefix("ray://").rsplit(":", 1)
        dialed = host
        if not client and host in LOOPBACK_HOSTS:
            dialed = self._ray.util.get_node_ip_address()  # type: ignore[no-untyped-call]  # ray leaves it unannotated
        at = f" at {dialed}:{port}, where Ray dials it (Ray replaces a loopback host by this machine's address)"
        at = at if dialed != host else ""
        timeout = self.cfg.connect_timeout_s  # the connect, then the gRPC check: each within it
        try:
            socket.create_connection((dialed, int(port)), timeout=timeout).close()
        except OSError as e:
            raise ComputeError(f"compute.address {address}: the Ray cluster does not answer{at} ({e})") from None
        found = grpc_check(f"{dialed}:{port}", None if client else GCS_CHECK_PATH, timeout)
        if found is not None:
            what = "a Ray Client server" if client else "a Ray GCS (the head's ray start --port)"
            raise ComputeError(f"compute.address {address}: something listens{at}, but not {what}: {found}") from None

    def _connect(self) -> None:
        ray, address = self._ray, self.address
        try:
            extra = {"include_dashboard": False} if address == "local" else {}
            ray.init(address=address, runtime_env=runtime_env(), logging_level=logging.WARNING, log_to_driver=False, **extra)
        except (ConnectionError, RuntimeError) as e:
            first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
            raise ComputeError(f"compute.address {address}: cannot connect: {first}") from None
        self._started = True

    def share(self, value: object) -> Shared:
        ref = self._ray.put(value)
        return Shared(ref.hex(), ref=[ref])

    def _submit(self, fn: Callable[..., Any], task: Any, shared: tuple[Shared, ...]) -> Any:
        return self._remote.remote(fn, task, self._torch_threads, *((s.key, s.ref) for s in shared))

    def _get(self, ref: Any) -> Any:
        ray = self._ray
        try:
            return ray.get(ref)
        except ray.exceptions.RayTaskError as e:  # the chunk itself raised: re-raise its own error
            raise e.as_instanceof_cause() from None
        except ray.exceptions.RayError as e:
            first = (str(e).strip().splitlines() or [type(e).__name__])[0]
            raise ComputeError(
                f"compute: Ray cluster {self.address} lost mid-stage ({type(e).__name__}: {first}); "
                "the stage failed, run loop.py again to resume it"
            ) from None

    def map(
        self,
        fn: Callable[..., R],
        tasks: Sequence[object],
        *shared: Shared,
        on_result: Callable[[int, R], object] | None = None,
    ) -> list[R]:
        refs = [self._submit(fn, t, shared) for t in tasks]
        index = {r.hex(): i for i, r in enumerate(refs)}
        out: list[Any] = [None] * len(refs)
        waiting = list(refs)
        try:
            while waiting:
                done, waiting = self._ray.wait(waiting, num_returns=1)
                i = index[done[0].hex()]
                out[i] = self._get(done[0])
                if on_result is not None:
                    on_result(i, out[i])
        finally:
            for r in waiting:
                self._ray.cancel(r)
        return out

    def imap(self, fn: Callable[..., R], tasks: Iterable[object], *shared: Shared, window: int = 0) -> Iterator[R]:
        window = window or self.cfg.max_in_flight or self.slots
        pending: deque[Any] = deque()
        todo = iter(tasks)
        try:
            for task in todo:
                pending.append(self._submit(fn, task, shared))
                if len(pending) >= window:
                    break
            while pending:
                result = self._get(pending.popleft())
                for task in todo:
                    pending.append(self._submit(fn, task, shared))
                    break
                yield result
        finally:
            for r in pending:
                self._ray.cancel(r)

    def close(self) -> None:
        if self._started and self._ray.is_initialized():
            self._ray.shutdown()
            self._started = False


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
    """The executor of ``cfg`` (the ``compute`` params; None: ``local``).

    Raises:
        ComputeError: ``backend: ray`` without Ray installed, or a cluster that does not answer.
    """
    if cfg is None or cfg.backend == "local":
        return LOCAL
    return RayExecutor(cfg, torch_threads)
