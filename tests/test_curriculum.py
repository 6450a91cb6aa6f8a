"""Curriculum phases in a temporary copy of the project (real DVC and git).

Checks: a three-phase curriculum (ungated warm-up, gated self-play, gated gauntlet against
the self-play phase's model) runs to the end: one commit per attempt with the phase in the
message; `dvc params diff` between the first attempts of two phases shows the second
phase's overrides; the gauntlet's self-play opponent is resolved at run time to the
frozen agent that passed the self-play phase; `curriculum_state.json` logs every attempt with
its phase and overrides; `abort_if` ends an attempt early as a failed attempt with the
reason (and no `nan` in its subject); phase validation errors name the phase.

Issue #12, items 9-12: a seed checkpoint's weights start the student (it differs from an
unseeded one and starts at the seed's holdout accuracy), and one of another shape is refused
before anything is committed; a phase's overrides and the suggester's nudges never outlive
the phase, nudged values are never taken for a phase's base, and params.yaml after the
curriculum equals the base; commit messages tell phase params from suggester nudges; in a
real run, a bad phase key stops loop.py before any attempt, `--skip-to-next-stage` into a
gauntlet whose previous phase passed no model plays the heuristic teacher and says so, and
out of the last phase ends the run `done` with the right advice.

The walkthrough's items, in process: after a three-phase curriculum (with a seed checkpoint and
a suggester's nudge) params.yaml is byte for byte the file before it, the `run` section apart,
whether its lists are indented under their key or not (no `init_checkpoint:`, `abort_if:` or
`frozen_names:` left behind, no re-indented curriculum) (5); a text file given to
`--seed-checkpoint` is refused in one line, without torch's `weights_only` advice (8); the
note that a gauntlet plays the heuristic teacher is said once, by the override (9).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import torch

from ml.config.curriculum import FALLBACK_OPPONENT_MIX, Phase, opponent_fallback, phase_overrides
from ml.config.params import ParamsError, load_params, params_from_dict
from ml.config.yaml_file import safe_yaml
from ml.driver.messages import attempt_message
from ml.driver.model_commands import seed_checkpoint
from ml.driver.orchestrator import Loop
from ml.driver.params_file import attempt_params_text
from ml.driver.phases import enter_phase, queue_seed_checkpoint
from ml.driver.state import AttemptLog, LoopState
from ml.driver.transitions import after_attempt, after_override
from ml.driver.workspace import LoopError
from ml.model.policy import load_policy
from tests.conftest import ROOT, attempt_commits, git, make_project_copy, run_loop, tiny_params, yaml_text

# Tiny agents are no match for the heuristic teacher, and in 4-pods hardly for random players
# either: this test plays 2-player pods and gates against a random player (parity 0.5).
EASY_GATE = {
    "opponent": "random",
    "target_win_rate": 0.6,
    "alpha": 0.2,
    "beta": 0.2,
    "min_games": 8,
    "max_games": 80,
    "student_games": 8,
    "student_min_games": 8,
    "student_margin": 0.45,  # 8 games cannot tell a fall back of 0.05: reject only a student that almost never wins
}
CURRICULUM = [
    {"name": "warmup", "generations": 1, "gated": False, "overrides": {"selfplay": {"opponent_mix": {"random": 1.0}}}},
    {"name": "selfplay", "generations": 1, "gated": True,
     "overrides": {"selfplay": {"ent_coef": 0.02, "opponent_mix": {"random": 0.8, "self": 0.2}}, "gate": EASY_GATE}},
    {"name": "gauntlet", "generations": 1, "gated": True, "opponent": "previous_phase", "overrides": {"gate": EASY_GATE}},
]  # fmt: skip


def dvc(repo: Path, *args: str) -> str:
    env = {**os.environ, "DVC_NO_ANALYTICS": "1"}
    return subprocess.run(
        [sys.executable, "-m", "dvc", *args], cwd=repo, env=env, check=True, capture_output=True, text=True
    ).stdout


@pytest.mark.expensive
def test_three_phase_curriculum(tmp_path: Path):
    params = tiny_params({"game": {"pod_size": 2}, "loop": {"max_generations": 9, "max_retries": 6}})
    params["gate"].update(target_win_rate=0.6)
    params["curriculum"] = CURRICULUM
    repo = make_project_copy(tmp_path / "repo", params)
    res = run_loop(repo)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    assert "curriculum finished (3 phases)" in res.stdout
    subjects = git(repo, "log", "--reverse", "--format=%H %s", "--grep=Attempt-Id:").splitlines()
    attempts = [line.split(" ", 1) for line in subjects if " attempt " in line]
    phases = [s.split("| phase ")[1].split(" ")[0] for _, s in attempts]
    assert phases[0] == "warmup" and phases[-1] == "gauntlet" and "selfplay" in phases
    assert phases == sorted(phases, key=["warmup", "selfplay", "gauntlet"].index)  # in order, retries allowed
    first = {p: sha for (sha, _), p in reversed(list(zip(attempts, phases, strict=True)))}
    diff = dvc(repo, "params", "diff", first["warmup"], first["selfplay"])
    assert "selfplay.ent_coef" in diff and "gate.gated" in diff and "selfplay.opponent_mix" in diff
    gauntlet = safe_yaml().load(git(repo, "show", f"{first['gauntlet']}:params.yaml"))
    assert gauntlet["selfplay"]["frozen_names"] == ["gen001"] and gauntlet["selfplay"]["opponent_mix"] == {"frozen": 1.0}
    assert gauntlet["selfplay"]["ent_coef"] == 0.01  # the self-play phase's override was restored
    state = json.loads((repo / "state/curriculum_state.json").read_text())
    assert state["status"] == "done" and state["phase_winners"] == {
        "warmup": "gen000",
        "selfplay": "gen001",
        "gauntlet": "gen002",
    }
    log_phases = [e["phase"] for e in state["log"] if e["verdict"] != "override"]
    assert log_phases == phases
    assert state["log"][1]["overrides"]["selfplay.ent_coef"] == 0.02 or "selfplay.ent_coef" in state["log"][1]["overrides"]


@pytest.mark.expensive
def test_abort_if_fails_the_attempt(tmp_path: Path):
    params = tiny_params({"loop": {"max_generations": 1, "max_retries": 0}})
    params["curriculum"] = [
        {"name": "doomed", "generations": 1, "abort_if": {"metric": "train_win_rate", "below": 1.01, "at_steps": 100}}
    ]
    repo = make_project_copy(tmp_path / "repo", params)
    res = run_loop(repo)
    assert res.returncode == 3 and "ABORTED" in res.stdout and "BLOCKED" in res.stdout, res.stdout[-2000:]
    state = json.loads((repo / "state/curriculum_state.json").read_text())
    entry = state["log"][0]
    assert entry["verdict"] == "aborted" and entry["reasons"][0].startswith("abort_if: selfplay/train_win_rate")
    subject = git(repo, "log", "-1", "--format=%s")
    assert "attempt 1: aborted | phase doomed | abort_if: selfplay/train_win_rate" in subject and "nan" not in subject


def test_phase_rules():
    with pytest.raises(ParamsError, match="curriculum"):
        params_from_dict({"curriculum": [{"name": "x", "generations": 0}]})
    with pytest.raises(ParamsError, match="must exceed parity"):
        params_from_dict({"game": {"pod_size": 2}, "gate": {"target_win_rate": 0.35}})
    with pytest.raises(ParamsError, match="may not override"):
        params_from_dict({"curriculum": [{"name": "x", "generations": 1, "overrides": {"run": {"seed": 1}}}]})
    gauntlet = Phase(name="g", generations=1, opponent="previous_phase")
    out = phase_overrides(gauntlet, "gen004")
    assert out["selfplay"]["frozen_names"] == ["gen004"] and out["gate"]["gated"] is True
    assert opponent_fallback(gauntlet, "sp", "gen004") is None
    # the previous phase was skipped and passed no model: the heuristic teacher, and a note that says so
    out = phase_overrides(gauntlet, None)
    assert out["selfplay"]["opponent_mix"] == FALLBACK_OPPONENT_MIX and out["selfplay"]["frozen_names"] is None
    assert "phase 'sp' passed none" in opponent_fallback(gauntlet, "sp", None)


@pytest.mark.expensive
def test_push_fails_once_then_works(tmp_path: Path):
    from ml.driver.orchestrator import Loop

    repo = make_project_copy(tmp_path / "repo", tiny_params())
    store, bare = tmp_path / "dvc-store", tmp_path / "remote.git"
    git(repo, "remote", "add", "origin", str(bare))  # does not exist yet: the first push fails
    dvc(repo, "remote", "add", "-d", "local", str(store))
    git(repo, "commit", "-qam", "remotes")
    (repo / "data").mkdir(exist_ok=True)
    (repo / "data/pool").mkdir()
    (repo / "data/pool/x.txt").write_text("payload\n")
    dvc(repo, "add", "data/pool")
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "data")
    messages: list[str] = []
    loop = Loop(repo, echo=messages.append)
    assert loop.push(tries=2, backoff_s=0.01) is False
    assert [m.split(":")[0] for m in messages if "push failed" in m] == [
        "push failed (try 1/2)",
        "push failed (try 2/2)",
        "push failed",
    ]
    assert (repo / ".dvc/tmp/loop/push-pending").exists()
    subprocess.run(["git", "init", "-q", "--bare", str(bare)], check=True)
    assert loop.push(tries=2, backoff_s=0.01) is True
    assert not (repo / ".dvc/tmp/loop/push-pending").exists()
    assert git(bare, "log", "-1", "--format=%s", "main").strip() == "data"
    assert any(store.rglob("*")), "the DVC data reached the remote store"


def test_commit_message_labels_and_aborted_subject():
    aborted = AttemptLog(attempt_id="x-gen000-a1", generation=0, attempt=1, verdict="aborted", phase="doomed",
                         reasons=["abort_if: selfplay/train_win_rate 0.1 < 0.2 after 100 steps"])  # fmt: skip
    subject = attempt_message(aborted, {}, {}).splitlines()[0]
    assert subject == "gen 000 attempt 1: aborted | phase doomed | abort_if: selfplay/train_win_rate 0.1 < 0.2 after 100 steps"
    figures = {
        "win_rate": 0.3,
        "win_rate_low": 0.2,
        "win_rate_high": 0.4,
        "holdout_accuracy": 0.8,
        "holdout_accuracy_drop": 0.01,
    }
    first = AttemptLog(
        attempt_id="x-gen001-a1", generation=1, attempt=1, verdict="rejected", phase="gauntlet", figures=figures
    )
    body = attempt_message(first, {"selfplay.ent_coef": 0.01, "gate.gated": True}, {"selfplay.learner_decisions": 900})
    assert "params set on entering phase gauntlet: selfplay.ent_coef = 0.01, gate.gated = True" in body
    assert (
        "suggester for this attempt" not in body and "next attempt's params nudged: selfplay.learner_decisions = 900" in body
    )
    retry = first.model_copy(update={"attempt": 2, "attempt_id": "x-gen001-a2"})
    body = attempt_message(retry, {"selfplay.learner_decisions": 900}, {})
    assert (
        "params nudged by the suggester for this attempt: selfplay.learner_decisions = 900" in body and "entering" not in body
    )


def test_seeded_student_starts_from_the_seed(tmp_path: Path):
    """Item 9: the same generation, seed and data with and without a seed checkpoint."""
    from stages import teacher, train

    params = tiny_params()
    (tmp_path / "params.yaml").write_text(yaml_text(params))
    common = ["--params", str(tmp_path / "params.yaml"), "--no-progress"]
    assert teacher.main([*common, "--out", str(tmp_path / "teacher"), "--metrics", str(tmp_path / "teacher.json")]) == 0
    (tmp_path / "pool").mkdir()

    def student(name: str, params_file: Path) -> tuple[dict, dict]:
        args = ["--params", str(params_file), "--no-progress", "--teacher", str(tmp_path / "teacher"), "--pool",
                str(tmp_path / "pool"), "--out", str(tmp_path / f"{name}.pt"), "--metrics", str(tmp_path / f"{name}.json")]  # fmt: skip
        assert train.main(args) == 0
        return json.loads((tmp_path / f"{name}.json").read_text()), load_policy(tmp_path / f"{name}.pt")[0].state_dict()

    unseeded, unseeded_weights = student("unseeded", tmp_path / "params.yaml")
    params["train"]["init_checkpoint"] = str(tmp_path / "unseeded.pt")  # the seed: a student trained on the same data
    (tmp_path / "seeded.yaml").write_text(yaml_text(params))
    seeded, seeded_weights = student("seeded", tmp_path / "seeded.yaml")
    assert seeded["train/init_holdout_accuracy"] == unseeded["train/holdout_accuracy"]  # starts where the seed is
    assert unseeded["train/init_holdout_accuracy"] != unseeded["train/holdout_accuracy"]  # a random init does not
    assert any(not torch.equal(a, b) for a, b in zip(seeded_weights.values(), unseeded_weights.values(), strict=True))
    assert seeded["train/loss"] != unseeded["train/loss"]


def _attempt(loop: Loop, state: LoopState, generation: int, attempt: int) -> tuple[LoopState, dict]:
    """What ``begin`` does with the queued params (without running the stages): the state and the attempt's params."""
    state = enter_phase(loop, state, load_params(loop.path("params.yaml")))
    path = loop.path("params.yaml")
    path.write_text(attempt_params_text(path, generation, attempt, state.nudges))
    state.nudges, state.generation, state.attempt = {}, generation, attempt
    return state, load_params(path).model_dump(mode="json", exclude={"run"})


