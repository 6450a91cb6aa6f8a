"""Chunks as Ray tasks: ``RayExecutor``, the check of ``compute.address`` before ``ray.init``, and
the runtime environment every worker gets (``ml.runtime.compute`` says what the executors promise).
"""

from __future__ import annotations

import logging
import os
import socket
import time
from collections import OrderedDict, deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypedDict, TypeVar

from ml.base.determinism import cpu_env, deterministic_torch
from ml.runtime.executor import ComputeError, Executor, Shared

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
    PettingZoo game (``ml.game.pettingzoo.load.shipped_modules``: its env factory and teacher, when
    they are not installed requirements of this project) as ``py_modules``, and the driver's
    ``PYTHONHASHSEED`` and CPU cap (``ml.base.determinism``) as ``env_vars``, so a worker's first torch
    operator already sees it."""
    import sys

    user = sys.modules.get("ml.game.pettingzoo.load")
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
    deterministic_torch()
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
