"""The core's one-time cost: numba compiles every kernel at a process's first use, or loads it
from its cache (``__pycache__`` beside ``kernels.py``, or ``NUMBA_CACHE_DIR``).

:func:`warm_up` calls every kernel once on a one-game batch and says which it was and how long
it took; ``CoreGame`` calls it once per process, so every stage that plays the commander logs
the figure (measured on an idle 2-core machine: 32-43 s cold, 60 s in one process, 0.6-1.3 s
from the cache).

A cold cache is filled on two cores: :func:`run_kernels` starts a second Python process that
compiles the observation side (``reset``, ``encode``, the records' encoder) while this one
compiles the rules side (``step``, the scripted choice), then loads the other side's kernels
from the cache it wrote (numba writes each entry to a temporary file and renames it into
place). Each kernel inlines all it calls, so the two sides share no compiled code (numba's
typing of the helpers, shared within a process, is why the scripted choice goes with ``step``).
Measured per kernel alone, cold: ``step`` 29.5 s, ``encode`` 17.1 s, the scripted choice 12.9 s
(5.2 s after ``step``), ``reset`` 8.1 s (docs/measurements.md, "The cold compile on two cores").
A process killed during a cold warm-up leaves the second one to finish (about 30 s); it writes
only cache entries, each whole or not at all, so the next start loads or compiles as usual.
Processes that start cold at once on one machine compile once: the first takes a file lock
(:func:`compile_lock`), the others wait for it and load what it wrote.

A compile, a load or a wait for the lock logs a line every ``HEARTBEAT_EVERY_S`` seconds (5) after the
first, saying what it does, where the cache is and the time so far (``ml.base.progress.heartbeat``),
so a first run on a fresh clone is not silent for a minute; a load from the cache (about a second) says nothing.
"""

from __future__ import annotations

import hashlib
import logging
import os
import subprocess
import sys
import tempfile
import time
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from filelock import FileLock, Timeout

from ml.base.progress import heartbeat
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
        tail = f" (first run; cached in {cache_path()} for the next)" if self.compiled else ""
        return f"commander core: kernels {how} in {self.seconds:.1f} s{tail}"


def cache_path() -> str:
    """The folder of numba's cache of the kernels (``__pycache__`` beside ``kernels.py``, or ``NUMBA_CACHE_DIR``),
    or ``no cache: NUMBA_DISABLE_JIT``."""
    return str(getattr(getattr(kernels.step_kernel, "stats", None), "cache_path", "no cache: NUMBA_DISABLE_JIT"))


def _saying(compiling: bool) -> AbstractContextManager[None]:
    """The heartbeat of a warm-up: a line every ``HEARTBEAT_EVERY_S`` seconds after the first, saying
    whether it compiles (cold) or loads, and where numba's cache is."""
    if compiling:
        what = f"compiling the kernels once (numba; cached in {cache_path()} for the next runs)"
    else:
        what = f"loading the kernels (numba's cache: {cache_path()}; any it lacks compiles once)"
    return heartbeat(logger, f"commander core: {what}")


def _counts() -> tuple[int, int]:
    misses = hits = 0
    for obj in vars(kernels).values():
        stats = getattr(obj, "stats", None)
        if stats is not None and hasattr(stats, "cache_misses"):
            misses += sum(stats.cache_misses.values())
            hits += sum(stats.cache_hits.values())
    return misses, hits


def cold() -> bool:
    """numba's cache holds no entry of one of the four kernels a warm-up runs (``step``, the scripted choice,
    ``reset``, ``encode``) for this source (an empty cache, one from before an edit of ``kernels.py``, or one
    another process is still filling) and this process has not compiled it: a warm-up now compiles.

    Reads numba's cache index (``FunctionCache._cache_file``, numba 0.60-0.68); where that is not
    there (``NUMBA_DISABLE_JIT=1``, another numba) it says False, and the warm-up runs in one process.
    """
    try:
        return any(
            not d.signatures and not d._cache._cache_file._load_index()
            for d in (kernels.step_kernel, kernels.choose_kernel, kernels.reset_kernel, kernels.encode_kernel)
        )
    except (AttributeError, OSError):
        return False


LOCK_WAIT_S = 900.0
"""Seconds a cold warm-up waits for another process's compile into the same cache before it compiles anyway."""


def compile_lock() -> FileLock:
    """The lock a cold warm-up holds while it fills numba's cache, so that processes started at once on one
    machine (Ray workers, two stages, a test and a stage) compile the kernels once, the others waiting and then
    loading them: a file in the temporary folder named by the cache's folder (``NUMBA_CACHE_DIR`` or
    ``__pycache__`` beside ``kernels.py``), released by the system if its holder dies."""
    folder = Path(kernels.step_kernel.stats.cache_path).resolve()  # a relative NUMBA_CACHE_DIR: one lock per folder
    key = hashlib.sha256(str(folder).encode()).hexdigest()[:16]
    return FileLock(str(Path(tempfile.gettempdir()) / f"distill-numba-compile-{key}.lock"))