@pytest.mark.expensive
def test_phase_params_never_outlive_the_phase(tmp_path: Path):
    """Item 11, on the state machine alone: phase A is entered, its retry nudged, then B, then the end."""
    params = tiny_params()
    params["curriculum"] = [
        {"name": "a", "generations": 1, "overrides": {"selfplay": {"ent_coef": 0.02}}},
        {"name": "b", "generations": 1, "opponent": "previous_phase", "overrides": {"selfplay": {"learner_decisions": 1200}}},
    ]
    repo = make_project_copy(tmp_path / "repo", params)
    base = load_params(repo / "params.yaml").model_dump(mode="json", exclude={"run"})
    loop, state = Loop(repo, echo=lambda _: None), LoopState()
    state, a1 = _attempt(loop, state, 0, 1)
    assert a1["selfplay"]["ent_coef"] == 0.02 and a1["selfplay"]["learner_decisions"] == 600
    state.nudges = {"selfplay.learner_decisions": 900, "train.source_weights.ppo": 0.35}  # the suggester, after a1's rejection
    state, a2 = _attempt(loop, state, 0, 2)
    assert a2["selfplay"]["learner_decisions"] == 900 and a2["train"]["source_weights"]["ppo"] == 0.35
    state.phase, state.phase_winners = 1, {"a": "gen000"}  # a2 accepted: phase b
    state, b1 = _attempt(loop, state, 1, 1)
    assert b1["train"]["source_weights"] == base["train"]["source_weights"] and b1["selfplay"]["ent_coef"] == 0.01
    assert (
        b1["selfplay"]["learner_decisions"] == 1200 and state.phase_restore["selfplay.learner_decisions"] == 600
    )  # base, not a's 900
    assert b1["selfplay"]["frozen_names"] == ["gen000"] and b1["selfplay"]["opponent_mix"] == {"frozen": 1.0}
    state.phase = 2  # b passed: the curriculum is over
    state = enter_phase(loop, state, load_params(repo / "params.yaml"))
    assert load_params(repo / "params.yaml").model_dump(mode="json", exclude={"run"}) == base
    assert git(repo, "log", "-1", "--format=%s").startswith("curriculum finished: params.yaml back to its base values")
    assert state.phase_restore == {} and git(repo, "status", "--porcelain") == ""
    enter_phase(loop, state, load_params(repo / "params.yaml"))  # once only
    assert git(repo, "log", "-1", "--format=%s").startswith("curriculum finished")
    assert len(git(repo, "log", "--format=%s").splitlines()) == 2


