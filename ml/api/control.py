"""Start, pause, resume and stop ``loop.py`` from the API, and find a loop that already runs.

The loop runs as its own process in a new session (``start_new_session=True``), its output
appended to ``.dvc/tmp/loop/loop.log``, so it outlives the server. A restarted server finds
it again through ``.dvc/tmp/loop/status.json`` (the ``pid`` the loop writes) or the launch
record ``api-launch.json``, checked with psutil (alive, not a zombie, ``loop.py`` in its
command line), and through the loop's own one-instance lock ``.dvc/tmp/loop.lock``.

Pause, resume and stop write ``{"command": ...}`` to ``.dvc/tmp/loop/control.json``; the loop
reads it between stages (``ml.driver.orchestrator.Loop.wait_while_paused``). A forced stop kills the
loop's process group at once; the loop is kill-safe and the next start resumes the attempt.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psutil
from filelock import FileLock, Timeout
from git import GitCommandError

from ml.api.overrides import write_overrides
from ml.api.readers import LAUNCH_FILE, LOG_FILE, RepoView
from ml.base.io import JSONObject, atomic_write_json
from ml.config.curriculum import Overrides
from ml.config.yaml_file import ParamsError
from ml.driver.state import CONTROL_FILE, LOCK_FILE, RUNTIME_DIR, STATUS_FILE
from ml.driver.workspace import DVC_ENV

logger = logging.getLogger(__name__)

START_LOCK_FILE = RUNTIME_DIR / "api-start.lock"
"""Held while a start request is handled, so two simultaneous starts launch one loop."""
KILL_WAIT_S = 10.0
"""How long a forced stop waits for the killed loop to disappear."""
SECRET_ENV = ("DISTILL_API_TOKEN",)
"""Variables of the server's environment that the loop does not inherit."""
GIT_IDENTITY = {
    "GIT_AUTHOR_NAME": "distill-dashboard",
    "GIT_AUTHOR_EMAIL": "distill-dashboard@localhost",
    "GIT_COMMITTER_NAME": "distill-dashboard",
    "GIT_COMMITTER_EMAIL": "distill-dashboard@localhost",
}
"""Used for the params commit only when the repository has no ``user.email`` (as ``Loop`` does)."""

Launcher = Callable[[list[str], Path, Path, dict[str, str]], "subprocess.Popen[bytes]"]


class ControlError(RuntimeError):
    """A control request cannot be carried out now; the message says why."""


class LoopBusyError(ControlError):
    """A loop already runs, or another start request is being handled."""


class LoopNotRunningError(ControlError):
    """Pause, resume or stop was asked while no loop runs."""


class DirtyParamsError(ControlError):
    """``params.yaml`` has uncommitted edits the loop did not make; overrides would sweep them in."""


def launch_loop(argv: list[str], cwd: Path, log_path: Path, env: dict[str, str]) -> subprocess.Popen[bytes]:
    """Start ``argv`` detached: new session, stdin closed, stdout and stderr appended to ``log_path``.

    Tests replace this function to launch a stand-in instead of the real loop.
    """
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "ab") as log:
        log.write(f"\n==== {time.strftime('%Y-%m-%d %H:%M:%S')} started by the API: {' '.join(argv)}\n".encode())
        log.flush()
        return subprocess.Popen(
            argv, cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )


def is_loop_process(pid: int) -> bool:
    """Whether ``pid`` is a live (not zombie) process with ``loop.py`` in its command line."""
    try:
        proc = psutil.Process(pid)
        if proc.status() == psutil.STATUS_ZOMBIE:
            return False
        return any(os.path.basename(arg) == "loop.py" for arg in proc.cmdline())
    except (psutil.Error, ValueError):
        return False


