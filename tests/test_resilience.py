"""The record survives faults: the reproductions of issue #12 items 1-6 and the untracked-file
rule, each on a project copy with no pipeline run (the kills at every seam of a real run:
tests/test_faults.py).

Checks: a failed or killed ``dvc add`` inside promotion shows DVC's own message and converges
on the next run to pointers that match the data, and a resumed attempt never promotes its own
merge output (items 1, 2); a stale ``.git/index.lock`` is cleared at start and said, and the
commit of an interrupted attempt keeps its figures (3); a params change committed while an
attempt is in flight (the dashboard's overrides) resumes, an uncommitted one is refused (4);
a lost or unreadable history is an error naming the file, a ledger line with invalid UTF-8 is
reported and kept byte for byte (5); a detached HEAD is refused, a missing git identity is
said (6); untracked files outside the loop's paths do not block it, edits to tracked ones do;
a hand edit of params.yaml between attempts is validated and committed alone (killed at each of
its seams, the next start makes the same commit), one made in flight is refused naming the
command that resumes the attempt with it; an unwritable promoted folder stops loop.py with one
line naming the folder and the step, a ``.tmp`` left by a kill is removed, and the next run promotes.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from git import GitCommandError

from ml.base.faults import FAULT_ENV
from ml.base.io import atomic_write_json
from ml.config.params import ParamsError, load_params
from ml.config.yaml_file import safe_yaml
from ml.driver import history
from ml.driver.commands import apply_profile
from ml.driver.dvc_status import pipeline_status
from ml.driver.evaluate import evaluate
from ml.driver.feedback import LEDGER, FeedbackRecord, append_record, read_ledger
from ml.driver.generations import generation_rows
from ml.driver.journal import PENDING_COMMIT, Step
from ml.driver.messages import pending_message
from ml.driver.orchestrator import Loop
from ml.driver.promotion import refuse_hand_made
from ml.driver.state import HISTORY_FILE, AttemptLog, HistoryEntry, LoopState
from ml.driver.workspace import LoopError
from tests.conftest import git, immutable, make_project_copy, run_loop, tiny_params, yaml_text

pytestmark = pytest.mark.expensive  # git and DVC in a project copy
ENV = {**os.environ, "DVC_NO_ANALYTICS": "1"}


def _dvc(repo: Path, *args: str) -> str:
    return subprocess.run([sys.executable, "-m", "dvc", *args], cwd=repo, env=ENV, capture_output=True, text=True).stdout


@pytest.fixture
def loop(tmp_path: Path) -> Loop:
    repo = make_project_copy(tmp_path / "repo", tiny_params())
    messages: list[str] = []
    lp = Loop(repo, echo=messages.append)
    lp.messages = messages
    return lp


def _merged_output(repo: Path) -> None:
    """A previous attempt's merge output: one accepted batch, an opponent, a student."""
    for name, file in (("pool", "ml-decisions-ppo-gen000-a1.jsonl"), ("frozen", "gen000.pt"), ("students", "gen000.pt")):
        (repo / "data/merged" / name).mkdir(parents=True, exist_ok=True)
        (repo / "data/merged" / name / file).write_bytes(f"{name} of generation 0\n".encode())
    (repo / "data/merged/rejected").mkdir(parents=True, exist_ok=True)


