"""The loop's processes, recorded by pid, so that the next start stops what a kill left running.

The loop holding the one-instance lock records itself and every command it starts (``dvc repro``,
``dvc add``, ...) in ``.dvc/tmp/loop/processes.json`` (``PROCESSES_FILE``): its pid and creation
time, a command dropped once it has ended. A loop killed alone (``kill -9 PID``) leaves its
``dvc repro`` running, reparented to init, with the stage under it; a lost lock file could let a
second loop run beside it. The next start, holding the lock, takes as strays every recorded
process still alive with the same creation time (a pid reused since is someone else's) and all its
descendants (``psutil``'s process tree), and kills them. Nothing is found by its command line or
its folder: a process that merely looks like a stage of this repository is not the loop's, and is
left alone.

What the record cannot name: a process whose parent died before it (a stage's pool worker after
the stage itself died, say) is reparented to init and leaves the tree of every recorded process.
Such a process dies by itself once its parent's pipes are closed; it holds no DVC lock.
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
from pathlib import Path

import psutil
from pydantic import BaseModel, ValidationError

from ml.base.io import DataFileError, atomic_write_json, read_json
from ml.driver.state import PROCESSES_FILE

logger = logging.getLogger(__name__)

CREATE_TIME_SLACK_S = 1.0
"""How far a live process's creation time may be from the recorded one and still be that process
(the wall clock ``psutil`` reports it in moves with NTP; a reused pid is a process created later)."""
KILL_WAIT_S = 10.0
"""Seconds to wait for the killed strays to be gone."""


class RecordedProcess(BaseModel):
    """A process of the loop: its pid, its creation time (``psutil.Process.create_time``) and what it is."""

    pid: int
    create_time: float
    what: str


class ProcessesFile(BaseModel):
    """``PROCESSES_FILE``: the loop first, then the commands it runs now."""

    processes: list[RecordedProcess]


class ProcessRecord:
    """The record of the loop's processes in the repository ``root``.

    Nothing is written until ``claim`` (a loop holding the lock); ``add`` and ``drop`` change the
    record only after it, so a command that takes no lock (``loop.py eval``, the dashboard) never
    overwrites a running loop's record.
    """

    def __init__(self, root: Path) -> None:
        self.path = root / PROCESSES_FILE
        self.entries: list[RecordedProcess] | None = None
        """This process's record once claimed, else None."""

    def recorded(self) -> list[RecordedProcess]:
        """The processes the file names; none when it is missing or unreadable (said in the log)."""
        try:
            return ProcessesFile.model_validate(read_json(self.path)).processes
        except FileNotFoundError:
            return []
        except (OSError, DataFileError, ValidationError) as e:
            logger.warning("ignoring an unreadable %s: %s", self.path, e)
            return []

    def kill_strays(self) -> list[RecordedProcess]:
        """``SIGKILL`` every live recorded process (same pid and creation time) and its descendants,
        and wait, up to ``KILL_WAIT_S``, until they are gone. This process and its ancestors are spared.

        Returns:
            The processes killed, by pid, as ``RecordedProcess`` (a recorded one keeps its ``what``,
            a descendant says ``started by <parent pid>``).
        """
        entries = self.recorded()
        known = {entry.pid: entry.what for entry in entries}
        roots = [p for entry in entries if (p := _alive(entry)) is not None]
        killed = [
            RecordedProcess(pid=proc.pid, create_time=born, what=known.get(proc.pid) or f"started by {parent}")
            for proc, parent, born in kill_trees(roots)
        ]
        return sorted(killed, key=lambda entry: entry.pid)

    def claim(self, what: str = "loop.py") -> None:
        """Record this process as the loop (the record of an earlier one is replaced).

        Raises:
            ml.base.io.WriteError: the file cannot be written.
        """
        me = psutil.Process()
        self.entries = [RecordedProcess(pid=me.pid, create_time=me.create_time(), what=what)]
        self._write()

    def release(self) -> None:
        """Forget this process as the loop (it ends: its lock is released next, and a loop started
        then must not take it for a stray); a command still running stays recorded. The file goes
        when nothing is left in it. Never raises: a file that cannot be written is said in the log.
        """
        if self.entries is None:
            return
        self.entries = [entry for entry in self.entries if entry.pid != os.getpid()]
        try:
            if self.entries:
                self._write()
            else:
                self.path.unlink(missing_ok=True)
        except OSError as e:  # WriteError included
            logger.warning("could not update %s: %s", self.path, e)
        self.entries = None

    def add(self, pid: int, what: str) -> None:
        """Record a command this loop has just started (once claimed).

        Raises:
            ml.base.io.WriteError: the file cannot be written.
        """
        if self.entries is None:
            return
        try:
            create_time = psutil.Process(pid).create_time()
        except psutil.Error:  # gone already (reaped): nothing to find later
            return
        self.entries.append(RecordedProcess(pid=pid, create_time=create_time, what=what))
        self._write()

    def drop(self, pid: int) -> None:
        """Forget a command that has ended (once claimed).

        Raises:
            ml.base.io.WriteError: the file cannot be written.
        """
        if self.entries is None or not any(entry.pid == pid for entry in self.entries):
            return
        self.entries = [entry for entry in self.entries if entry.pid != pid]
        self._write()

    def _write(self) -> None:
        assert self.entries is not None, "written once claimed"
        atomic_write_json(self.path, ProcessesFile(processes=self.entries).model_dump(mode="json"))