@pytest.mark.expensive
def test_human_overrides_leave_a_running_state(tmp_path: Path):
    """Items 10-12 in a real run: a bad phase key, then a blocked phase skipped into a gauntlet
    that has no model to play, then the gauntlet blocked and skipped: the end of the curriculum."""
    params = tiny_params({"loop": {"max_generations": 9, "max_retries": 1}})
    hopeless = {"target_win_rate": 0.99, "gated": True}
    params["curriculum"] = [
        {"name": "selfplay", "generations": 1, "overrides": {"gate": hopeless, "selfplay": {"totl_steps": 500}}},
        {"name": "gauntlet", "generations": 1, "opponent": "previous_phase",
         "overrides": {"gate": hopeless, "loop": {"max_retries": 0}}},
    ]  # fmt: skip
    repo = make_project_copy(tmp_path / "repo", params)
    res = run_loop(repo)  # item 12: refused at load, naming the phase; nothing in flight
    assert res.returncode == 2 and "curriculum.0 (phase 'selfplay'): selfplay.totl_steps" in res.stderr, res.stderr[-2000:]
    assert not (repo / "state/curriculum_state.json").exists()
    del params["curriculum"][0]["overrides"]["selfplay"]
    (repo / "params.yaml").write_text(yaml_text(params))
    git(repo, "commit", "-qam", "fix the phase")
    base = load_params(repo / "params.yaml").model_dump(mode="json", exclude={"run"})

    res = run_loop(repo)  # the fixed params run: selfplay rejected, nudged, rejected again: blocked
    assert res.returncode == 3 and "BLOCKED" in res.stdout, res.stdout[-3000:] + res.stderr[-3000:]
    (a1, _), (a2, _) = attempt_commits(repo)
    assert "params set on entering phase selfplay: gate.target_win_rate = 0.99" in git(repo, "log", "-1", "--format=%B", a1)
    assert "params nudged by the suggester for this attempt: selfplay.learner_decisions = 900" in git(
        repo, "log", "-1", "--format=%B", a2
    )

    res = run_loop(repo, "--skip-to-next-stage")  # item 10: into a gauntlet with no model to play
    assert res.returncode == 3 and "heuristic teacher instead" in res.stdout, res.stdout[-3000:] + res.stderr[-3000:]
    g1 = attempt_commits(repo)[2][0]
    gauntlet = safe_yaml().load(git(repo, "show", f"{g1}:params.yaml"))
    assert gauntlet["selfplay"]["opponent_mix"] == FALLBACK_OPPONENT_MIX and gauntlet["selfplay"]["frozen_names"] is None
    assert gauntlet["selfplay"]["learner_decisions"] == 600 and gauntlet["selfplay"]["ent_coef"] == 0.01  # item 11: no leak
    assert "phase 'selfplay' passed none" in git(repo, "log", "--format=%B", "--grep=override: skip-to-next-stage")

    res = run_loop(repo, "--skip-to-next-stage")  # out of the last phase: done, params.yaml back to the base
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    done = [line for line in res.stdout.splitlines() if line.startswith("done:")]
    assert done == [
        "done: curriculum finished (2 phases); the last phase, 'gauntlet', left by --skip-to-next-stage. "
        "Append a phase to `curriculum` in params.yaml to go on."
    ]
    state = json.loads((repo / "state/curriculum_state.json").read_text())
    assert state["status"] == "done" and state["phase_restore"] == {}
    assert load_params(repo / "params.yaml").model_dump(mode="json", exclude={"run"}) == base
    assert git(repo, "status", "--porcelain") == ""
    head = git(repo, "rev-parse", "HEAD")
    assert run_loop(repo).returncode == 0 and git(repo, "rev-parse", "HEAD") == head  # nothing more to do