def test_promotion_converges_and_never_feeds_an_attempt_its_own_output(loop: Loop):
    repo = loop.root
    loop.ensure_data_dirs()
    _merged_output(repo)
    flight = loop.begin(loop.load_state())
    (repo / ".dvc/tmp/rwlock").write_text("garbage")  # a corrupted DVC lock: `dvc add` fails
    with pytest.raises(LoopError) as err:
        loop.promote(flight)
    assert "dvc add" in str(err.value) and "rwlock" in str(err.value).lower()  # DVC's own words, not an empty message
    assert not loop.load_state().in_flight.promoted
    assert (repo / "data/pool/ml-decisions-ppo-gen000-a1.jsonl").exists()  # copied, pointer still stale
    loop.clear_stale_dvc_locks()  # what loop.py does at start
    loop.promote(loop.load_state().in_flight)  # the next run
    assert loop.load_state().in_flight.promoted
    status = _dvc(repo, "status", *(f"data/{n}.dvc" for n in ("pool", "frozen", "students", "rejected")))
    assert "up to date" in status, status
    # the attempt's merge stage writes its own output; a resume must not promote it
    (repo / "data/merged/pool/ml-decisions-ppo-gen000-a2.jsonl").write_text("this attempt's own batch\n")
    loop.promote(loop.load_state().in_flight)
    assert sorted(p.name for p in (repo / "data/pool").iterdir()) == ["ml-decisions-ppo-gen000-a1.jsonl"]


def test_a_dvc_lock_naming_a_live_older_process_is_kept_and_a_stale_one_removed(loop: Loop):
    """``clear_stale_dvc_locks`` goes by the pids in DVC's rwlock, not by command lines: a live
    process started before the file was written may hold it; a dead pid, or one started after
    the file (a reused pid), cannot."""
    rwlock = loop.path(".dvc/tmp/rwlock")
    rwlock.parent.mkdir(parents=True, exist_ok=True)
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)

    def holding(pid: int) -> None:
        rwlock.write_text(json.dumps({"read": {}, "write": {str(loop.root / "data"): {"pid": pid, "cmd": "dvc repro"}}}))

    holding(os.getpid())  # this test's process, started before the file
    loop.clear_stale_dvc_locks()
    assert rwlock.exists()
    os.utime(rwlock, (0, 0))  # as if written in 1970: this process started after it, on a reused pid
    loop.clear_stale_dvc_locks()
    assert not rwlock.exists()
    holding(int(dead.stdout))  # a process that has ended
    loop.clear_stale_dvc_locks()
    assert not rwlock.exists()


def test_unwritable_promoted_folder_is_one_line_and_the_next_run_promotes(loop: Loop):
    """``chattr +i data/pool`` made promotion raise PermissionError from ml/data/merge.py (a traceback)
    and leave ``data/pool.tmp``; now one line, the leftover of a kill is removed, nothing is
    flagged promoted, and once the folder is writable the next run promotes it."""
    repo = loop.root
    loop.ensure_data_dirs()
    _merged_output(repo)
    with (repo / "data/.gitignore").open("a") as f:
        f.write("/merged\n")  # as the first merge stage leaves it
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "data folders")
    leftover = repo / "data/pool.tmp"  # a kill while the folder was being built
    leftover.mkdir()
    (leftover / "ml-decisions-ppo-gen000-a9.jsonl").write_text("half built\n")
    with immutable(repo / "data/pool"):
        res = run_loop(repo, timeout=300)
    assert res.returncode == 2 and "Traceback" not in res.stderr, res.stdout[-2000:] + res.stderr[-2000:]
    assert res.stderr.splitlines()[-1] == "loop.py: cannot write data/pool (removing data/pool): Operation not permitted"
    assert not leftover.exists() and not loop.load_state().in_flight.promoted and not any((repo / "data/pool").iterdir())
    leftover.mkdir()  # and one more kill's, left for the next run
    (leftover / "ml-decisions-ppo-gen000-a9.jsonl").write_text("half built\n")
    res = run_loop(repo, timeout=300, env={FAULT_ENV: "g000.promote.done"})  # killed once promoted
    assert res.returncode == -9, res.stdout[-2000:] + res.stderr[-2000:]
    assert loop.load_state().in_flight.promoted and not leftover.exists()
    (batch,) = (repo / "data/pool").iterdir()  # `dvc add` put it in the cache: the same bytes, maybe not the same file
    assert batch.read_bytes() == (repo / "data/merged/pool" / batch.name).read_bytes()


