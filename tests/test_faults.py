"""Fault injection: the loop killed (``SIGKILL`` to its whole process group) at every seam of
its code, and at random moments, converges to the uninterrupted run.

The seams are not hand-kept: the reference run (``reference_run`` in conftest) records every
seam it reaches (``ml.base.faults``), and the test kills at each of them: generation 1's (a
promotion with data in it, the tournament against an earlier student) and the generation-0
seams generation 1 does not reach (the teacher stage). One repository takes the kills in
order, each restart running until the next seam (after two of them, the DVC file being written
is cut short as a kill inside DVC's write leaves it); then a run to the end. Its fingerprint
(``run_fingerprint``: commit subjects, ``dvc.lock`` output hashes and ``.dvc`` pointers of
every attempt commit, every merged batch and checkpoint, one ledger line, history entry, Elo
refit and tournament per attempt) must equal the reference's, with ``dvc status`` clean.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ml.base.faults import DURING_SUFFIX, FAULT_ENV
from tests.conftest import make_project_copy, run_fingerprint, run_loop, tiny_params

pytestmark = pytest.mark.expensive
ENV = {**os.environ, "DVC_NO_ANALYTICS": "1", "PYTHONHASHSEED": "0"}


def seams_to_kill(seams: list[str]) -> list[str]:
    """Generation 1's seams, and generation 0's that generation 1 does not reach, in run order."""
    later = {s.split(".", 1)[1] for s in seams if s.startswith("g001.")}
    return [s for s in seams if s.startswith("g001.") or (s.startswith("g000.") and s.split(".", 1)[1] not in later)]


def _start(repo: Path, log: Path, fault: str | None = None) -> subprocess.Popen:
    env = {**ENV, **({FAULT_ENV: fault} if fault else {})}
    with log.open("a") as out:
        out.write(f"\n==== loop.py, fault {fault}\n")
        out.flush()
        return subprocess.Popen(
            [sys.executable, "loop.py"], cwd=repo, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )


def _assert_converged(repo: Path, want: dict) -> None:
    res = run_loop(repo)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    got = run_fingerprint(repo)
    for key in want:
        assert got[key] == want[key], key
    status = subprocess.run([sys.executable, "-m", "dvc", "status"], cwd=repo, env=ENV, capture_output=True, text=True)
    assert "changed" not in status.stdout and "modified" not in status.stdout, status.stdout


def test_seams_come_from_the_code(reference_run):
    _, _, seams, _ = reference_run
    targets = seams_to_kill(seams)
    kinds = {s.split(".", 1)[1].split(".")[0] for s in targets}
    # each step of the driver and of every stage is there, named by the code that reached it
    assert {"begin", "promote", "repro", "stage", "rating", "finish", "commit"} <= kinds
    assert any(s.endswith("promote.dvc_add" + DURING_SUFFIX) for s in targets)  # inside `dvc add`
    assert {f"stage.{n}" for n in ("teacher", "train", "selfplay", "export", "gate", "merge", "rate")} <= {
        s.split(".", 1)[1] for s in targets
    }
    assert len(targets) == len(set(targets))


CUT_SHORT = {"g001.promote.dvc_add@during": "data/pool.dvc", "g001.stage.selfplay.metrics": "dvc.lock"}
"""After the kill at these seams, the file DVC writes next is cut short, as a kill inside DVC's
write of it leaves it (``ml.driver.torn``): a promotion's pointer, a stage's lock entry."""


def _cut_short(path: Path) -> None:
    """Leave the longest prefix of ``path``, at most half of it, that DVC cannot load."""
    from ml.driver.torn import unloadable

    data = path.read_bytes()
    for end in range(len(data) // 2, 0, -1):
        path.write_bytes(data[:end])
        if unloadable(path):
            return
    raise AssertionError(f"every prefix of {path} loads")


@pytest.mark.long
def test_kill_at_every_seam(tmp_path: Path, reference_run):
    _, _, seams, want = reference_run
    repo = make_project_copy(tmp_path / "repo", tiny_params())
    log = tmp_path / "chain.log"
    missed = []
    for fault in seams_to_kill(seams):
        rc = _start(repo, log, fault).wait(timeout=900)
        if rc != -signal.SIGKILL:
            missed.append((fault, rc))
        if fault in CUT_SHORT:
            _cut_short(repo / CUT_SHORT[fault])
    assert not missed, f"seams the resumed runs did not reach: {missed}\n{log.read_text()[-3000:]}"
    assert log.read_text().count("cut short by a kill during DVC's write") == len(CUT_SHORT)
    _assert_converged(repo, want)


def test_kill_at_random_moments(tmp_path: Path, reference_run):
    """Four kills at seeded random moments. The first kills the loop process alone, as a
    terminal's ``kill -9 PID`` does: its ``dvc repro`` and stage live on as orphans, which the
    next start finds and stops. The others kill the whole process group."""
    _, _, _, want = reference_run
    repo = make_project_copy(tmp_path / "repo", tiny_params())
    log = tmp_path / "random.log"
    rng = random.Random(20261201)
    landed = []  # a run may finish before its kill: then nothing was tested by it
    for i in range(4):
        proc = _start(repo, log)
        time.sleep(rng.uniform(3.0, 20.0))  # the four land across the first generation or so
        landed.append(proc.poll() is None)
        if landed[-1]:
            if i == 0:
                os.kill(proc.pid, signal.SIGKILL)
            else:
                os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    assert landed[:2] == [True, True], landed  # the lone-process kill and a group kill, at least
    _assert_converged(repo, want)
