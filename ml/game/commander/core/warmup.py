"""The core's one-time cost: numba compiles every kernel at a process's first use, or loads it
from its cache (``__pycache__`` beside ``kernels.py``, or ``NUMBA_CACHE_DIR``).

:func:`warm_up` calls every kernel once on a one-game batch and says which it was and how long
it took; ``CoreGame`` calls it once per process, so every stage that plays the commander logs
the figure (measured: about 70 s cold on a 2-core machine, 2-3 s from the cache).
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

import numpy as np

from ml.game.commander import core
from ml.game.commander.actions import MAX_POD
from ml.game.commander.core import kernels

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class WarmUp:
    """One warm-up: ``seconds`` of wall time, kernels ``compiled`` (cache misses) and ``loaded`` (cache hits)."""

    seconds: float
    compiled: int
    loaded: int

    def describe(self) -> str:
        """One line for the log."""
        how = "compiled" if self.compiled else "loaded from numba's cache"
        cache = kernels.step_kernel.stats.cache_path
        tail = f" (first run; cached in {cache} for the next)" if self.compiled else ""
        return f"commander core: kernels {how} in {self.seconds:.1f} s{tail}"


def _counts() -> tuple[int, int]:
    misses = hits = 0
    for obj in vars(kernels).values():
        stats = getattr(obj, "stats", None)
        if stats is not None and hasattr(stats, "cache_misses"):
            misses += sum(stats.cache_misses.values())
            hits += sum(stats.cache_hits.values())
    return misses, hits


def run_kernels() -> None:
    """Every public kernel once on one tiny batch (compiles each, or loads it from the cache)."""
    tables, st = core.load_tables(), core.new_state(1)
    kinds = np.full((1, MAX_POD), core.SEAT_HEURISTIC, np.int8)
    seeds = np.zeros(1, np.int64)
    core.reset(st, tables, seeds, 4, 30, seat_kind=kinds, player_seeds=np.arange(MAX_POD)[None, :])
    core.step(st, tables, np.full(1, -1, np.int64), np.zeros((1, MAX_POD), np.float32))
    core.reset(st, tables, seeds, 4, 30, seat_kind=kinds, player_seeds=np.arange(MAX_POD)[None, :])
    out = np.zeros(1, np.int64)
    core.choose_scripted(st, tables, out)
    core.encode(st, tables, np.zeros(1, np.int64), np.zeros((1, core.OBS_DIM), np.float32))
    encode_a_record()
    core.apply_actions(st, tables, out, np.zeros((1, MAX_POD), np.float32))


def encode_a_record() -> float:
    """Encode one decision record through the records' path (``observation.encode_records``: the live
    games' compiled encoder, loaded or compiled on first use); returns the seconds it took. The policy
    endpoint calls it at start, so no request pays numba's load."""
    from ml.game.commander.observation import encode_records

    started = time.perf_counter()
    tables = core.load_tables()
    st = core.new_state(1)
    core.reset(st, tables, np.zeros(1, np.int64), 4, 30)
    record = core.decision_record(st, tables, 0)
    encode_records([record], tables, np.zeros((1, core.OBS_DIM), np.float32))
    return time.perf_counter() - started


_DONE: list[WarmUp] = []


def warm_up() -> WarmUp:
    """Run :func:`run_kernels` once per process and log what it cost; later calls return the first figure."""
    if not _DONE:
        misses0, hits0 = _counts()
        started = time.perf_counter()
        run_kernels()
        misses, hits = _counts()
        _DONE.append(WarmUp(time.perf_counter() - started, misses - misses0, hits - hits0))
        logger.info(_DONE[0].describe())
    return _DONE[0]