def test_files_added_or_edited_by_hand_are_refused_and_kept(loop: Loop):
    """A file dropped into data/pool, or a tracked file edited in place, is refused before
    promotion (which would delete or revert it) and before every stage of an attempt in flight
    (which would read it into the record); nothing is changed, and once undone the loop goes on."""
    repo = loop.root
    loop.ensure_data_dirs()
    _merged_output(repo)
    mine = repo / "data/pool/ml-decisions-mine.jsonl"
    mine.write_text("my own batch\n")
    params_before = (repo / "params.yaml").read_text()
    for flags in ([], ["--max-generations", "3"]):  # loop.py refuses before anything is written
        res = run_loop(repo, *flags)
        assert res.returncode == 2 and "ml-decisions-mine.jsonl (added)" in res.stderr, res.stdout[-2000:] + res.stderr[-2000:]
        assert loop.load_state().in_flight is None and (repo / "params.yaml").read_text() == params_before
    flight = loop.begin(loop.load_state())
    with pytest.raises(LoopError, match=r"data/pool/ml-decisions-mine.jsonl \(added\)\n.*would delete or revert them") as err:
        loop.promote(flight)
    assert "import-forge" in str(err.value) and "`dvc checkout --force data/pool`" in str(err.value)
    assert mine.read_text() == "my own batch\n" and not (repo / "data/pool/ml-decisions-ppo-gen000-a1.jsonl").exists()
    assert not loop.load_state().in_flight.promoted
    mine.unlink()  # moved out: the next run promotes
    loop.promote(loop.load_state().in_flight)
    batch = repo / "data/pool/ml-decisions-ppo-gen000-a1.jsonl"
    assert [p.name for p in (repo / "data/pool").iterdir()] == [batch.name]
    # in flight, after promotion: a dropped file stops the attempt before its next stage
    mine.write_text("my own batch\n")
    with pytest.raises(LoopError, match=r"ml-decisions-mine.jsonl \(added\)"):
        loop.repro(loop.load_state().in_flight)
    mine.unlink()
    # an edit in place (after `dvc unprotect`: a copy, not the cache's link) is refused too
    _dvc(repo, "unprotect", str(batch.relative_to(repo)))
    batch.write_text("edited\n")
    with pytest.raises(LoopError, match=r"ml-decisions-ppo-gen000-a1.jsonl \(edited\)"):
        loop.repro(loop.load_state().in_flight)
    assert batch.read_text() == "edited\n"
    mine.write_text("my own batch\n")
    _dvc(repo, "checkout", "--force", "data/pool")  # the fix the message gives
    assert not mine.exists() and batch.read_text() != "edited\n"
    refuse_hand_made(repo)  # nothing left to refuse


def test_stale_index_lock_is_cleared_at_start(loop: Loop):
    lock = loop.root / ".git/index.lock"
    lock.touch()
    res = run_loop(loop.root, "promote", "gen999")  # any loop.py command: the lock goes before any work
    assert not lock.exists() and "stale" in res.stdout + res.stderr
    assert "Traceback" not in res.stderr


def test_git_waits_for_another_process_holding_the_index_lock(loop: Loop):
    lock = loop.root / ".git/index.lock"
    lock.touch()
    threading.Timer(0.4, lock.unlink).start()  # the other process ends within the first two waits
    (loop.root / "new.txt").write_text("x\n")
    loop.git("add", "new.txt")  # tried again until the lock is gone
    assert "new.txt" in loop.git("diff", "--cached", "--name-only")
    lock.touch()
    with pytest.raises(GitCommandError, match=r"index\.lock"):
        loop.git("rm", "--cached", "-q", "new.txt")  # a lock that stays: the last try's error
    lock.unlink()


