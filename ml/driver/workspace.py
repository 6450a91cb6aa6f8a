"""The repository a loop runs in: git and DVC commands, the work tree, the one-instance lock.

``Workspace`` is the plumbing under ``ml.driver.orchestrator.Loop`` (which adds the attempt steps):
it runs commands in the repo with DVC analytics off and this interpreter first on ``PATH``,
streams ``dvc repro`` output and times its stages, retries git briefly around another
process's ``index.lock``, records the pid of every command it starts and kills those a killed
loop left running (``ml.driver.processes``: by pid tree, not command line), and pushes to
configured remotes. What is committed, and once, is ``ml.driver.journal``'s.
"""

from __future__ import annotations

import codecs
import contextlib
import json
import logging
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import AnyStr

import psutil
from filelock import FileLock, Timeout
from git import InvalidGitRepositoryError, NoSuchPathError, Repo
from tenacity import (
    RetryCallState,
    Retrying,
    retry_if_exception,
    stop_after_attempt,
    wait_chain,
    wait_fixed,
    wait_incrementing,
)

from ml.base.faults import during, kill_group, seam
from ml.base.progress import PROGRESS_FILE_ENV
from ml.driver.dvc_output import DvcOutputFilter, stage_times
from ml.driver.processes import ProcessRecord, kill_trees, started_by
from ml.driver.state import LOCK_FILE, PROGRESS_FILE, RUNTIME_DIR

logger = logging.getLogger(__name__)

OWNED_PATHS = ("params.yaml", "dvc.lock", "metrics/", "plots/", "state/", "data/")
"""Paths the loop writes; any other change in the work tree makes it refuse to start."""
DVC_ENV = {"DVC_NO_ANALYTICS": "1"}
"""Environment of every DVC call (update checks are off in .dvc/config: core.check_update)."""
DVC = (sys.executable, "-m", "dvc")
"""DVC of this interpreter's environment (works without an activated venv)."""
GIT_LOCK_WAITS_S = (0.2, 0.5, 1.0, 2.0)
"""Seconds between the tries of a git command while another process holds ``index.lock``."""

DEFAULT_IDENTITY = ("distill-loop", "distill-loop@localhost")
"""Who commits when git has no ``user.name``/``user.email`` (said at start)."""


class LoopError(RuntimeError):
    """The loop cannot go on; the message says why and what to do.

    Attributes:
        detail: output the user has already seen (a failed stage's last lines, streamed as it
            ran): kept for the dashboard's status, not printed again.
    """

    def __init__(self, message: str, detail: str = "") -> None:
        super().__init__(message)
        self.detail = detail


