"""Strays are found by the pid tree of what the loop recorded, not by command lines (issue 42, item 12).

Checks: a loop killed alone leaves the command it was running (and what that started) alive,
reparented to init; the next start kills exactly those, named, while processes whose command
lines look like a stage or a ``dvc repro`` of this repository, started by no loop, are left
alone (the command-line matching this replaced killed them, and missed the real ones); a
recorded loop still alive (its lock lost) is a stray with its tree; a recorded pid reused by
another process, and the starting loop itself, are spared; a command that ended leaves the
record, and a loop that ends removes it; a loop interrupted alone (``SIGINT`` to its pid) ends
the tree of the command it runs before it exits.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from ml.base.io import atomic_write_json
from ml.driver.state import PROCESSES_FILE
from ml.driver.workspace import Workspace
from tests.conftest import ROOT, git, wait_for

pytestmark = pytest.mark.expensive  # processes started and killed

COMMAND = """\
import os, subprocess, sys, time
grandchild = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
with open("tree.tmp", "w") as f:
    f.write(f"{os.getpid()} {grandchild.pid}")
os.replace("tree.tmp", "tree.txt")
time.sleep(120)
"""
"""What the fake loop runs (a ``dvc repro`` and its stage, in small): it starts a grandchild,
writes both pids to ``tree.txt`` and sleeps."""
FAKE_LOOP = """\
import signal, sys
from pathlib import Path
signal.signal(signal.SIGINT, signal.default_int_handler)  # a job started with `&` by a script inherits SIGINT ignored
from ml.driver.workspace import Workspace
ws = Workspace(Path(sys.argv[1]), echo=print)
ws.kill_strays()
if sys.argv[3:] == ["stream"]:
    ws.run_timed([sys.executable, "-c", sys.argv[2]])
else:
    ws.run([sys.executable, "-c", sys.argv[2]])
"""
"""A loop in small: it claims the record, as ``loop.py`` does at start, and runs ``COMMAND``."""


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    root = tmp_path / "repo"
    (root / "stages").mkdir(parents=True)
    (root / "stages" / "sleepy.py").write_text("import time\ntime.sleep(120)\n")
    git(root, "init", "-q")
    return root


@pytest.fixture
def started(repo: Path):
    """Start processes in ``repo`` (the test's own); each is killed and reaped at the end, and so is
    a fake loop's command tree (``tree.txt``) that a failed test left running."""
    procs: list[subprocess.Popen] = []
    since = time.time() - 1

    def start(*args: str, cwd: Path = repo) -> subprocess.Popen:
        procs.append(subprocess.Popen([sys.executable, *args], cwd=cwd, stdout=subprocess.DEVNULL))
        return procs[-1]

    yield start
    for proc in procs:
        proc.kill()
        proc.wait()
    tree = repo / "tree.txt"
    for pid in map(int, tree.read_text().split() if tree.exists() else []):
        with contextlib.suppress(psutil.Error):
            if (left := psutil.Process(pid)).create_time() >= since:  # not a pid reused by another
                left.kill()


def _fake_loop(repo: Path, start, *how: str) -> tuple[subprocess.Popen, int, int]:
    """A loop running ``COMMAND`` in ``repo`` (``how``: ``stream``, by ``Workspace.run_timed``):
    (the loop, its command's pid, the grandchild's pid)."""
    loop = start("-c", FAKE_LOOP, str(repo), COMMAND, *how, cwd=ROOT)
    tree = wait_for(lambda: (repo / "tree.txt").exists() and (repo / "tree.txt").read_text(), what="the fake loop's tree")
    child, grandchild = map(int, str(tree).split())
    return loop, child, grandchild


def _gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def test_the_tree_of_a_loop_killed_alone_is_killed_and_lookalikes_are_not(repo: Path, started):
    stage_like = started("-m", "stages.sleepy")  # `python -m stages.sleepy` in this repo, started by no loop
    repro_like = started("-c", "import time; time.sleep(120)", "dvc", "repro")
    loop, child, grandchild = _fake_loop(repo, started)
    os.kill(loop.pid, signal.SIGKILL)  # the loop alone, as `kill -9 PID`: its command lives on
    loop.wait()
    assert psutil.Process(child).ppid() != loop.pid and not _gone(child) and not _gone(grandchild)

    said: list[str] = []
    ws = Workspace(repo, echo=said.append)
    assert ws.kill_strays() == sorted([child, grandchild])
    assert _gone(child) and _gone(grandchild)
    assert stage_like.poll() is None and repro_like.poll() is None  # look like the loop's; are not
    assert len(said) == 1 and said[0].startswith("killed 2 process(es) left by an earlier loop: "), said
    assert f"{child} {sys.executable} -c import os" in said[0] and f"{grandchild} started by {child}" in said[0]
    # the record now names this process alone, as the loop; its end removes it
    assert [p.pid for p in ws.processes.recorded()] == [os.getpid()]
    ws.processes.release()
    assert not (repo / PROCESSES_FILE).exists()


@pytest.mark.parametrize("how", [(), ("stream",)])
def test_a_loop_interrupted_alone_ends_its_command_tree(repo: Path, started, how: tuple[str, ...]):
    """``kill -INT PID`` reaches the loop alone (a terminal's Ctrl-C reaches its whole group): the
    command it runs and what that started end with it, not at the next start."""
    loop, child, grandchild = _fake_loop(repo, started, *how)
    os.kill(loop.pid, signal.SIGINT)
    assert loop.wait(timeout=30) != 0
    assert _gone(child) and _gone(grandchild)
    assert Workspace(repo, echo=lambda _: None).kill_strays() == []


def test_a_live_recorded_loop_is_a_stray_with_its_tree(repo: Path, started):
    """The lock file removed under a running loop: the next start kills that loop and what it runs."""
    loop, child, grandchild = _fake_loop(repo, started)
    ws = Workspace(repo, echo=lambda _: None)
    assert ws.kill_strays() == sorted([loop.pid, child, grandchild])
    assert loop.wait(timeout=10) == -signal.SIGKILL and _gone(child) and _gone(grandchild)


def test_a_reused_pid_and_the_loop_itself_are_spared(repo: Path, started):
    bystander = started("-c", "import time; time.sleep(120)")
    born = psutil.Process(bystander.pid).create_time()
    reused = {"pid": bystander.pid, "create_time": born - 3600, "what": "dvc repro"}  # its pid, an hour older
    atomic_write_json(repo / PROCESSES_FILE, {"processes": [reused]})
    ws = Workspace(repo, echo=lambda _: None)
    assert ws.kill_strays() == [] and bystander.poll() is None
    assert ws.kill_strays() == []  # the record names this process now: never its own stray
    ws.run([sys.executable, "-c", "pass"])  # a command that ended is dropped from the record
    assert [p.pid for p in ws.processes.recorded()] == [os.getpid()]