def test_resumed_commit_keeps_the_figures(loop: Loop):
    entry = AttemptLog(
        attempt_id="20261201-0000-gen000-a1", generation=0, attempt=1, verdict="accepted",
        figures={"win_rate": 0.4, "win_rate_low": 0.3, "win_rate_high": 0.5, "holdout_accuracy": 0.8,
                 "holdout_accuracy_drop": 0.01},
    )  # fmt: skip
    state = LoopState(generation=1, log=[entry])
    message = pending_message(state)
    assert message.startswith("gen 000 attempt 1: accepted") and "PPO win 0.400 [0.300, 0.500]" in message
    assert message.rstrip().endswith("Attempt-Id: 20261201-0000-gen000-a1")


def test_committed_params_change_resumes_uncommitted_is_refused(loop: Loop):
    repo = loop.root
    flight = loop.begin(loop.load_state())
    # a forced stop, then the dashboard's start with overrides: params.yaml is committed as it is
    loop.set_params({"train": {"epochs": 3}}, "params: overrides from the dashboard")
    loop.check_tree(loop.load_state())  # the file equals HEAD, newline and all: no refusal
    resumed = loop.begin(loop.load_state())
    assert resumed.attempt_id == flight.attempt_id and any("changed by a commit" in m for m in loop.messages)
    assert load_params(repo / "params.yaml").train.epochs == 3
    loop.check_tree(loop.load_state())
    (repo / "params.yaml").write_text((repo / "params.yaml").read_text().replace("epochs: 3", "epochs: 4"))
    with pytest.raises(LoopError, match="edited while attempt"):
        loop.check_tree(loop.load_state())


def test_rerunning_the_same_profile_resumes_a_killed_attempt(loop: Loop, capsys):
    """``loop.py --profile full`` killed mid-attempt and run again: the applied profile is a no-op,
    so the attempt resumes; another profile, or an unknown one, is refused by name, nothing written."""
    repo = loop.root
    apply_profile(loop, "full")
    assert "profile full applied" in capsys.readouterr().out
    flight = loop.begin(loop.load_state())
    head, params_text = git(repo, "rev-parse", "HEAD"), (repo / "params.yaml").read_text()
    apply_profile(loop, "full")  # the same command line again: nothing to change, no refusal
    with pytest.raises(LoopError, match=f"attempt {flight.attempt_id} is in flight; let it finish before changing params"):
        apply_profile(loop, "ablation")
    with pytest.raises(LoopError, match=r"no profile 'nosuch' \(profiles: ablation, "):
        apply_profile(loop, "nosuch")
    assert git(repo, "rev-parse", "HEAD") == head and (repo / "params.yaml").read_text() == params_text
    assert loop.load_state().in_flight == flight


def test_eval_refuses_less_than_a_deal_before_any_student_exists(loop: Loop, capsys):
    assert evaluate(loop, 2, None) == 2
    assert "--games must be at least 4" in capsys.readouterr().err
    assert evaluate(loop, 4, None) == 0 and "no students yet" in capsys.readouterr().out


def _one_attempt(loop: Loop) -> LoopState:
    entry = AttemptLog(attempt_id="a1", generation=0, attempt=1, verdict="rejected")
    state = LoopState(log=[entry])
    (loop.root / HISTORY_FILE).parent.mkdir(parents=True, exist_ok=True)
    (loop.root / HISTORY_FILE).write_text('[{"attempt_id": "a1", "generation": 0, "attempt": 1, "verdict": "rejected"}]\n')
    record = FeedbackRecord(timestamp="t", attempt_id="a1", generation=0, attempt=1, params={}, figures={}, passed=False,
                            outcome="rejected")  # fmt: skip
    append_record(loop.root / LEDGER, record)
    return state