class Workspace:
    """Git and DVC in the repository ``root``.

    Raises:
        LoopError: ``root`` is not a git repository.
    """

    def __init__(self, root: Path, echo: Callable[[str], None] = print) -> None:
        self.root = root.resolve()
        self.echo = echo
        self.dvc = DVC
        try:
            self.repo = Repo(self.root)
        except (InvalidGitRepositoryError, NoSuchPathError) as e:
            raise LoopError(f"{self.root} is not a git repository (clone the project and run loop.py in it)") from e
        bindir = str(Path(sys.executable).parent)
        # Stage commands say `python`: put this interpreter's folder first so they run in
        # the same environment as loop.py, activated or not.
        self.env = {**os.environ, **DVC_ENV, "PATH": bindir + os.pathsep + os.environ.get("PATH", "")}
        self.default_identity = not self._git_identity()
        if self.default_identity:
            name, email = DEFAULT_IDENTITY
            self.env.update(GIT_AUTHOR_NAME=name, GIT_AUTHOR_EMAIL=email, GIT_COMMITTER_NAME=name, GIT_COMMITTER_EMAIL=email)
        self.repo.git.update_environment(**{k: v for k, v in self.env.items() if k.startswith(("GIT_", "DVC_", "PATH"))})
        self.dvc_empty_named: set[str] = set()
        """Empty DVC paths already named in this loop's output (each is said once, not per stage)."""
        self.seam_prefix = "setup"
        """Prefix of this process's seam names (``g001`` while generation 1 is in flight), ``ml.base.faults``."""
        self.processes = ProcessRecord(self.root)
        """The pids of this loop and of the commands it runs, once ``kill_strays`` has claimed the record."""

    def path(self, rel: Path | str) -> Path:
        """``rel`` (relative to the repository root) as an absolute path."""
        return self.root / rel

    def seam(self, name: str) -> None:
        """A named point of the driver where a fault-injection test may kill it (``ml.base.faults``)."""
        seam(f"{self.seam_prefix}.{name}")

    def run(self, cmd: list[str], stream: bool = False, label: str | None = None) -> str:
        """Run a command in the repo; stream its output when asked.

        Args:
            cmd: the command and its arguments.
            stream: pass its output through as it comes (``dvc repro``).
            label: names the seam inside this command (``<prefix>.<label>@during``, ``ml.base.faults``).

        Returns:
            Its standard output.

        Raises:
            LoopError: it failed; the message holds the command's own output (DVC's and
                git's errors are shown as they said them).
        """
        logger.debug("run %s", cmd)
        if label and (delay := during(f"{self.seam_prefix}.{label}")) is not None:
            killed = subprocess.Popen(cmd, cwd=self.root, env=self.env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            with self._recorded(killed, cmd):
                time.sleep(delay)
                kill_group()
        if stream:
            return self.run_timed(cmd)[0]
        # subprocess.run's way, with the pid recorded while the command runs
        pipe = subprocess.PIPE
        with (
            subprocess.Popen(cmd, cwd=self.root, env=self.env, stdout=pipe, stderr=pipe, text=True) as proc,
            self._recorded(proc, cmd),
        ):
            out, err = proc.communicate()
        if proc.returncode:
            said = (out[-3000:] + err[-3000:]).strip() or "(no output)"
            raise LoopError(f"{_shown(cmd)} failed ({proc.returncode}):\n{said}")
        return out

    @contextlib.contextmanager
    def _recorded(self, proc: subprocess.Popen[AnyStr], cmd: list[str]) -> Iterator[None]:
        """``proc`` (just started) is in the record of the loop's processes until it has ended
        (``ml.driver.processes``); one still running when the block is left stays there. An exception
        in the block (``KeyboardInterrupt`` from a ``SIGINT`` sent to the loop alone included) kills
        ``proc`` and everything it started first: the command does not outlive the call."""
        self.processes.add(proc.pid, _shown(cmd))
        try:
            yield
        except BaseException:
            if proc.poll() is None:
                with contextlib.suppress(psutil.Error):
                    kill_trees([psutil.Process(proc.pid)])
                proc.wait()
            raise
        finally:
            if proc.poll() is not None:
                self.processes.drop(proc.pid)

    def run_timed(self, cmd: list[str]) -> tuple[str, dict[str, float]]:
        """Run ``cmd`` passing its output through as it comes (progress bars included), less
        DVC's hints and repeated "is empty" warnings (``ml.driver.dvc_output.DvcOutputFilter``).

        Returns:
            Its whole output, unfiltered, and the wall seconds of each DVC stage it ran
            (``Running stage 'x':`` marks a start; empty when it ran none).

        Raises:
            LoopError: it failed; its ``detail`` holds the last 40 lines shown (printed once, as they came).
        """
        env = {
            **self.env,
            "DISTILL_PROGRESS": "1" if sys.stdout.isatty() else "0",
            PROGRESS_FILE_ENV: str(self.path(PROGRESS_FILE)),
        }
        proc = subprocess.Popen(cmd, cwd=self.root, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        assert proc.stdout is not None, "Popen with stdout=PIPE has a stdout"
        # the empty paths named so far are this loop's, so each is named once, not once per stage
        shown = DvcOutputFilter(named=self.dvc_empty_named)
        decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        lines: list[tuple[float, str]] = []
        pending = ""
        with self._recorded(proc, cmd):
            while True:
                chunk = os.read(proc.stdout.fileno(), 65536)
                text = decoder.decode(chunk, final=not chunk)
                sys.stdout.buffer.write((shown.feed(text) + ("" if chunk else shown.close())).encode("utf-8"))
                sys.stdout.flush()
                pending += text
                *done, pending = pending.split("\n")
                lines += [(time.perf_counter(), line) for line in done]
                if not chunk:
                    break
            lines.append((time.perf_counter(), pending))
            proc.wait()
        if proc.returncode:
            raise LoopError(
                f"{_shown(cmd)} failed ({proc.returncode}; its output is above); "
                "the attempt stays in flight, run loop.py again to resume.",
                detail="\n".join(shown.shown),
            )
        return "\n".join(line for _, line in lines), stage_times(lines)

    def git(self, *args: str) -> str:
        """A git command, retried briefly (5 tries over 3.7 s) while another process holds ``index.lock``.

        Raises:
            git.GitCommandError: it failed otherwise, or the lock stayed.
        """
        for attempt in Retrying(retry=retry_if_exception(lambda e: "index.lock" in str(e)), stop=stop_after_attempt(5),
                                wait=wait_chain(*map(wait_fixed, GIT_LOCK_WAITS_S)), reraise=True):  # fmt: skip
            with attempt:
                return self.repo.git.execute(["git", *args])
        raise AssertionError("unreachable: the last try re-raises")

    def changes(self) -> list[tuple[str, str]]:
        """``(status, path)`` of every change in the work tree (``git status --porcelain``;
        status ``??`` is an untracked file)."""
        out = self.repo.git.execute(["git", "status", "--porcelain", "--untracked-files=all"], strip_newline_in_stdout=False)
        return [(line[:2], line[3:].strip('"')) for line in out.splitlines() if line.strip()]

    def head_bytes(self, rel: str) -> bytes | None:
        """The bytes of ``rel`` at HEAD exactly (trailing newline kept), or None without it."""
        try:
            data: bytes = self.repo.head.commit.tree[rel].data_stream.read()  # GitPython types it Any
            return data
        except (KeyError, ValueError):  # no such path at HEAD, or no commit yet
            return None

    def head_attempt_ids(self, limit: int = 200) -> set[str]:
        """Attempt ids named by ``Attempt-Id:`` trailers in the last ``limit`` commits."""
        try:
            out = self.git("log", f"-{limit}", "--format=%(trailers:key=Attempt-Id,valueonly)")
        except Exception:
            return set()  # no commits yet
        return {line.strip() for line in out.splitlines() if line.strip()}

    def kill_strays(self) -> list[int]:
        """Kill what an earlier loop left running here, then record this process as the loop.

        Called with the one-instance lock held, so no live loop owns them: the processes the
        earlier loop recorded (itself, if its lock was lost; the ``dvc repro`` or ``dvc add`` it
        was running) that are still alive, and their descendants (``ml.driver.processes``). A
        loop killed alone leaves its ``dvc repro`` and stage running, holding DVC's locks and
        writing the outputs the resumed stage writes. Says what it killed.

        Returns:
            The pids killed.

        Raises:
            ml.base.io.WriteError: the record cannot be written.
        """
        killed = self.processes.kill_strays()
        self.processes.claim()
        if killed:
            named = "; ".join(f"{p.pid} {p.what}" for p in killed)
            self.echo(f"killed {len(killed)} process(es) left by an earlier loop: {named}")
        return [p.pid for p in killed]

    def clear_stale_dvc_locks(self) -> None:
        """Remove DVC's ``.dvc/tmp/rwlock`` when no process it names still runs (called after
        ``kill_strays``, so the loop's own DVC commands are gone).

        The file names each DVC command holding an output by pid (``dvc.rwlock``). It is stale when
        DVC cannot read it (a DVC killed while writing it) or when every pid in it is dead or
        belongs to a process started after the file was last written (a reused pid). DVC's
        ``.dvc/tmp/lock`` needs nothing: the OS releases it when its holder dies.
        """
        path = self.path(".dvc/tmp/rwlock")
        try:
            written = path.stat().st_mtime
            infos = json.loads(path.read_text())
            pids = [int(info["pid"]) for mode in ("read", "write") for held in infos.get(mode, {}).values()
                    for info in (held if isinstance(held, list) else [held])]  # fmt: skip
        except FileNotFoundError:
            return
        except (OSError, ValueError, TypeError, KeyError, AttributeError):
            pids = []  # unreadable: DVC would refuse every command
        if any(started_by(pid, written) for pid in pids):
            return
        logger.debug("removing stale %s (pids %s)", path, pids)
        path.unlink(missing_ok=True)

    def preflight(self) -> None:
        """Make sure, before any work, that the attempt's commit will go through.

        Clears a stale ``.git/index.lock`` (left by a killed ``git add``) when no git process
        runs in this repo, and says so; says which identity commits when git has none.

        Raises:
            LoopError: HEAD is detached (the commits would be on no branch), or a live git
                process holds ``index.lock``.
        """
        if self.repo.head.is_detached:
            raise LoopError(
                f"HEAD is detached (at {self.repo.head.commit.hexsha[:10]}): the loop commits every attempt and they would "
                "belong to no branch. Check out a branch first, e.g. `git switch -c run-1` or `git switch main`."
            )
        lock = Path(self.repo.git_dir) / "index.lock"
        if lock.exists():
            holders = self._git_processes()
            if holders:
                raise LoopError(f"{lock} is held by a running git process (pid {', '.join(map(str, holders))}); let it finish")
            lock.unlink()
            self.echo(f"removed a stale {lock} left by an interrupted git command (no git process runs in this repo)")
        if self.default_identity:
            name, email = DEFAULT_IDENTITY
            self.echo(
                f"git has no user.name/user.email here: attempts are committed as {name} <{email}> "
                "(set them with `git config user.name ...` and `git config user.email ...`)"
            )

    def _git_processes(self) -> list[int]:
        """Pids of git processes whose working directory is in this repo."""
        pids = []
        for proc in psutil.process_iter(["pid", "name", "cwd"]):
            try:
                if proc.info["name"] == "git" and str(proc.info["cwd"] or "").startswith(str(self.root)):
                    pids.append(proc.info["pid"])
            except (psutil.Error, TypeError):
                continue
        return pids

    def push(self, tries: int = 3, backoff_s: float = 2.0) -> bool:
        """Push DVC data, then git, to the configured remotes, with retries. Never raises.

        Runs only when both a git remote and a DVC remote are configured (a plain clone has
        ``origin`` but no DVC remote, so it never pushes by surprise). A failure is reported and
        remembered (``.dvc/tmp/loop/push-pending``); the next push then sends every commit's
        data (``dvc push --all-commits``) and every commit, so nothing is lost.

        Returns:
            True when everything configured was pushed.
        """
        git_remotes = self.git("remote").split()
        if not git_remotes or not self.run([*DVC, "remote", "list"]).split():  # DVC asked only when git has one
            return True
        pending = self.path(RUNTIME_DIR / "push-pending")
        branch = self.git("rev-parse", "--abbrev-ref", "HEAD")

        def said(state: RetryCallState) -> None:  # every failed try, the last one included
            e = state.outcome.exception() if state.outcome is not None else None
            last = str(e).strip().splitlines()[-1].strip(" '\"") if str(e).strip() else repr(e)
            self.echo(f"push failed (try {state.attempt_number}/{tries}): {last}")

        def push_once() -> bool:
            self.run([*DVC, "push", "--quiet", *(["--all-commits"] if pending.exists() else [])])
            self.git("push", "--quiet", git_remotes[0], f"HEAD:refs/heads/{branch}")
            return True

        # any failure of a remote is reported, never fatal; the waits are backoff_s, 2 * backoff_s, ...
        pushed = Retrying(stop=stop_after_attempt(tries), wait=wait_incrementing(backoff_s, backoff_s), after=said,
                          retry_error_callback=lambda _: False)(push_once)  # fmt: skip
        if pushed:
            pending.unlink(missing_ok=True)
            return True
        pending.parent.mkdir(parents=True, exist_ok=True)
        pending.write_text(time.strftime("%Y-%m-%dT%H:%M:%S"))
        self.echo("push failed: it will be retried after the next commit (the commits and data are safe locally)")
        return False

    def _git_identity(self) -> bool:
        try:
            return bool(self.repo.git.config("user.email"))
        except Exception:
            return False


def _shown(cmd: list[str]) -> str:
    """A command as a user would type it (``dvc add ...``, not ``/path/python -m dvc add ...``)."""
    if tuple(cmd[: len(DVC)]) == DVC:
        return " ".join(["dvc", *cmd[len(DVC) :]])
    return " ".join(cmd)


def acquire_lock(root: Path) -> FileLock:
    """The one-instance lock (``.dvc/tmp/loop.lock``, released by the OS if the process dies).

    Raises:
        LoopError: when another loop.py holds it.
    """
    path = root / LOCK_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    lock = FileLock(str(path))
    try:
        lock.acquire(timeout=0)
    except Timeout as e:
        raise LoopError(f"another loop.py is already running in {root} (lock {path} is held)") from e
    return lock