@pytest.mark.expensive
def test_seed_checkpoint_of_another_shape_is_refused(tmp_path: Path):
    from ml.game.commander.encoding import OBS_DIM
    from ml.model.policy import PolicyNet, save_policy

    repo = make_project_copy(tmp_path / "repo", tiny_params())  # train.hidden_sizes [32]
    save_policy(PolicyNet(OBS_DIM, (8,)), tmp_path / "seed.pt")
    res = run_loop(repo, "--seed-checkpoint", str(tmp_path / "seed.pt"))
    assert res.returncode == 2 and "has hidden sizes [8], but the first phase's students" in res.stderr, res.stderr[-2000:]
    assert len(git(repo, "log", "--format=%s").splitlines()) == 1 and not (repo / "data/seed/seed.pt").exists()


class _Loop:
    """What the curriculum's side effects use of ``Loop``, in a folder: no git, no DVC, no process."""

    def __init__(self, root: Path) -> None:
        self.root, self.said, self.commits, self.state = root, [], [], LoopState()

    def echo(self, message: str) -> None:
        self.said.append(message)

    def path(self, rel: str) -> Path:
        return self.root / rel

    @contextmanager
    def committing(self, message: str, paths: list[str], dvc_add: tuple[str, ...] = ()) -> Iterator[dict]:
        self.commits.append(message)
        yield {}

    def save_state(self, state: LoopState) -> None:
        self.state = state

    def load_state(self) -> LoopState:
        return self.state