def test_lost_history_is_an_error_naming_the_file(loop: Loop):
    state = _one_attempt(loop)
    loop.check_records(state)
    (loop.root / HISTORY_FILE).unlink()  # deleted while a stage runs
    with pytest.raises(
        LoopError, match=r"state/eval_history.json is missing.*\n.*git checkout HEAD -- state/eval_history.json"
    ):
        loop.load_history(state)
    (loop.root / HISTORY_FILE).write_bytes(b'[{"attempt_id": "a1", \xff}]')
    with pytest.raises(LoopError, match=r"eval_history\.json:1: not valid UTF-8"):
        loop.check_records(state)
    (loop.root / HISTORY_FILE).unlink()
    assert loop.load_history(LoopState()) == []  # no attempt yet: an absent file is a fresh start


OLD_HISTORY_ENTRY = {  # as an earlier version wrote it: no phase, stage_wall_s or episodes; a key this one does not know
    "attempt_id": "20260101-0000-gen000-a1", "generation": 0, "attempt": 1, "verdict": "accepted", "overrides": {},
    "figures": {"win_rate": 0.5, "win_rate_low": 0.4, "win_rate_high": 0.6, "sprt_decision": None},
    "reasons": ["win rate 0.500 >= 0.45"], "wall_s": 12.5, "nudges": {"train.lr": 0.001},
    "metrics": {"train": {"train/sampled_share": {"ppo": 0.25, "teacher": 0.75}, "train/nash_conv": float("nan")}},
    "note": "kept as it was",
}  # fmt: skip


def test_an_old_history_file_is_read_typed_and_written_back_unchanged(loop: Loop):
    """The history's entries are ``HistoryEntry`` models; an entry of an older file (keys missing,
    one unknown) reads with defaults, and writing the history back leaves its bytes as they were."""
    path = loop.root / HISTORY_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_json(path, [OLD_HISTORY_ENTRY])
    before = path.read_bytes()
    state = LoopState(
        log=[AttemptLog.model_validate({k: OLD_HISTORY_ENTRY[k] for k in ("attempt_id", "generation", "attempt", "verdict")})]
    )
    [entry] = loop.load_history(state)
    assert isinstance(entry, HistoryEntry) and entry.phase == "main" and entry.episodes is None and entry.stage_wall_s == {}
    assert entry.nudges == {"train.lr": 0.001} and entry.metrics["train"]["train/sampled_share"] == {
        "ppo": 0.25,
        "teacher": 0.75,
    }
    assert [r["ppo_share"] for r in generation_rows([entry], [])] == [0.25]
    new = history.history_entry(AttemptLog(attempt_id="a2", generation=1, attempt=1, verdict="rejected"), {}, {})
    attempts = loop.journal.add_history([entry], new)
    assert [e.attempt_id for e in attempts] == [entry.attempt_id, "a2"] and loop.journal.done(Step.HISTORY, "a2")
    written = json.loads(path.read_text())
    assert path.read_bytes().startswith(before[: before.rindex(b"}")]) and written[0].keys() == OLD_HISTORY_ENTRY.keys()
    assert list(written[1]) == [*AttemptLog.model_fields, "nudges", "metrics"]  # a new entry: every key, in order
    assert loop.journal.add_history(attempts, new) == attempts and json.loads(path.read_text()) == written  # once


def test_a_bad_history_entry_is_one_line_naming_the_entry_and_field(loop: Loop):
    state = _one_attempt(loop)
    (loop.root / HISTORY_FILE).write_text(
        '[{"attempt_id": "a1", "generation": "first", "attempt": 1, "verdict": "rejected"}]\n'
    )
    with pytest.raises(
        LoopError, match=r"^state/eval_history.json: entry 0 \(a1\): generation: Input should be a valid integer"
    ):
        loop.load_history(state)