_OBSERVATION_SIDE = "from ml.game.commander.core.warmup import compile_observation_side; compile_observation_side()"


def compile_observation_side() -> None:
    """Compile (or load) the kernels of the observation side: ``reset``, ``encode`` and the records' encoder;
    what :func:`run_kernels`' second process runs."""
    tables, st = core.load_tables(), core.new_state(1)
    kinds = np.full((1, MAX_POD), core.SEAT_HEURISTIC, np.int8)
    core.reset(st, tables, np.zeros(1, np.int64), 4, 30, seat_kind=kinds, player_seeds=np.arange(MAX_POD)[None, :])
    core.encode(st, tables, np.zeros(1, np.int64), np.zeros((1, core.OBS_DIM), np.float32))
    encode_a_record()


def compile_rules_side() -> None:
    """Compile (or load) ``step`` and ``choose_scripted`` on one finished game (the arrays' types are all numba
    needs)."""
    tables, st = core.load_tables(), core.new_state(1)
    st.done[:] = True  # nothing is played on the undealt game
    core.step(st, tables, np.full(1, -1, np.int64), np.zeros((1, MAX_POD), np.float32))
    core.choose_scripted(st, tables, np.zeros(1, np.int64))


def _start_observation_side() -> subprocess.Popen[bytes] | None:
    """A Python process compiling the observation side into the same cache (this process's ``ml`` first on
    its path: the same source file, so the same cache entries); None if it cannot start."""
    package_root = str(Path(core.__file__).resolve().parents[3])
    path = os.pathsep.join(p for p in (package_root, os.environ.get("PYTHONPATH", "")) if p)
    try:
        return subprocess.Popen(
            [sys.executable, "-c", _OBSERVATION_SIDE], env={**os.environ, "PYTHONPATH": path},
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
        )  # fmt: skip
    except OSError as err:
        logger.warning("commander core: compiling on one core (no second process: %s)", err)
        return None


def run_kernels() -> None:
    """Every public kernel once on one tiny batch (compiles each, or loads it from the cache): the rules side,
    then the observation side.

    On a cold cache (:func:`cold`) this process takes :func:`compile_lock` first: if another process holds it
    (compiling into the same cache), this one waits (an info line says so; at most :data:`LOCK_WAIT_S`, then a
    warning and it compiles anyway; a lock file it cannot open is a warning too) and loads what that one wrote.
    The holder compiles the observation side in
    a second process meanwhile and then loads it; if that process fails, its kernels compile here (a warning
    says why), so the result is the same."""
    if not cold():
        with _saying(compiling=False):
            _run_sides(None)
        return
    lock = _take_compile_lock()
    try:
        compiling = cold()  # still, unless the lock's last holder filled the cache
        with _saying(compiling):
            _run_sides(_start_observation_side() if compiling else None)
    finally:
        if lock is not None:
            lock.release()


def _take_compile_lock() -> FileLock | None:
    """:func:`compile_lock`, held; None (a warning says why) when it was not had within :data:`LOCK_WAIT_S` or its
    file cannot be opened (another user's, not a file): the caller then compiles without it."""
    lock = compile_lock()
    try:
        try:
            lock.acquire(timeout=0)
        except Timeout:
            logger.info("commander core: waiting for another process compiling the kernels (%s)", lock.lock_file)
            waited = time.perf_counter()
            with heartbeat(logger, f"commander core: waiting for another process compiling the kernels ({lock.lock_file})"):
                lock.acquire(timeout=LOCK_WAIT_S)
            logger.info(
                "commander core: the other process's compile ended after %.1f s of waiting", time.perf_counter() - waited
            )
    except Timeout:
        logger.warning("commander core: no compile lock after %.0f s (%s); compiling here", LOCK_WAIT_S, lock.lock_file)
        return None
    except OSError as err:
        logger.warning("commander core: compiling without the compile lock (%s)", err)
        return None
    return lock


def _run_sides(helper: subprocess.Popen[bytes] | None) -> None:
    """The rules side here, then the observation side (loaded from the cache ``helper`` filled, or here)."""
    compile_rules_side()
    if helper is not None:
        _, err = helper.communicate()
        if helper.returncode != 0:
            tail = err.decode(errors="replace").strip().splitlines()[-1:] or ["no message"]
            logger.warning("commander core: the second compile process failed (%s); compiling here", tail[0])
    compile_observation_side()


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