def _alive(entry: RecordedProcess) -> psutil.Process | None:
    """The live process ``entry`` names: same pid, a creation time within ``CREATE_TIME_SLACK_S``,
    not a zombie (dead, waiting for its parent); else None."""
    try:
        proc = psutil.Process(entry.pid)
        if abs(proc.create_time() - entry.create_time) > CREATE_TIME_SLACK_S:
            return None  # the pid was reused
        return None if proc.status() == psutil.STATUS_ZOMBIE else proc
    except psutil.Error:
        return None


def started_by(pid: int, when: float) -> bool:
    """Whether a live process ``pid`` (not a zombie) was started by ``when`` (epoch seconds, within
    ``CREATE_TIME_SLACK_S``): a process that wrote a record at ``when`` may be it; one started later
    has reused a dead writer's pid."""
    try:
        proc = psutil.Process(pid)
        return bool(proc.status() != psutil.STATUS_ZOMBIE and proc.create_time() <= when + CREATE_TIME_SLACK_S)
    except psutil.Error:
        return False


def kill_trees(roots: list[psutil.Process]) -> list[tuple[psutil.Process, int | None, float]]:
    """``SIGKILL`` ``roots`` and all their descendants (this process and its ancestors spared), and
    wait, up to ``KILL_WAIT_S``, until they are gone.

    Returns:
        Each process killed, with the pid of the parent it was found under (None for a root) and
        its creation time (seconds since the epoch).
    """
    tree = _frozen_trees(roots)
    killed = []
    for proc, parent in tree:
        with contextlib.suppress(psutil.Error):
            proc.kill()
            killed.append((proc, parent, proc.create_time()))
    _wait_gone([proc for proc, _ in tree], KILL_WAIT_S)
    return killed


def _frozen_trees(roots: list[psutil.Process]) -> list[tuple[psutil.Process, int | None]]:
    """``roots`` and all their descendants, each with the pid of the parent it was found under
    (None for a root), each frozen (``SIGSTOP``) before its children are listed, so that none
    starts a process unseen; this process and its ancestors are left out."""
    me = psutil.Process()
    spared = {me.pid, *(p.pid for p in me.parents())}
    found: dict[int, tuple[psutil.Process, int | None]] = {}
    todo: list[tuple[psutil.Process, int | None]] = [(root, None) for root in roots]
    while todo:
        proc, parent = todo.pop()
        if proc.pid in spared or proc.pid in found:
            continue
        try:
            proc.suspend()
            found[proc.pid] = (proc, parent)
            todo += [(child, proc.pid) for child in proc.children()]
        except psutil.Error:  # gone meanwhile
            continue
    return list(found.values())


def _wait_gone(procs: list[psutil.Process], timeout: float) -> None:
    """Wait until every process of ``procs`` is gone or a zombie (its parent, init or a
    subreaper, reaps it), at most ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    left = procs
    while left and time.monotonic() < deadline:
        time.sleep(0.02)
        left = [p for p in left if _running(p)]
    if left:
        logger.warning("still running %.0f s after SIGKILL: %s", timeout, [p.pid for p in left])


def _running(proc: psutil.Process) -> bool:
    """Whether ``proc`` still runs (neither gone nor a zombie)."""
    try:
        return bool(proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE)
    except psutil.Error:
        return False