def test_the_journal_records_promotion_and_completes_an_old_pending_commit(loop: Loop):
    """``Step.PROMOTE`` is done once recorded (and for an attempt that ended); a pending-commit
    journal in the format without ``dvc_add`` is completed at the next start."""
    repo = loop.root
    loop.ensure_data_dirs()
    flight = loop.begin(loop.load_state())
    assert not loop.journal.done(Step.PROMOTE, flight.attempt_id)
    loop.journal.record_promoted(flight.attempt_id)
    assert loop.journal.done(Step.PROMOTE, flight.attempt_id) and loop.load_state().in_flight.promoted
    assert not loop.journal.done(Step.STATE, flight.attempt_id) and not loop.journal.done(Step.COMMIT, flight.attempt_id)
    git(repo, "checkout", "-q", "--", "params.yaml")
    git(repo, "clean", "-qfd", "state", "data")
    (repo / "notes").mkdir()
    (repo / "notes/x.txt").write_text("journalled\n")
    atomic_write_json(repo / PENDING_COMMIT, {"message": "an old journal\n", "paths": ["notes"]})
    loop.finish_pending_commit()
    assert git(repo, "log", "-1", "--format=%s").strip() == "an old journal" and not (repo / PENDING_COMMIT).exists()
    assert "completed the commit interrupted by a kill: an old journal" in loop.messages


def test_bad_ledger_bytes_reported_and_kept(loop: Loop):
    state = _one_attempt(loop)
    ledger = loop.root / LEDGER
    bad = b'{"attempt_id": "\xff\xfe broken"}\n'
    with ledger.open("ab") as f:
        f.write(bad)
    records, problems = read_ledger(ledger)
    assert [r.attempt_id for r in records] == ["a1"] and problems[0].line == 2 and "UTF-8" in problems[0].error
    loop.check_records(state)
    assert any(f"{LEDGER}:2" in m for m in loop.messages)
    record = FeedbackRecord(timestamp="t", attempt_id="a2", generation=0, attempt=2, params={}, figures={}, passed=True,
                            outcome="accepted")  # fmt: skip
    assert append_record(ledger, record)
    assert bad in ledger.read_bytes() and [r.attempt_id for r in read_ledger(ledger)[0]] == ["a1", "a2"]
    ledger.unlink()
    with pytest.raises(LoopError, match=r"feedback\.jsonl is missing"):
        loop.check_records(state)


def test_detached_head_refused_and_identity_said(loop: Loop, monkeypatch):
    repo = loop.root
    git(repo, "checkout", "-q", "--detach")
    with pytest.raises(LoopError, match="HEAD is detached"):
        Loop(repo).preflight()
    git(repo, "checkout", "-q", "main")
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", "/dev/null")
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")
    git(repo, "config", "--unset", "user.email")
    git(repo, "config", "--unset", "user.name")
    messages: list[str] = []
    anonymous = Loop(repo, echo=messages.append)
    anonymous.preflight()
    assert any("distill-loop <distill-loop@localhost>" in m for m in messages)
    (repo / "state").mkdir(exist_ok=True)
    (repo / "state/x.json").write_text("{}")
    with anonymous.committing("test commit", ["state"]):
        pass  # the file above is the change
    assert git(repo, "log", "-1", "--format=%an <%ae>").strip() == "distill-loop <distill-loop@localhost>"


def test_untracked_files_do_not_block_edits_do(loop: Loop):
    repo = loop.root
    (repo / "loop.log").write_text("python loop.py > loop.log\n")
    (repo / "notes.txt").write_text("mine\n")
    loop.check_tree(LoopState())
    (repo / "README.md").write_text("edited\n")
    with pytest.raises(LoopError, match=r"README\.md"):
        loop.check_tree(LoopState())


def test_kill_inside_a_journalled_commit_is_completed_at_next_start(loop: Loop):
    """A profile's params.yaml written, then a kill before its commit: the next start commits it
    (before, the tree was left dirty and every later start refused it as a foreign edit)."""
    repo = loop.root
    res = run_loop(repo, "--profile", "full", env={"DISTILL_FAULT": "setup.journal.written"})
    assert res.returncode == -9 and git(repo, "status", "--porcelain", "--", "params.yaml")  # written, not committed
    res = run_loop(repo, "promote", "gen999")  # any command: the journal is completed first
    assert "completed the commit interrupted by a kill: params: profile full" in res.stdout
    assert git(repo, "log", "-1", "--format=%s").strip() == "params: profile full"
    assert git(repo, "status", "--porcelain", "--untracked-files=no") == ""
    assert (
        load_params(repo / "params.yaml").profiles["full"]["loop"]["max_generations"]
        == load_params(repo / "params.yaml").loop.max_generations
    )