PHASES_TEXT = """curriculum:
  - name: warmup                 # ungated: trains, exports, commits, always advances
    generations: 1
    gated: false
    overrides:
      selfplay: {opponent_mix: {random: 1.0}, learner_decisions: 100000}
  - name: selfplay               # gated: the usual gate, retries, blocking
    generations: 1
    overrides:
      selfplay: {opponent_mix: {teacher: 0.5, frozen: 0.3, self: 0.2}, ent_coef: 0.02}
      train: {ppo_window: 2}
    abort_if: {metric: train_win_rate, below: 0.2, at_steps: 100000}
  - name: gauntlet               # self-play only against the model that passed `selfplay`
    generations: 1
    opponent: previous_phase
"""


def _without_run(text: str) -> str:
    lines, out, skip = text.splitlines(keepends=True), [], False
    for line in lines:
        if line[:1].strip():
            skip = line.startswith("run:")
        out.append("" if skip else line)
    return "".join(out)


@pytest.mark.parametrize("style", ["repo", "safe_dump"])
def test_params_after_the_curriculum_are_byte_identical(tmp_path: Path, style: str):
    """Item 5: keys a phase added stayed (``init_checkpoint:``, ``abort_if:``, ``frozen_names:``)
    and the curriculum list was re-indented, so ``dvc status`` was not clean afterwards."""
    path = tmp_path / "params.yaml"
    if style == "repo":  # comments, flow style, lists at their key's indentation (as DVC writes them back)
        path.write_text((ROOT / "params.yaml").read_text() + PHASES_TEXT.replace("\n  ", "\n"))
    else:  # PyYAML's style: lists at their key's indentation
        path.write_text(yaml_text({**tiny_params(), **safe_yaml().load(PHASES_TEXT)}))
    before, base = path.read_text(), load_params(path)
    loop, state = _Loop(tmp_path), LoopState()
    queue_seed_checkpoint(state, load_params(path), "data/seed/seed.pt")  # --seed-checkpoint on the fresh run
    attempts = [(0, 1, True), (1, 1, False), (1, 2, True), (2, 1, True)]  # selfplay's first attempt rejected
    for generation, attempt, accepted in attempts:
        state = enter_phase(loop, state, load_params(path))
        path.write_text(attempt_params_text(path, generation, attempt, state.nudges))
        params = load_params(path)
        state.nudges = {}
        if state.phase_name == "warmup":
            assert params.train.init_checkpoint == "data/seed/seed.pt" and params.selfplay.learner_decisions == 100000
        if state.phase_name == "gauntlet":
            assert params.selfplay.frozen_names == ["gen001"] and params.train.init_checkpoint is None
            assert (
                params.selfplay.learner_decisions == base.selfplay.learner_decisions
                and params.train.ppo_window == base.train.ppo_window
            )  # restored
        state = after_attempt(state, generation, attempt, accepted, params, [])
        if not accepted:
            state.nudges = {"selfplay.learner_decisions": 250_000}  # the suggester, for the retry
    assert state.phase == 3
    state = enter_phase(loop, state, load_params(path))  # the end: base values back
    after = path.read_text()
    assert _without_run(after) == _without_run(before)
    assert after != before and state.phase_restore == {}  # the run section is the last attempt's
    assert len(loop.commits) == 1 and "- selfplay.frozen_names: ['gen001'] -> <absent from params.yaml>" in loop.commits[0]