class LoopController:
    """Controls the loop of one repository."""

    def __init__(self, view: RepoView, launcher: Launcher | None = None, python: str = sys.executable) -> None:
        """Args:
        view: the repository's reader.
        launcher: replaces :func:`launch_loop` (tests); None uses it.
        python: interpreter that runs ``loop.py`` (the server's own by default).
        """
        self.view = view
        self.python = python
        self._launcher = launcher
        self._children: list[subprocess.Popen[bytes]] = []

    # ------------------------------------------------------------------ finding the loop
    def find_loop(self) -> int | None:
        """Pid of the running loop from status.json or the launch record, or None."""
        self._children = [p for p in self._children if p.poll() is None]  # reap exited children
        for rel in (STATUS_FILE, LAUNCH_FILE):
            pid = self.view.runtime(rel).get("pid")
            if isinstance(pid, int) and is_loop_process(pid):
                return pid
        return None

    def lock_held(self) -> bool:
        """Whether some process holds the loop's one-instance lock (a loop runs, maybe started by hand)."""
        path = self.view.path(LOCK_FILE)
        if not path.exists():
            return False
        lock = FileLock(str(path))
        try:
            lock.acquire(timeout=0)
        except Timeout:
            return True
        lock.release()
        return False

    def running(self) -> tuple[bool, int | None]:
        """(whether a loop runs, its pid if known)."""
        pid = self.find_loop()
        if pid is not None:
            return True, pid
        return self.lock_held(), None

    # ------------------------------------------------------------------ start
    def start(self, max_generations: int | None = None, overrides: Overrides | None = None) -> JSONObject:
        """Commit params overrides (if any), clear a stale pause/stop, and launch ``loop.py``.

        Args:
            max_generations: passed as ``--max-generations``; None keeps ``loop.max_generations``.
            overrides: validated ``{section: {key: value}}`` (``ml.api.overrides.validate_overrides``).

        Returns:
            ``pid``, ``argv``, ``params_changed`` (``section.key=value`` list) and ``params_commit`` (SHA or None).

        Raises:
            LoopBusyError: a loop already runs, or another start is being handled.
            DirtyParamsError: overrides were given while ``params.yaml`` has foreign uncommitted edits.
            ControlError: no ``loop.py`` in the repository, overrides were given and ``params.yaml``
                itself does not read (bad bytes, bad YAML: one line naming its line and column),
                or the params commit failed.
            ml.api.overrides.OverrideError: the merged params do not validate.
        """
        lock_path = self.view.path(START_LOCK_FILE)
        lock_path.parent.mkdir(parents=True, exist_ok=True)
        lock = FileLock(str(lock_path))
        try:
            lock.acquire(timeout=0)
        except Timeout as e:
            raise LoopBusyError("another start request is being handled") from e
        try:
            running, pid = self.running()
            if running:
                raise LoopBusyError(f"the loop is already running (pid {pid})" if pid else "the loop is already running")
            if not self.view.path(Path("loop.py")).is_file():
                raise ControlError(f"no loop.py in {self.view.root}")
            changed, sha = self._commit_overrides(overrides or {})
            self.view.path(CONTROL_FILE).unlink(missing_ok=True)
            argv = [self.python, "loop.py", *(["--max-generations", str(max_generations)] if max_generations else [])]
            env = {k: v for k, v in os.environ.items() if k not in SECRET_ENV} | DVC_ENV
            started_at = time.time()  # before the launch: status.json written after this is the new loop's
            proc = (self._launcher or launch_loop)(argv, self.view.root, self.view.path(LOG_FILE), env)
            self._children.append(proc)
            atomic_write_json(self.view.path(LAUNCH_FILE), {"pid": proc.pid, "argv": argv, "started_at": started_at})
            logger.info("started loop pid %d: %s", proc.pid, " ".join(argv))
            return {"pid": proc.pid, "argv": argv, "params_changed": changed, "params_commit": sha}
        finally:
            lock.release()

    def _commit_overrides(self, overrides: dict[str, dict[str, Any]]) -> tuple[list[str], str | None]:
        """Write the overrides into params.yaml and commit that file alone; ([], None) when nothing changed."""
        if not overrides:
            return [], None
        dirty = self.view.git("status", "--porcelain", "--", "params.yaml").strip()
        if dirty and self.view.state().in_flight is None:
            raise DirtyParamsError("params.yaml has uncommitted changes the loop did not make; commit or revert them first")
        params = self.view.path(Path("params.yaml"))
        try:
            changed = write_overrides(params, overrides)
        except ParamsError as e:  # the file as it is, not the overrides: nothing was written
            raise ControlError(str(e)) from e
        if not changed:
            return [], None
        message = (
            "params: overrides from the dashboard (" + ", ".join(changed) + ")\n\n" + "\n".join(f"- {c}" for c in changed)
        )
        env = None if self._has_identity() else GIT_IDENTITY
        try:
            self.view.git("commit", "--quiet", "--no-verify", "-m", message, "--only", "--", "params.yaml", env=env)
        except GitCommandError as e:
            raise ControlError(f"committing params.yaml failed: {e.stderr or e}") from e
        sha, _ = self.view.head()
        return changed, sha

    def _has_identity(self) -> bool:
        try:
            return bool(self.view.git("config", "user.email").strip())
        except GitCommandError:
            return False

    # ------------------------------------------------------------------ pause, resume, stop
    def request(self, command: str) -> JSONObject:
        """Write ``{"command": command}`` to control.json (``pause``, ``resume`` or ``stop``).

        Raises:
            LoopNotRunningError: no loop runs.
        """
        assert command in ("pause", "resume", "stop"), f"unknown control command {command!r}"
        running, pid = self.running()
        if not running:
            raise LoopNotRunningError(f"no loop is running; nothing to {command}")
        atomic_write_json(self.view.path(CONTROL_FILE), {"command": command, "requested_at": time.time()})
        return {"requested": command, "pid": pid}

    def kill(self) -> JSONObject:
        """Kill the loop's process group now (SIGKILL); the next start resumes the attempt in flight.

        When the loop does not lead its own process group (started by hand inside another
        group), only the loop and its descendants are killed.

        Raises:
            LoopNotRunningError: no loop runs.
            ControlError: a loop holds the lock but its pid is unknown.
        """
        running, pid = self.running()
        if not running:
            raise LoopNotRunningError("no loop is running; nothing to stop")
        if pid is None:
            raise ControlError("a loop holds .dvc/tmp/loop.lock but wrote no pid yet; try again in a few seconds")
        try:
            victims = [psutil.Process(pid), *psutil.Process(pid).children(recursive=True)]
            if os.getpgid(pid) == pid and os.getpgid(pid) != os.getpgid(0):
                os.killpg(pid, signal.SIGKILL)
            for proc in victims:
                with contextlib.suppress(psutil.Error):
                    proc.kill()
        except (psutil.NoSuchProcess, ProcessLookupError):
            victims = []
        psutil.wait_procs(victims, timeout=KILL_WAIT_S)
        self._children = [p for p in self._children if p.poll() is None]
        self.view.path(CONTROL_FILE).unlink(missing_ok=True)
        status = self.view.runtime(STATUS_FILE)
        status.update(pid=pid, status="stopped", message="killed from the API (forced stop)", updated_at=time.time())
        atomic_write_json(self.view.path(STATUS_FILE), status)
        logger.info("killed loop pid %d", pid)
        return {"requested": "kill", "pid": pid}
