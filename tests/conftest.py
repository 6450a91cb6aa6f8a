"""Shared fixtures: tiny params, a throw-away copy of the project as its own git repo, the six
stages run once in process (``pipeline``), and a guard: a test not marked ``expensive`` that
starts a process (``subprocess``, ``multiprocessing``; git and DVC included) fails."""

from __future__ import annotations

import compileall
import contextlib
import hashlib
import io
import json
import multiprocessing.process
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from filelock import FileLock

from ml.base.io import atomic_write_json
from ml.config.yaml_file import safe_yaml

ROOT = Path(__file__).resolve().parents[1]
PROJECT_PACKAGES = ("ml", "stages")
"""The folders of the project's Python code (``make_project_copy`` copies their caches)."""
os.environ.setdefault("DVC_NO_ANALYTICS", "1")
# one torch (OpenMP) thread in each pytest-xdist worker: the workers already fill every core, and a
# second thread per worker spins against the other worker (a test training a small net in process
# took 22 s instead of 4); the stages set theirs from params.yaml (base.torch_threads) as in a run
os.environ.setdefault("OMP_NUM_THREADS", "1")
# stages run in process write their encoded-batch cache here, not into this checkout's .dvc/tmp;
# a loop run (run_loop) uses its own repository's default
_OWN_CACHE = "DISTILL_ENCODED_CACHE" not in os.environ  # this process made the folder: it removes it
ENCODED_CACHE = os.environ.setdefault("DISTILL_ENCODED_CACHE", tempfile.mkdtemp(prefix="distill-encoded-"))


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if _OWN_CACHE:
        shutil.rmtree(ENCODED_CACHE, ignore_errors=True)


TINY = {
    "teacher": {"games": 24},
    "train": {"epochs": 2, "samples_per_epoch": 2000, "batch_size": 128, "hidden_sizes": [32]},
    "selfplay": {  # the league and a resumed agent from generation 1 on: the kill tests cover their promotion
        "learner_decisions": 600,
        "num_envs": 4,
        "rollout_steps": 300,
        "minibatch_size": 128,
        "update_epochs": 2,
        "start": "agent",
        "opponent_mix": {"teacher": 0.4, "league": 0.3, "self": 0.3},
    },
    "export": {"games": 12, "only_wins": False},
    "gate": {"gated": False, "min_games": 8, "max_games": 40, "student_games": 16, "student_min_games": 8},
    "rating": {"games": 16, "report_games": 8},
    "loop": {"max_generations": 2, "max_retries": 1},
}
REJECTING_GATE = {**TINY["gate"], "gated": True, "target_win_rate": 0.9}
"""The TINY gate, gated, with a strength target no tiny PPO agent reaches: every batch is rejected."""


def yaml_text(data: Any) -> str:
    """``data`` as YAML text (``ml.config.yaml_file.safe_yaml``: the project's one YAML library), keys in their order."""
    out = io.StringIO()
    safe_yaml().dump(data, out)
    return out.getvalue()


def tiny_params(overrides: dict | None = None) -> dict:
    """The repo's params.yaml with the TINY sizes (and ``overrides``) merged in; an override of None
    removes its section (``profiles``: the repo's profiles name its own games)."""
    params = safe_yaml().load((ROOT / "params.yaml").read_text())
    # a clone where the loop ran has its own run section: tests start from generation 0
    params["run"] = {"generation": 0, "attempt": 1, "seed": params["base"]["seed"]}
    for section, values in {**TINY, **(overrides or {})}.items():
        if values is None:
            params.pop(section, None)
            continue
        params.setdefault(section, {}).update(values)
    return params


KUHN_TINY = {
    "game": {"name": "openspiel:kuhn_poker", "pod_size": 2},
    "teacher": {"games": 60, "mcts_simulations": 20},
    "selfplay": {
        "learner_decisions": 300,
        "num_envs": 4,
        "rollout_steps": 150,
        "minibatch_size": 64,
        "update_epochs": 2,
        "workers": 1,
    },
    "gate": {
        "gated": False,
        "target_win_rate": 0.6,
        "min_games": 8,
        "max_games": 40,
        "student_games": 16,
        "student_min_games": 8,
    },
}
PIPELINE_PARAMS = {  # game -> overrides of TINY for the ``pipeline`` fixture; one selfplay worker: no process
    "commander": {"selfplay": {**TINY["selfplay"], "workers": 1}},
    "kuhn_poker": KUHN_TINY,
}


