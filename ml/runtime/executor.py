"""What every chunk executor is: ``Executor`` (the in-process one, ``LOCAL``), ``Shared`` values,
``ComputeError``, and how a stage cuts its games into chunks (``chunk_ranges``, ``chunk_seed``).
``ml.runtime.compute`` makes the executor the ``compute`` params ask for.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import numpy as np

R = TypeVar("R")
"""What a chunk function returns."""


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
        out: list[R] = []
        for i, result in enumerate(self.imap(fn, tasks, *shared, window=len(tasks))):  # all at once where there are workers
            out.append(result)
            if on_result is not None:
                on_result(i, result)
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