def test_seed_checkpoint_not_a_checkpoint(tmp_path: Path):
    """Item 8: a text file gave torch's advice to load it with ``weights_only=False``."""
    (tmp_path / "params.yaml").write_text(yaml_text(tiny_params()))
    (tmp_path / "notes.txt").write_text("not a model\n")
    with pytest.raises(LoopError) as e:
        seed_checkpoint(_Loop(tmp_path), tmp_path / "notes.txt")
    message = str(e.value)
    assert message.startswith(f"--seed-checkpoint {tmp_path / 'notes.txt'}: not a checkpoint written by this project (")
    assert "\n" not in message and "weights_only" not in message and message.endswith(")")


def test_fallback_note_said_once(tmp_path: Path):
    """Item 9: ``--skip-to-next-stage`` printed the note, and entering the phase printed it again."""
    params = params_from_dict({**tiny_params(), "curriculum": [
        {"name": "selfplay", "generations": 1}, {"name": "gauntlet", "generations": 1, "opponent": "previous_phase"}]})  # fmt: skip
    blocked = LoopState(status="blocked", failures=3, phase_name="selfplay", entered_phase=0)
    state, note = after_override(blocked, params, True, [])
    assert note and "heuristic teacher instead" in note
    state.log.append(AttemptLog(attempt_id="x-override", generation=0, attempt=3, verdict="override",
                                reasons=["skip-to-next-stage", note]))  # fmt: skip
    loop = _Loop(tmp_path)
    entered = enter_phase(loop, state, params)
    assert entered.phase_name == "gauntlet" and loop.said == []  # the override said it
    state.log.clear()  # no override said it (a state from elsewhere): entering the phase does
    enter_phase(loop, state, params)
    assert loop.said == [note]