def wait_for(pred: Callable[[], object], timeout: float = 60.0, what: str = "the condition", poll: float = 0.05) -> object:
    """Poll ``pred`` every ``poll`` seconds until it returns a true value (returned) or ``timeout``
    seconds pass (AssertionError naming ``what``). An ``OSError`` from ``pred`` (a server not up yet)
    counts as false. The bound only stops a test that would hang; a loaded CI machine needs room."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            value = pred()
        except OSError:
            value = None
        if value:
            return value
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(poll)


_FS_IOC_GETFLAGS, _FS_IOC_SETFLAGS, _FS_IMMUTABLE_FL = 0x80086601, 0x40086602, 0x10
"""linux/fs.h: the ioctls ``chattr``/``lsattr`` use, and the ``i`` (immutable) flag."""


def _set_immutable(path: Path, on: bool) -> None:
    import fcntl
    import struct

    fd = os.open(path, os.O_RDONLY)
    try:
        (flags,) = struct.unpack("i", fcntl.ioctl(fd, _FS_IOC_GETFLAGS, struct.pack("i", 0)))
        flags = flags | _FS_IMMUTABLE_FL if on else flags & ~_FS_IMMUTABLE_FL
        fcntl.ioctl(fd, _FS_IOC_SETFLAGS, struct.pack("i", flags))
    finally:
        os.close(fd)


@contextlib.contextmanager
def immutable(path: Path) -> Iterator[Path]:
    """``chattr +i path`` for the block (as root, ``chmod`` does not stop writes; this does):
    nothing in it can be created, removed or renamed, nor it itself. Done with the ioctl
    ``chattr`` uses, so no process is started. Skips the test where the file system or the
    user cannot set the flag (not Linux, not root, tmpfs before 6.0, overlayfs)."""
    try:
        _set_immutable(path, True)
    except (OSError, ImportError) as e:
        pytest.skip(f"cannot make {path} immutable here (chattr +i): {e}")
    try:
        yield path
    finally:
        _set_immutable(path, False)


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True, text=True).stdout


_CORE_CACHE_WARM = False
"""This process has made sure numba's cache of the core's kernels holds them (``warm_core_cache``)."""


def warm_core_cache() -> None:
    """Compile the core's kernels into this checkout's numba cache, once per test process
    (``warmup.run_kernels``: on a cold cache the first pytest-xdist worker compiles under its lock,
    the others wait, then load them from the cache in seconds).

    Without it, on a fresh clone every project copy made before some test compiled the kernels
    here starts with no cache, and the first stage of each copy compiles them again (about 70 s).
    """
    global _CORE_CACHE_WARM
    if _CORE_CACHE_WARM:
        return
    from ml.game.commander.core.warmup import run_kernels

    run_kernels()
    # the project's bytecode too, which a machine with PYTHONDONTWRITEBYTECODE set (CI's) never
    # writes: each loop and stage process of a copy would compile the modules it imports again
    for package in PROJECT_PACKAGES:
        compileall.compile_dir(ROOT / package, quiet=1)
    _CORE_CACHE_WARM = True


def pytest_sessionstart(session: pytest.Session) -> None:
    """Fill numba's cache of the core before the first test (``warm_core_cache``): on a fresh clone one
    process compiles, on two cores (``warmup.run_kernels``; a fast test may start no process), and
    the other pytest-xdist processes wait, then load it; later sessions load it in about a second."""
    warm_core_cache()


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Order the run: the ``long`` tests first, then the other ``expensive`` ones (those without
    the reference run before those with it), then the fast ones, each kind in collection order.
    pytest-xdist hands tests out in this order, so the minutes of one test overlap the rest
    instead of being all that runs at the end, and no worker waits idle for the reference run
    while it runs in the background (``pytest_collection_finish``)."""

    def kind(item: pytest.Item) -> int:
        if item.get_closest_marker("long"):
            return 0
        if item.get_closest_marker("expensive"):
            return 2 if "reference_run" in getattr(item, "fixturenames", ()) else 1
        return 3

    items.sort(key=kind)  # stable


