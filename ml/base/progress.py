"""What a user sees of a running stage: progress bars and lines, warnings said once.

``ProgressBar(...)`` is ``tqdm`` plus two things:

* when the environment names a status file (``DISTILL_PROGRESS_FILE``, set by ``loop.py``
  for the stage it runs), an atomic JSON write of ``{"desc", "n", "total", "unit",
  "updated_at"}`` (and ``note``, see ``finish``) at most every ``REPORT_EVERY_S`` seconds, so the dashboard can show the
  progress within a stage without touching the stage's output;
* when the bar itself is disabled (stderr is not a terminal: ``loop.py`` under ``nohup``,
  ``tee`` or a file, or ``--no-progress``), a plain log line with done/total, the rate and
  the time left at most every ``DISTILL_PROGRESS_EVERY_S`` seconds (default
  ``LINE_EVERY_S``; ``0`` turns them off), so a long stage is not silent for minutes
  and a last line when it closes, unless the one before said the same count.

A bar that ends short of its total says why on its last line (``finish(note)``: the gate's
sequential tests, ``decided early: SPRT accepted H1 after 120 of 1600 games``); a bar whose
total is a floor, not an exact count (self-play's decision budget: its rounds finish the games
in flight), is made with ``total_is_floor=True`` and raises its total to the count when the
count passes it, so it never loses its percentage. ``counted(items, bar)`` counts results as
they are produced, so a consumer that stops early (a test that decided) leaves the bar at the
items it took, the last one included.

``heartbeat(log, what)`` is for work that counts nothing (numba compiling the commander core): a
line ``what: 12s elapsed ...`` every ``HEARTBEAT_EVERY_S`` seconds while a ``with`` block runs, from a
thread the block's end stops; a block done within the first interval says nothing.

``log_once`` logs a message the first time only, for warnings a loop would otherwise repeat
every epoch. What ``loop.py`` shows of ``dvc repro``'s own output is ``ml.driver.dvc_output``.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
import time
from collections.abc import Iterable, Iterator, Sized
from contextlib import contextmanager
from typing import Any, TypeVar

from tqdm import tqdm

from ml.base.io import atomic_write_json

logger = logging.getLogger(__name__)

PROGRESS_FILE_ENV = "DISTILL_PROGRESS_FILE"
REPORT_EVERY_S = 2.0
"""Seconds between two writes of the status file."""
LINE_EVERY_ENV = "DISTILL_PROGRESS_EVERY_S"
LINE_EVERY_S = 30.0
"""Default seconds between two progress lines of a disabled bar."""
HEARTBEAT_EVERY_S = 5.0
"""Default seconds between two lines of a ``heartbeat``."""

T = TypeVar("T")
_now = time.monotonic  # the clock of the progress lines (tests replace it)
_said: set[tuple[str, int, str]] = set()  # (logger, level, message) already logged by log_once


def line_interval_s() -> float:
    """Seconds between two progress lines: ``$DISTILL_PROGRESS_EVERY_S``, else ``LINE_EVERY_S``.

    Raises:
        ValueError: the variable is not a number >= 0 (the message names it).
    """
    text = os.environ.get(LINE_EVERY_ENV, "").strip()
    if not text:
        return LINE_EVERY_S
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not value >= 0:  # also catches nan
        raise ValueError(f"{LINE_EVERY_ENV}={text!r}: give seconds between progress lines (>= 0; 0 turns them off)")
    return value


def _duration(seconds: float) -> str:
    """``42s``, ``6m05s`` or ``1h02m``."""
    s = round(seconds)
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{s % 3600 // 60:02d}m"


def progress_line(label: str, n: float, total: float | None, unit: str, elapsed_s: float, postfix: str = "") -> str:
    """One progress line, e.g. ``selfplay: 12000/50000 dec (24%), 85.1 dec/s, 2m21s elapsed, ~7m27s left``.

    Args:
        label: what progresses (the bar's ``desc``).
        n: done so far, in ``unit``.
        total: the whole, in ``unit`` (None: unknown).
        unit: what is counted (``game``, ``dec``, ``epoch``).
        elapsed_s: seconds since the start.
        postfix: the bar's postfix (``win=0.31, kl=0.0123``), appended when not empty.

    Returns:
        The line, without a newline. Rates below one per second read as seconds per unit.
    """
    count = f"{n:g}/{total:g} {unit} ({100 * n / total:.0f}%)" if total else f"{n:g} {unit}"
    rate = n / elapsed_s if elapsed_s > 0 else 0.0
    speed = f"{rate:.1f} {unit}/s" if rate >= 1 or rate == 0 else f"{1 / rate:.1f} s/{unit}"
    parts = [f"{label or 'progress'}: {count}", speed, f"{_duration(elapsed_s)} elapsed"]
    if total and rate > 0 and n < total:
        parts.append(f"~{_duration((total - n) / rate)} left")
    if postfix:
        parts.append(postfix)
    return ", ".join(parts)


@contextmanager
def heartbeat(log: logging.Logger, what: str, every_s: float | None = None) -> Iterator[None]:
    """Log ``what: 12s elapsed ...`` every ``every_s`` seconds while the ``with`` block runs.

    For work with nothing to count (numba compiling a kernel), so that a log going to a file or a
    pipe is not silent for a minute: plain log lines, not a terminal spinner. A thread waits between
    the lines; the block's end (return or raise) stops it and waits for it, so no line follows the
    block and no thread outlives it (a process may fork after the block). A block done within the
    first interval says nothing; a late line (the thread starved) is not followed by the ones it missed.

    Args:
        log: the logger of the module doing the work.
        what: what is being done, e.g. ``commander core: compiling the kernels once (...)``.
        every_s: seconds between two lines (None: ``HEARTBEAT_EVERY_S``; <= 0: no lines).

    Each record carries the seconds since the block began as ``elapsed_s``.
    """
    every = HEARTBEAT_EVERY_S if every_s is None else every_s
    if not every > 0:
        yield
        return
    started = time.monotonic()
    stop = threading.Event()

    def beat() -> None:
        beats = 1
        while not stop.wait(max(0.0, started + beats * every - time.monotonic())):
            elapsed = time.monotonic() - started
            log.info("%s: %s elapsed ...", what, _duration(elapsed), extra={"elapsed_s": elapsed})
            beats = max(beats + 1, int(elapsed // every) + 1)

    thread = threading.Thread(target=beat, name="heartbeat", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()


def log_once(log: logging.Logger, level: int, msg: str, *args: object) -> bool:
    """Log ``msg % args`` unless this logger already logged that exact text at that level in this process.

    Args:
        log: the module's logger.
        level: ``logging.INFO``, ``logging.WARNING``...
        msg: the %-format message; ``args`` its arguments.

    Returns:
        True when the message was logged now, False when it had been before.
    """
    key = (log.name, level, msg % args if args else msg)
    if key in _said:
        return False
    _said.add(key)
    log.log(level, msg, *args)
    return True


class ProgressBar(tqdm):  # tqdm ships no type stubs (types-tqdm is not installed)
    """``tqdm`` that mirrors its count into ``$DISTILL_PROGRESS_FILE`` (if set), even when disabled,
    and logs a plain progress line at most every ``line_every_s`` seconds while disabled.

    Args:
        iterable, *args, **kwargs: as for ``tqdm`` (``desc``, ``total``, ``unit``, ``disable``).
        line_every_s: seconds between two progress lines of a disabled bar (None:
            ``line_interval_s()``, from ``$DISTILL_PROGRESS_EVERY_S``; 0: no lines).
        total_is_floor: ``total`` is the least the count reaches, not its exact end: when the
            count passes it, the total becomes the count (tqdm drops the percentage and the
            time left of a bar past its total).

    Raises:
        ValueError: ``$DISTILL_PROGRESS_EVERY_S`` is not a number >= 0 (when ``line_every_s`` is None).
    """

    def __init__(
        self,
        iterable: Iterable[object] | None = None,
        *args: Any,
        line_every_s: float | None = None,
        total_is_floor: bool = False,
        **kwargs: Any,
    ) -> None:
        self._status_path = os.environ.get(PROGRESS_FILE_ENV)
        self._floor = total_is_floor
        self._note = ""
        self._last_report = 0.0
        self._count: float = 0  # tqdm counts in floats when update() is given one
        self._label = str(kwargs.get("desc", "") or "")
        self._unit = str(kwargs.get("unit", "it"))
        total = kwargs.get("total")
        if total is None and isinstance(iterable, Sized):
            total = len(iterable)
        self._total = total
        self._line_every_s = line_interval_s() if line_every_s is None else line_every_s
        self._started = self._last_line = _now()
        self._lines = 0
        self._said_count: float | None = None  # the count of the last line logged
        self._finished = False
        super().__init__(iterable, *args, **kwargs)
        self._report(force=True)

    def update(self, n: float | None = 1) -> bool | None:
        self._count += n or 0
        if self._floor and self._total is not None and self._count > self._total:
            self._total = self.total = self._count
        out: bool | None = super().update(n)
        self._tick()
        return out

    def __iter__(self) -> Iterator[Any]:
        for item in super().__iter__():
            yield item
            self._count += 1
            self._tick()

    def finish(self, note: str) -> None:
        """Close the bar with ``note`` (why it ended where it did) on its last line.

        On a terminal the note is the bar's postfix as it stays on screen; a disabled bar logs
        its last line with the note even when it logged none along the way (an interval of
        0 still turns the lines off); the status file gets it as ``note``.
        """
        self._note = note
        shown = getattr(self, "postfix", None) or ""
        self.set_postfix_str(f"{shown}, {note}" if shown else note, refresh=False)
        self.close()

    def close(self) -> None:
        if not getattr(self, "_finished", True):  # tqdm's __del__ closes again
            self._finished = True
            ended = self._lines and self._count != self._said_count  # said how it went along, not yet where it ended
            if ended or (self._note and self.disable and self._line_every_s > 0):
                self._line()
            self._report(force=True)
        super().close()

    def _tick(self) -> None:
        self._report()
        if self.disable and self._line_every_s > 0 and _now() - self._last_line >= self._line_every_s:
            self._line()

    def _line(self) -> None:
        now = self._last_line = _now()
        self._lines += 1
        self._said_count = self._count
        postfix = getattr(self, "postfix", None) or ""
        logger.info("%s", progress_line(self._label, self._count, self._total, self._unit, now - self._started, postfix))

    def _report(self, force: bool = False) -> None:
        status_path: str | None = getattr(self, "_status_path", None)  # unset when tqdm's __del__ follows a failed __init__
        if not status_path or sys.is_finalizing():
            return
        now = time.monotonic()
        if not force and now - self._last_report < REPORT_EVERY_S:
            return
        self._last_report = now
        doc = {"desc": self._label, "n": self._count, "total": self._total, "unit": self._unit, "updated_at": time.time()}
        if self._note:
            doc["note"] = self._note
        atomic_write_json(status_path, doc)


def counted(items: Iterable[T], bar: ProgressBar) -> Iterator[T]:
    """``items``, with ``bar`` counting each one as it is produced.

    For results that are done when they are yielded (a played deal of the gate's sequential
    tests): a consumer that stops early leaves the bar at what it took. ``for x in bar``
    (tqdm's way) counts an item when the loop asks for the next one, right for work done in
    the loop body (an epoch) but one short when the loop breaks (a test that decided).
    """
    for item in items:
        bar.update(1)
        yield item