def _edit_params(repo: Path, **sections: dict) -> None:
    """A hand edit of params.yaml: the values of ``sections`` (section -> key -> value) changed."""
    params = safe_yaml().load((repo / "params.yaml").read_text())
    for section, values in sections.items():
        params[section].update(values)
    (repo / "params.yaml").write_text(yaml_text(params))


def test_hand_edit_of_params_between_attempts_is_its_own_commit(loop: Loop):
    """params.yaml edited by hand with no attempt in flight: validated, then committed alone as
    ``params: <changes>``; a bad edit is named and nothing committed; with another tracked file
    changed nothing is committed and the tree is refused."""
    repo = loop.root
    head = git(repo, "rev-parse", "HEAD")
    _edit_params(repo, train={"epocs": 3})
    with pytest.raises(ParamsError, match=r"params\.yaml:\d+: train\.epocs: unknown key; did you mean 'epochs'\?"):
        loop.commit_params_edit(loop.load_state())
    assert git(repo, "rev-parse", "HEAD") == head
    git(repo, "checkout", "params.yaml")
    _edit_params(repo, train={"epochs": 3}, export={"games": 8})
    (repo / "README.md").write_text("edited by a human\n")
    assert loop.commit_params_edit(loop.load_state()) is None and git(repo, "rev-parse", "HEAD") == head
    with pytest.raises(LoopError, match=r"did not make:\n  README\.md\n"):
        loop.check_tree(loop.load_state())
    git(repo, "checkout", "README.md")
    subject = loop.commit_params_edit(loop.load_state())
    assert subject == "params: train.epochs 2 -> 3, export.games 12 -> 8"
    assert git(repo, "log", "-1", "--format=%s").strip() == subject
    assert git(repo, "show", "--name-only", "--format=", "HEAD").split() == ["params.yaml"]
    assert "export.games 12 -> 8" in git(repo, "log", "-1", "--format=%b")
    assert git(repo, "status", "--porcelain", "--untracked-files=no") == ""
    loop.check_tree(loop.load_state())  # nothing left to refuse
    assert loop.commit_params_edit(loop.load_state()) is None  # nothing left to commit


def test_params_edited_in_flight_is_refused_naming_the_command_that_resumes_with_it(loop: Loop):
    repo = loop.root
    flight = loop.begin(loop.load_state())
    _edit_params(repo, train={"epochs": 5})
    assert loop.commit_params_edit(loop.load_state()) is None  # in flight: never committed by the loop
    with pytest.raises(LoopError) as e:
        loop.check_tree(loop.load_state())
    said = str(e.value)
    assert f"edited while attempt {flight.attempt_id} is in flight (train.epochs 2 -> 5)" in said, said
    command = said.split("To resume it with your edit: ", 1)[1].split(" && python loop.py", 1)[0]
    assert command == "git commit -m 'params: train.epochs 2 -> 5' params.yaml"
    subprocess.run(command, shell=True, cwd=repo, check=True, capture_output=True)  # the command, as a user runs it
    loop.check_tree(loop.load_state())
    resumed = loop.begin(loop.load_state())
    assert resumed.attempt_id == flight.attempt_id and load_params(repo / "params.yaml").train.epochs == 5