def make_project_copy(dest: Path, params: dict) -> Path:
    """Copy the project's files (tracked and untracked, not ignored) and numba's cache of the
    core's kernels (made first: ``warm_core_cache``) into a fresh git repo.

    Works on uncommitted work too, unlike ``git clone``. Returns ``dest``.
    """
    warm_core_cache()
    files = git(ROOT, "ls-files", "--cached", "--others", "--exclude-standard", "-z").split("\0")
    for rel in filter(None, files):
        src = ROOT / rel
        if src.is_file() and not rel.startswith(("data/", "metrics/", "plots/", "state/")):
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / rel)
    # numba's cache of the core's kernels and Python's bytecode (ignored files): their entries are
    # keyed by the source's name, mtime and size, not its folder, so the copy loads what this
    # checkout compiled instead of compiling it again (minutes for the kernels); a missing or stale
    # entry is compiled as usual
    caches = (c for package in PROJECT_PACKAGES for c in (ROOT / package).rglob("__pycache__/*"))
    for cached in (c for c in caches if c.suffix in (".nbi", ".nbc", ".pyc")):
        target = dest / cached.relative_to(ROOT)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(cached, target)
    (dest / "params.yaml").write_text(yaml_text(params))
    git(dest, "init", "-q", "-b", "main")
    git(dest, "config", "user.email", "test@example.com")
    git(dest, "config", "user.name", "test")
    git(dest, "add", "-A")
    git(dest, "commit", "-qm", "project")
    return dest


@pytest.fixture
def project(tmp_path: Path) -> Path:
    return make_project_copy(tmp_path / "repo", tiny_params())


@dataclass
class Pipeline:
    """The six stages, run once in process on tiny params (``run_pipeline``).

    Attributes:
        root: the run's folder: ``params.yaml``, ``student.pt``, ``ppo.pt``, ``cand.pt``.
        dirs: folder name -> path: teacher, pool, frozen, rejected, students, next_student,
            candidate, merged, and ``m`` (each stage's metrics JSON).
        common: ``--params ... --no-progress``.
        gate_args: gate's inputs and ``--out-student`` (no ``--metrics``).
        merge_args: merge's inputs (no ``--gate``, ``--out``, ``--metrics``).
    """

    root: Path
    dirs: dict[str, Path]
    common: list[str]
    gate_args: list[str]
    merge_args: list[str]

    def metrics(self, stage: str) -> dict:
        return json.loads((self.dirs["m"] / f"{stage}.json").read_text())


def run_pipeline(root: Path, overrides: dict) -> Pipeline:
    """teacher -> train -> selfplay -> export -> gate -> merge, each stage's ``main`` in process,
    in ``root`` with ``tiny_params(overrides)``; asserts that each returns 0."""
    from stages import export, gate, merge, selfplay, teacher, train

    (root / "params.yaml").write_text(yaml_text(tiny_params(overrides)))
    names = ("teacher", "pool", "frozen", "rejected", "students", "next_student", "candidate", "merged", "m")
    d = {n: root / n for n in names}
    for n in ("pool", "frozen", "rejected", "students", "next_student"):
        d[n].mkdir()
    c, m = ["--params", str(root / "params.yaml"), "--no-progress"], d["m"]
    student, ppo = str(root / "student.pt"), str(root / "ppo.pt")
    gate_args = ["--model", ppo, "--student", student, "--teacher", str(d["teacher"]), "--pool", str(d["pool"]),
                 "--candidate", str(d["candidate"]), "--out-student", str(root / "cand.pt")]  # fmt: skip
    merge_args = ["--candidate", str(d["candidate"]), "--model", ppo, "--student", student, "--pool", str(d["pool"]),
                  "--rejected", str(d["rejected"]), "--frozen", str(d["frozen"]), "--students", str(d["students"]),
                  "--candidate-student", str(root / "cand.pt"), "--next-student", str(d["next_student"])]  # fmt: skip
    runs = [
        (teacher, ["--out", str(d["teacher"])]),
        (
            train,
            ["--teacher", str(d["teacher"]), "--pool", str(d["pool"]), "--reuse", str(d["next_student"]), "--out", student],
        ),
        (selfplay, ["--student", student, "--frozen", str(d["frozen"]), "--out", ppo]),
        (export, ["--model", ppo, "--out", str(d["candidate"])]),
        (gate, gate_args),
        (merge, ["--gate", str(m / "gate.json"), *merge_args, "--out", str(d["merged"])]),
    ]
    for stage, args in runs:
        name = stage.__name__.rsplit(".", 1)[-1]
        assert stage.main([*c, *args, "--metrics", str(m / f"{name}.json")]) == 0, name
    return Pipeline(root, d, c, gate_args, merge_args)


