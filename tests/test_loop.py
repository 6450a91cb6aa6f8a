"""loop.py in a temporary copy of the project, on tiny params (real DVC, real git).

Checks: a 2-generation run makes one commit per attempt naming generation, attempt and
verdict, leaves `dvc status` clean so `dvc repro` runs nothing, and `dvc params diff` /
`dvc metrics diff` between attempts show the changes; checking out an earlier attempt and
`dvc checkout` restores its data exactly; a rejected batch never reaches a later dataset
and the loop blocks after max_retries, then `--skip-to-next-stage` / `--force-retry`
act; a hand edit of params.yaml is committed alone (``params: <changes>``) before the attempt
that runs with it; a second loop.py refuses to start; a dirty tree is refused with the reason. Kills and
resumes (at every seam, at random moments, the loop alone with orphaned stages):
tests/test_faults.py.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ml.config.yaml_file import safe_yaml
from ml.driver.state import RUNTIME_DIR
from tests.conftest import (
    REJECTING_GATE,
    attempt_commits,
    git,
    make_project_copy,
    out_hashes,
    run_loop,
    tiny_params,
    yaml_text,
)

pytestmark = pytest.mark.expensive
DVC = [sys.executable, "-m", "dvc"]
ENV = {**os.environ, "DVC_NO_ANALYTICS": "1"}


def dvc(repo: Path, *args: str) -> str:
    return subprocess.run([*DVC, *args], cwd=repo, env=ENV, check=True, capture_output=True, text=True).stdout


@pytest.fixture
def finished_run(reference_run):
    """The uninterrupted 2-generation run (conftest ``reference_run``), with its attempt
    commits and data hashes taken before any test changes the repo."""
    repo, res, _, fingerprint = reference_run
    return repo, res, attempt_commits(repo)[:2], fingerprint["outs"]


def test_two_generations_commit_and_restore(finished_run):
    project, res, _, _ = finished_run
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    assert "wall" in res.stdout and "done: 2 generations accepted (max 2)" in res.stdout
    assert "Elo after" in res.stdout
    commits = attempt_commits(project)
    assert [s.split(":")[0] for _, s in commits] == ["gen 000 attempt 1", "gen 001 attempt 1"]
    assert "Elo gain gen001 over gen000" in git(project, "log", "-1", "--format=%B", commits[1][0])
    assert all("accepted" in s for _, s in commits)  # tiny params: ungated (the gate itself: tests/test_gate.py)
    assert git(project, "status", "--porcelain") == ""
    assert "up to date" in dvc(project, "status") or dvc(project, "status").strip() in (
        "",
        "Data and pipelines are up to date.",
    )
    repro = dvc(project, "repro")
    assert "Running stage" not in repro
    params_diff = dvc(project, "params", "diff", "HEAD~1")
    assert "run.generation" in params_diff and "run.seed" in params_diff
    assert "gate/" in dvc(project, "metrics", "diff", "HEAD~1")
    state = json.loads((project / "state/curriculum_state.json").read_text())
    assert state["status"] == "done" and [e["verdict"] for e in state["log"]] == ["accepted", "accepted"]
    history = json.loads((project / "state/eval_history.json").read_text())
    assert [h["generation"] for h in history] == [0, 1]
    # generation 1 trained on generation 0's accepted batch, once: its student is the gate's candidate of gen 0
    assert history[1]["metrics"]["train"]["train/ppo_files"] == 1
    assert [h["metrics"]["train"]["train/reused"] for h in history] == [False, True]
    elo = json.loads((project / "state/elo_history.json").read_text())
    assert [e["generation"] for e in elo] == [0, 1] and elo[1]["gain"]["new"] == "gen001"
    rows = {r["player"]: r for r in elo[1]["table"]}
    assert rows["teacher"]["elo"] == 1500 and rows["gen001"]["low"] < rows["gen001"]["elo"] < rows["gen001"]["high"]
    # the tournament is the rate stage's, pinned in dvc.lock: its output holds the games the driver recorded
    lock = safe_yaml().load((project / "dvc.lock").read_text())
    pinned = {o["path"]: o["md5"] for o in lock["stages"]["rate"]["outs"]}
    assert pinned["data/tournament.json"] == hashlib.md5((project / "data/tournament.json").read_bytes()).hexdigest()
    assert "data/merged/students" in {d["path"] for d in lock["stages"]["rate"]["deps"]}
    played = json.loads((project / "data/tournament.json").read_text())
    recorded = [json.loads(line) for line in (project / "state/tournament.jsonl").read_text().splitlines()]
    assert played["games"] == [{k: v for k, v in g.items() if k != "attempt_id"} for g in recorded[-len(played["games"]) :]]
    assert played["generation"] == 1 and played["students"] == ["gen000", "gen001"] and len(played["games"]) == 16
    assert history[1]["episodes"] == sum(history[1]["metrics"][s][f"{s}/episodes"] for s in history[1]["stage_wall_s"])
    ledger = (project / "state/feedback.jsonl").read_text().splitlines()
    assert [json.loads(line)["outcome"] for line in ledger] == ["accepted", "accepted"]
    assert "gen001" in run_loop(project, "elo").stdout
    res = run_loop(project, "eval", "--games", "8", "--json", str(project.parent / "eval.json"))
    assert res.returncode == 0, res.stderr
    table = json.loads((project.parent / "eval.json").read_text())
    assert [r["student"] for r in table] == ["gen000", "gen001"] and all(r["games"] == 8 for r in table)
    assert all(r["low"] <= r["win_rate"] <= r["high"] for r in table)
    assert table[1]["ppo_share"] > 0 == table[0]["ppo_share"]  # gen001 learned from gen000's batch
    assert table[1]["elo"] == rows["gen001"]["elo"] and table[0]["agent_win_rate"] == history[0]["figures"]["win_rate"]
    res = run_loop(project, "eval", "--games", "8", "--agents", "--json", str(project.parent / "agents.json"))
    agents = json.loads((project.parent / "agents.json").read_text())
    assert (
        res.returncode == 0 and "PPO agents (greedy)" in res.stdout and [r["student"] for r in agents] == ["gen000", "gen001"]
    )
    assert [r["policy"] for r in agents] == [f"data/merged/frozen/gen00{g}.pt" for g in (0, 1)]  # the agents played
    assert [r["policy"] for r in table] == [f"data/merged/students/gen00{g}.pt" for g in (0, 1)]
    assert git(project, "status", "--porcelain") == ""  # eval changes nothing in the repo
    res = run_loop(project, "eval", "--games", "3")  # less than one deal of a 4-pod
    assert res.returncode == 2 and "--games must be at least 4" in res.stderr, res.stderr
    res = run_loop(project, "promote", "gen000-a1", "--name", "first-bot")
    assert res.returncode == 0, res.stderr
    assert (project / "bots/promoted/first-bot.pt").is_file() and git(project, "status", "--porcelain") == ""
    assert "promote: first-bot" in git(project, "log", "-1", "--format=%s")
    res = run_loop(project)
    assert "final report" in res.stdout and "first-bot" in res.stdout
    dag = dvc(project, "dag")
    assert all(stage in dag for stage in ("teacher", "train", "selfplay", "export", "gate", "merge"))
    first = commits[0][0]
    assert out_hashes(project, first)["data/models/student.pt"] != out_hashes(project, "HEAD")["data/models/student.pt"]
    git(project, "checkout", "-q", first)
    dvc(project, "checkout", "--force")
    recorded = out_hashes(project, first)
    for path in ("data/models/student.pt", "data/models/ppo.pt", "data/models/candidate_student.pt"):
        assert hashlib.md5((project / path).read_bytes()).hexdigest() == recorded[path], path
    status = dvc(project, "status")
    assert "changed" not in status, status
    assert not list((project / "data/pool").glob("*.jsonl"))  # gen 0 started from an empty pool


def test_rejection_blocks_and_overrides(tmp_path: Path):
    repo = make_project_copy(
        tmp_path / "repo",
        tiny_params({"gate": REJECTING_GATE}),
    )
    res = run_loop(repo)
    assert res.returncode == 3 and "BLOCKED" in res.stdout, res.stdout[-2000:] + res.stderr[-2000:]
    subjects = [s for _, s in attempt_commits(repo)]
    assert subjects[0].startswith("gen 000 attempt 1: rejected") and subjects[1].startswith("gen 000 attempt 2: rejected")
    assert len(subjects) == 2  # max_retries = 1
    # the suggester nudged the retry's params after the strength check failed, and says so
    shas = [sha for sha, _ in attempt_commits(repo)]
    assert "next attempt's params nudged: selfplay.learner_decisions = 900" in git(repo, "log", "-1", "--format=%B", shas[0])
    diff = dvc(repo, "params", "diff", shas[0], shas[1])
    assert "selfplay.learner_decisions" in diff and "selfplay.ent_coef" in diff
    ledger = [json.loads(line) for line in (repo / "state/feedback.jsonl").read_text().splitlines()]
    assert [r["outcome"] for r in ledger] == ["rejected", "blocked"] and ledger[1]["nudges"][
        "selfplay.learner_decisions"
    ] == 900
    state = json.loads((repo / "state/curriculum_state.json").read_text())
    assert state["status"] == "blocked"
    rejected = sorted(p.name for p in (repo / "data/merged/rejected").glob("*.jsonl"))
    assert rejected == ["ml-decisions-ppo-gen000-a1.jsonl", "ml-decisions-ppo-gen000-a2.jsonl"]
    res = run_loop(repo, "--skip-to-next-stage", "--max-attempts", "1")
    assert res.returncode == 0, res.stderr[-2000:]
    history = json.loads((repo / "state/eval_history.json").read_text())
    last = history[-1]
    assert last["generation"] == 1 and last["metrics"]["train"]["train/ppo_files"] == 0  # rejected batches never trained on
    assert "override: skip-to-next-stage" in git(repo, "log", "--format=%s")
    head = git(repo, "rev-parse", "HEAD")
    for flag in ("--force-retry", "--skip-to-next-stage"):  # the loop is not blocked now: refused, nothing written
        res = run_loop(repo, flag)
        assert res.returncode == 2 and f"{flag} unblocks a BLOCKED loop" in res.stderr, res.stderr[-2000:]
    assert git(repo, "rev-parse", "HEAD") == head and git(repo, "status", "--porcelain") == ""


def test_hand_edit_of_params_is_committed_then_the_attempt_runs_with_it(project: Path):
    """The first thing a user does: edit params.yaml, run loop.py. The edit becomes its own commit
    naming the changed values, before the attempt, whose stages run with them."""
    params = safe_yaml().load((project / "params.yaml").read_text())
    params["train"]["epochs"], params["export"]["games"] = 3, 8
    (project / "params.yaml").write_text(yaml_text(params))
    res = run_loop(project, "--max-attempts", "1")
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]
    assert "committed your edit of params.yaml: params: train.epochs 2 -> 3, export.games 12 -> 8" in res.stdout
    subjects = git(project, "log", "--reverse", "--format=%s").splitlines()
    assert subjects[1] == "params: train.epochs 2 -> 3, export.games 12 -> 8" and subjects[2].startswith("gen 000 attempt 1:")
    assert len(subjects) == 3 and git(project, "show", "--name-only", "--format=", "HEAD~1").split() == ["params.yaml"]
    metrics = json.loads((project / "state/eval_history.json").read_text())[-1]["metrics"]
    assert metrics["export"]["export/games_played"] == 8  # the attempt ran on the edited values
    assert safe_yaml().load(git(project, "show", "HEAD:params.yaml"))["train"]["epochs"] == 3


def test_refuses_second_instance_and_dirty_tree(project: Path):
    (project / "README.md").write_text("edited by a human\n")
    res = run_loop(project)
    assert res.returncode == 2 and "README.md" in res.stderr and "did not make" in res.stderr
    git(project, "checkout", "README.md")
    # a refused command line leaves the dashboard's status as the run left it
    status = project / RUNTIME_DIR / "status.json"
    status.parent.mkdir(parents=True, exist_ok=True)
    status.write_text('{"state": "done"}')
    res = run_loop(project, "--profile", "nosuch")
    assert res.returncode == 2 and "no profile 'nosuch'" in res.stderr
    assert json.loads(status.read_text()) == {"state": "done"}
    from filelock import FileLock

    lock = FileLock(str(project / ".dvc/tmp/loop.lock"))
    lock.acquire()
    try:
        res = run_loop(project)
        assert res.returncode == 2 and "already running" in res.stderr
    finally:
        lock.release()