def test_kill_at_every_seam_of_a_params_edit_commit(loop: Loop, tmp_path: Path):
    """The seams a start reaches while committing a hand edit (recorded, not hand-kept): killed at
    each, the next start makes the same one commit."""
    repo = loop.root
    base = git(repo, "rev-parse", "HEAD").strip()
    log = tmp_path / "seams.log"
    _edit_params(repo, train={"epochs": 3})
    res = run_loop(repo, "promote", "gen999", env={"DISTILL_SEAMS_LOG": str(log)})  # commits the edit, then refuses
    assert res.returncode == 2 and "gen999" in res.stderr and "committed your edit of params.yaml" in res.stdout, res.stderr
    want = git(repo, "log", "--format=%s%n%b", f"{base}..HEAD")
    seams = [s for s in log.read_text().split() if s.startswith("setup.")]
    assert {"setup.params_edit", "setup.journal.written"} <= set(seams)
    for seam in seams:
        git(repo, "reset", "-q", "--hard", base)
        _edit_params(repo, train={"epochs": 3})
        res = run_loop(repo, "promote", "gen999", env={"DISTILL_FAULT": seam})
        assert res.returncode == -9, (seam, res.stdout[-2000:] + res.stderr[-2000:])
        res = run_loop(repo, "promote", "gen999")
        assert res.returncode == 2 and "gen999" in res.stderr, res.stderr
        assert git(repo, "log", "--format=%s%n%b", f"{base}..HEAD") == want, seam
        assert git(repo, "status", "--porcelain", "--untracked-files=no") == "", seam


def test_dvc_status_asked_in_process_is_what_dvc_status_prints(reference_run):
    """``pipeline_status`` (DVC's API, in the loop's process) answers as ``dvc status --json``
    run in the repository does, from another working directory: nothing after a run, the stages
    that read a hand-edited value after the edit."""
    repo = reference_run[0]
    assert pipeline_status(repo) == json.loads(_dvc(repo, "status", "--json")) == {}
    _edit_params(repo, train={"epochs": tiny_params()["train"]["epochs"] + 1})
    got = pipeline_status(repo)
    assert got == json.loads(_dvc(repo, "status", "--json")) and "train" in got and "teacher" not in got


def test_a_resumed_attempt_asks_dvc_once_for_the_stages_already_done(loop: Loop, monkeypatch):
    """A resumed attempt skips the stages before the first one DVC's status finds changed: no
    ``dvc repro`` for them, their seams still passed in order; a new attempt asks for every stage."""
    flight = loop.begin(loop.load_state())
    stages = loop.stages()
    flight.stage_wall_s = {stages[0]: 1.0}  # a stage of it ran before the kill
    calls: list[list[str]] = []
    seams: list[str] = []
    status = {stages[2]: [{"changed deps": {"params.yaml": "modified"}}]}  # the third stage changed

    def dvc_status(root: Path) -> dict:
        calls.append(["status"])
        return dict(status)

    def run_timed(cmd: list[str]) -> tuple[str, dict[str, float]]:
        calls.append(cmd[3:])
        return "", {}

    monkeypatch.setattr("ml.driver.steps.pipeline_status", dvc_status)
    monkeypatch.setattr(loop, "run_timed", run_timed)
    atomic_write_json(loop.path("metrics/selfplay.json"), {"selfplay/aborted": None})  # as a self-play stage leaves it
    monkeypatch.setattr(loop, "seam", seams.append)
    loop.repro(flight, resumed=True)
    assert calls == [["status"], *(["repro", "--single-item", s] for s in stages[2:])]
    assert seams == [x for s in stages for x in (f"repro.{s}", f"repro.{s}.done")]
    calls.clear()
    loop.repro(flight)
    assert calls == [["repro", "--single-item", s] for s in stages]
    status.clear()  # all up to date: nothing run
    calls.clear()
    loop.repro(flight, resumed=True)
    assert calls == [["status"]]
    flight.stage_wall_s = {}  # killed before any stage ran: no status call, every stage asked
    calls.clear()
    loop.repro(flight, resumed=True)
    assert calls == [["repro", "--single-item", s] for s in stages]