@pytest.fixture(scope="session")
def pipeline(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Pipeline:
    """The six stages on the Commander pod, once per session; another game of ``PIPELINE_PARAMS``
    with ``@pytest.mark.parametrize("pipeline", ["kuhn_poker"], indirect=True)``."""
    game = getattr(request, "param", "commander")
    return run_pipeline(tmp_path_factory.mktemp(f"pipeline-{game}"), PIPELINE_PARAMS[game])


def run_loop(
    repo: Path, *args: str, timeout: float = 900, env: dict | None = None, inherit: dict | None = None
) -> subprocess.CompletedProcess:
    """``python loop.py ARGS`` in ``repo``, in a session of its own (a fault-injection kill of
    its process group, ``ml.base.faults``, never reaches the test runner), with ``env`` added to
    ``inherit`` (default: this process's environment)."""
    env = {**(os.environ if inherit is None else inherit), "DVC_NO_ANALYTICS": "1", "PYTHONHASHSEED": "0", **(env or {})}
    if env.get("DISTILL_ENCODED_CACHE") == ENCODED_CACHE:
        del env["DISTILL_ENCODED_CACHE"]
    return subprocess.run(
        [sys.executable, "loop.py", *args],
        cwd=repo, env=env, capture_output=True, text=True, timeout=timeout, start_new_session=True,
    )  # fmt: skip


def attempt_commits(repo: Path) -> list[tuple[str, str]]:
    """(sha, subject) of attempt commits, oldest first."""
    out = git(repo, "log", "--reverse", "--format=%H %s", "--grep=Attempt-Id:")
    return [tuple(line.split(" ", 1)) for line in out.splitlines() if " attempt " in line]


def out_hashes(repo: Path, rev: str) -> dict[str, str]:
    """Hashes of the data and models recorded in dvc.lock at ``rev`` (path -> md5).

    Metrics files are left out: they hold wall times.
    """
    lock = safe_yaml().load(git(repo, "show", f"{rev}:dvc.lock"))
    return {o["path"]: o["md5"] for st in lock["stages"].values() for o in st.get("outs", []) if o["path"].startswith("data/")}


def pointer_hashes(repo: Path, rev: str) -> dict[str, str]:
    """md5 of each ``data/*.dvc`` pointer's output at ``rev``."""
    names = [n for n in git(repo, "ls-tree", "--name-only", rev, "data/").split() if n.endswith(".dvc")]
    return {n: safe_yaml().load(git(repo, "show", f"{rev}:{n}"))["outs"][0]["md5"] for n in names}


def run_fingerprint(repo: Path) -> dict:
    """What an interrupted-and-resumed run must share with an uninterrupted one.

    Per attempt commit: its subject (verdict and figures), the ``dvc.lock`` output hashes and
    the ``data/*.dvc`` pointers. At the end: every batch and checkpoint file in
    ``data/merged`` with its hash (none duplicated, lost or overwritten), one ledger line and
    one history entry per attempt (its verdict, figures and games played), one Elo refit and one tournament per accepted attempt.
    Attempt ids (which hold a timestamp) are replaced by ``gen/attempt``.
    """
    commits = attempt_commits(repo)
    state = json.loads((repo / "state/curriculum_state.json").read_text())
    ids = {e["attempt_id"]: f"{e['generation']}/{e['attempt']}" for e in state["log"]}
    ledger = [json.loads(line) for line in (repo / "state/feedback.jsonl").read_text().splitlines() if line.strip()]
    history = json.loads((repo / "state/eval_history.json").read_text())
    elo = json.loads((repo / "state/elo_history.json").read_text())
    games = [json.loads(line) for line in (repo / "state/tournament.jsonl").read_text().splitlines() if line.strip()]
    merged = {
        str(p.relative_to(repo)): hashlib.md5(p.read_bytes()).hexdigest()
        for p in sorted((repo / "data/merged").rglob("*"))
        if p.is_file()
    }
    fingerprint = {
        "subjects": [s for _, s in commits],
        "outs": [out_hashes(repo, sha) for sha, _ in commits],
        "pointers": [pointer_hashes(repo, sha) for sha, _ in commits],
        "merged": merged,
        "ledger": [(ids[r["attempt_id"]], r["outcome"], r["passed"]) for r in ledger],
        "history": [(ids[h["attempt_id"]], h["verdict"], h["figures"], h.get("episodes")) for h in history],
        "elo": [(ids[e["attempt_id"]], e["games"], e["table"]) for e in elo],
        "tournament": {ids[a]: sum(g["attempt_id"] == a for g in games) for a in {g["attempt_id"] for g in games}},
        "state": {k: state[k] for k in ("status", "generation", "attempt", "failures")},
        "git_clean": git(repo, "status", "--porcelain", "--untracked-files=no") == "",
    }
    return json.loads(json.dumps(fingerprint))  # as JSON holds it: the reference run's is read back from a file


REFERENCE_THREAD = "reference-run"
"""The thread that runs the reference run in the background (``pytest_collection_finish``); the
process guard lets it start processes while a fast test runs beside it."""


def _reference_dir(config: pytest.Config) -> Path:
    """The session's one folder of the reference run, shared by the pytest-xdist workers."""
    base = config._tmp_path_factory.getbasetemp()  # type: ignore[attr-defined]  # the tmp_path_factory fixture's
    return base.parent / "reference" if hasattr(config, "workerinput") else base / "reference"


def _build_reference(shared: Path, environ: dict[str, str]) -> None:
    """Run the reference run into ``shared`` in ``environ`` unless it is there; one process at a time (a file lock)."""
    with FileLock(str(shared) + ".lock"):
        if not (shared / "run.json").exists():
            _run_reference(shared, environ)


def pytest_collection_finish(session: pytest.Session) -> None:
    """Start the reference run in a background thread when a collected test uses it: the first
    worker to take its lock runs it while the tests before go on; the others find it done."""
    if any("reference_run" in getattr(item, "fixturenames", ()) for item in session.items):
        environ = dict(os.environ)  # as it is before any test changes it

        def build() -> None:
            with contextlib.suppress(Exception):  # a failure is raised where a test asks for it (reference_run)
                _build_reference(_reference_dir(session.config), environ)

        threading.Thread(target=build, name=REFERENCE_THREAD, daemon=True).start()


@pytest.fixture
def reference_run(request: pytest.FixtureRequest, tmp_path: Path):
    """One uninterrupted 2-generation TINY run: ``(repo, result, seams, fingerprint)``.

    ``seams`` is every seam the run reached (``ml.base.faults``), in order; the fingerprint is
    taken before any test changes the repo. Run once per session (started in the background at
    collection, ``pytest_collection_finish``); each test gets its own copy (``cp -a``: DVC's links
    kept; about 30 MB) of the finished repository, to change as it likes.
    """
    shared = _reference_dir(request.config)
    _build_reference(shared, dict(os.environ))  # waits for the background run; runs it here if that one failed
    built = json.loads((shared / "run.json").read_text())
    repo = tmp_path / "reference"
    subprocess.run(["cp", "-a", str(shared / "repo"), str(repo)], check=True)
    res = subprocess.CompletedProcess(built["args"], built["returncode"], built["stdout"], built["stderr"])
    return repo, res, built["seams"], built["fingerprint"]


def _run_reference(shared: Path, environ: dict[str, str]) -> None:
    """The reference run in ``shared/repo``; its result, seams and fingerprint in ``shared/run.json`` (last)."""
    from ml.base.faults import SEAMS_LOG_ENV

    shutil.rmtree(shared, ignore_errors=True)  # a worker that died halfway
    repo = make_project_copy(shared / "repo", tiny_params())
    log = shared / "seams.txt"
    res = run_loop(repo, env={SEAMS_LOG_ENV: str(log)}, inherit=environ)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    built = {"args": res.args, "returncode": res.returncode, "stdout": res.stdout, "stderr": res.stderr,
             "seams": log.read_text().split(), "fingerprint": run_fingerprint(repo)}  # fmt: skip
    atomic_write_json(shared / "run.json", built)  # whole or absent: a worker killed here leaves none


# ---------------------------------------------------------------------------------------------- the process guard


class ProcessInFastTest(PermissionError):
    """A test not marked ``expensive`` tried to start a process.

    A ``PermissionError`` (an ``OSError``), as if exec were denied: code that already copes
    with a missing program (``ml.runtime.cli.git_sha`` says ``unknown``) goes on, the rest fails
    with this message. Nothing is started either way.
    """


_GUARD = {"test": None}  # nodeid of the running fast test, None while an expensive one runs


def _refuse(what: str):
    def start(*args, **kwargs):
        if _GUARD["test"] is not None and threading.current_thread().name != REFERENCE_THREAD:
            raise ProcessInFastTest(f"{_GUARD['test']} starts a process ({what}): mark it @pytest.mark.expensive")
        return originals[what](*args, **kwargs)

    return start


originals = {
    "subprocess": subprocess.Popen._execute_child,  # every subprocess.run/Popen, GitPython, DVC's own
    "multiprocessing": multiprocessing.process.BaseProcess.start,  # Process, ProcessPoolExecutor workers
}
subprocess.Popen._execute_child = _refuse("subprocess")  # type: ignore[method-assign]
multiprocessing.process.BaseProcess.start = _refuse("multiprocessing")  # type: ignore[method-assign]


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None):
    """Guard the whole protocol (fixture set-up included: a session fixture first built for a
    fast test is guarded too), unless the test is marked ``expensive``."""
    _GUARD["test"] = None if item.get_closest_marker("expensive") else item.nodeid
    try:
        return (yield)
    finally:
        _GUARD["test"] = None
