"""What a user sees of a running stage when the output is a file or a pipe (issue #12, item 13).

Checks: a disabled progress bar (stderr not a terminal) logs a line with done/total, the
rate and the time left at most every ``line_every_s`` seconds and a last line when it
closes, none while the bar draws or with the interval 0, and ``$DISTILL_PROGRESS_EVERY_S``
sets the interval (a bad value is named); the teacher and train stages run with stderr on
a pipe print such lines, and train's "renormalising" note comes once, not once per epoch;
``DvcOutputFilter`` on output captured from a real DVC 3.67.1 drops DVC's git/autostage/
push hints, says the "is empty" warnings once per path in one summary line and passes the
stage's lines, DVC's stage lines and its errors through; ``Workspace.run(stream=True)``
filters a command's output that way, names an empty path once per loop and keeps the
errors of a failed command in its ``LoopError``; ``heartbeat`` (issue #42, item 2: numba's first
compile) logs what runs and the time so far every interval while a block runs, none after it ends,
also when it raises, and none for a block shorter than the interval.
"""

from __future__ import annotations

import io
import json
import logging
import os
import re
import subprocess
import sys
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from ml.base import progress
from ml.base.progress import (
    LINE_EVERY_ENV,
    PROGRESS_FILE_ENV,
    ProgressBar,
    counted,
    heartbeat,
    line_interval_s,
    progress_line,
)
from ml.data.decisions import sample_mixture
from ml.driver.dvc_output import DvcOutputFilter
from ml.driver.workspace import DVC, LoopError, Workspace
from ml.judge.sequential import stop_reason
from tests.conftest import ROOT, Pipeline, git, make_project_copy, tiny_params, yaml_text
from tests.test_dataset import _fake_set

# `dvc repro --single-item teacher` then `train` in a repo whose data/pool, data/seed and
# data/frozen are `dvc add`-ed empty folders, stdout and stderr on one pipe, as loop.py runs it
# (DVC 3.67.1; the stage commands were `sh t.sh` and `sh u.sh`).
DVC_TEACHER = """\
WARNING: 'data/pool' is empty.
WARNING: 'data/seed' is empty.
WARNING: 'data/frozen' is empty.
WARNING: 'data/pool' is empty.
WARNING: 'data/seed' is empty.
WARNING: 'data/frozen' is empty.
Running stage 'teacher':
> sh t.sh
2026 teacher INFO teacher: 3 games
WARNING: 'data/pool' is empty.
WARNING: 'data/seed' is empty.
WARNING: 'data/frozen' is empty.
Generating lock file 'dvc.lock'
Updating lock file 'dvc.lock'

To track the changes with git, run:

\tgit add dvc.lock data/models/.gitignore

To enable auto staging, run:

\tdvc config core.autostage true
Use `dvc push` to send your updates to remote storage.
"""
DVC_TRAIN = """\
WARNING: 'data/pool' is empty.
WARNING: 'data/frozen' is empty.
WARNING: 'data/pool' is empty.
WARNING: 'data/frozen' is empty.
Running stage 'train':
> sh u.sh
WARNING: 'data/pool' is empty.
WARNING: 'data/frozen' is empty.
WARNING: 'data/merged/pool' is empty.
Updating lock file 'dvc.lock'

To track the changes with git, run:

\tgit add data/merged/.gitignore dvc.lock data/models/.gitignore

To enable auto staging, run:

\tdvc config core.autostage true
Use `dvc push` to send your updates to remote storage.
"""
DVC_FAILED = """\
WARNING: 'data/pool' is empty.
WARNING: 'data/frozen' is empty.
Running stage 'train':
> sh u.sh
boom
ERROR: failed to reproduce 'train': failed to run: sh u.sh, exited with 3
"""
HINTS = ("To track the changes", "git add", "auto staging", "autostage", "dvc push")
LINE = re.compile(r"(\w+): (\d+)/(\d+) (\w+) \(\d+%\), [0-9.]+ (?:\w+/s|s/\w+), \w+ elapsed")


# ---------------------------------------------------------------------------------------------- progress lines


class FakeClock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def _lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "ml.base.progress"]


def test_disabled_bar_logs_a_line_every_interval(monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture):
    clock = FakeClock()
    monkeypatch.setattr(progress, "_now", clock)
    caplog.set_level(logging.INFO, logger="ml.base.progress")
    bar = ProgressBar(range(10), desc="train", unit="epoch", disable=True, line_every_s=30.0)
    for _ in bar:
        clock.t += 10.0  # one epoch every 10 s
        bar.set_postfix(loss="0.512")
    bar.close()
    lines = _lines(caplog)
    # after epochs 3, 6 and 9 (30 s apart), then the last line when it closes
    assert lines == [
        "train: 3/10 epoch (30%), 10.0 s/epoch, 30s elapsed, ~1m10s left, loss=0.512",
        "train: 6/10 epoch (60%), 10.0 s/epoch, 1m00s elapsed, ~40s left, loss=0.512",
        "train: 9/10 epoch (90%), 10.0 s/epoch, 1m30s elapsed, ~10s left, loss=0.512",
        "train: 10/10 epoch (100%), 10.0 s/epoch, 1m40s elapsed, loss=0.512",
    ]


def test_update_counts_and_rates(monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture):
    clock = FakeClock()
    monkeypatch.setattr(progress, "_now", clock)
    caplog.set_level(logging.INFO, logger="ml.base.progress")
    with ProgressBar(total=50_000, desc="selfplay", unit="dec", disable=True, line_every_s=30.0) as bar:
        for _ in range(4):
            clock.t += 20.0
            bar.update(3000)
    assert _lines(caplog)[0] == "selfplay: 6000/50000 dec (12%), 150.0 dec/s, 40s elapsed, ~4m53s left"
    assert len(_lines(caplog)) == 2  # at 40 s and 80 s; the one at 80 s said where it ended: no repeat at close


@pytest.mark.parametrize("disable,every", [(False, 0.001), (True, 0.0)])
def test_no_lines_while_the_bar_draws_or_when_off(disable, every, monkeypatch, caplog):
    clock = FakeClock()
    monkeypatch.setattr(progress, "_now", clock)
    caplog.set_level(logging.INFO, logger="ml.base.progress")
    for _ in ProgressBar(range(5), desc="x", disable=disable, line_every_s=every, file=io.StringIO()):
        clock.t += 60.0
    assert _lines(caplog) == []


def test_short_run_says_nothing(caplog: pytest.LogCaptureFixture):
    caplog.set_level(logging.INFO, logger="ml.base.progress")
    for _ in ProgressBar(range(5), desc="x", disable=True, line_every_s=30.0):
        pass
    assert _lines(caplog) == []  # under the interval: no line, and so no last line


def test_interval_from_the_environment(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.delenv(LINE_EVERY_ENV, raising=False)
    assert line_interval_s() == progress.LINE_EVERY_S == 30.0
    monkeypatch.setenv(LINE_EVERY_ENV, "0.5")
    assert line_interval_s() == 0.5 and ProgressBar(range(2), disable=True)._line_every_s == 0.5
    for bad in ("fast", "-1", "nan"):
        monkeypatch.setenv(LINE_EVERY_ENV, bad)
        with pytest.raises(ValueError, match=LINE_EVERY_ENV):
            line_interval_s()


def test_progress_line_without_total():
    assert progress_line("eval", 12, None, "deal", 4.0) == "eval: 12 deal, 3.0 deal/s, 4s elapsed"
    assert progress_line("", 0, 10, "game", 0.0) == "progress: 0/10 game (0%), 0.0 game/s, 0s elapsed"


# ---------------------------------------------------------------------------------------------- heartbeat

BEAT = logging.getLogger("tests.heartbeat")


def _beats(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == BEAT.name]


def _slow_work(caplog: pytest.LogCaptureFixture, beats: int) -> None:
    """A slow fake of numba's compile: short sleeps until ``beats`` heartbeat lines came (at most a minute)."""
    deadline = time.monotonic() + 60.0  # a hang guard, not a speed check
    while len(_beats(caplog)) < beats and time.monotonic() < deadline:
        time.sleep(0.01)


def _heartbeat_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "heartbeat"]


def test_heartbeat_says_what_runs_and_for_how_long_until_it_ends(caplog: pytest.LogCaptureFixture):
    caplog.set_level(logging.INFO, logger=BEAT.name)
    with heartbeat(BEAT, "compiling the kernels once (numba; cached in /x)", every_s=0.05):
        _slow_work(caplog, beats=3)
    said = _beats(caplog)
    assert len(said) >= 3
    for k, record in enumerate(said, start=1):
        assert re.fullmatch(r"compiling the kernels once \(numba; cached in /x\): \d+s elapsed \.\.\.", record.getMessage())
        assert record.elapsed_s >= k * 0.05 - 1e-3  # the k-th line comes k intervals in, or later
    elapsed = [r.elapsed_s for r in said]
    assert elapsed == sorted(elapsed) and len(set(elapsed)) == len(elapsed)
    assert _heartbeat_threads() == []  # stopped and joined when the block ended
    time.sleep(0.2)  # four intervals more: nothing after the end
    assert len(_beats(caplog)) == len(said)


def test_heartbeat_stops_when_the_work_raises(caplog: pytest.LogCaptureFixture):
    caplog.set_level(logging.INFO, logger=BEAT.name)
    with pytest.raises(RuntimeError, match="no room"), heartbeat(BEAT, "compiling", every_s=0.05):
        _slow_work(caplog, beats=1)
        raise RuntimeError("no room for the cache")
    said = len(_beats(caplog))
    assert said >= 1 and _heartbeat_threads() == []
    time.sleep(0.2)
    assert len(_beats(caplog)) == said


@pytest.mark.parametrize("every", [60.0, 0.0])
def test_heartbeat_says_nothing_for_a_fast_block_or_when_off(every: float, caplog: pytest.LogCaptureFixture):
    caplog.set_level(logging.INFO, logger=BEAT.name)
    with heartbeat(BEAT, "loading the kernels", every_s=every):
        time.sleep(0.1 if every == 0 else 0.0)  # off: not even a block longer than nothing
    assert _beats(caplog) == [] and _heartbeat_threads() == []


def _last_draw(out: io.StringIO) -> str:
    """What a terminal shows of a tqdm bar drawn into ``out``: the text after its last carriage return."""
    return out.getvalue().rstrip("\n").rsplit("\r", 1)[-1]


def test_a_floor_total_follows_the_count_and_keeps_the_percentage(monkeypatch, caplog):
    """Self-play's total is a floor (its rounds finish the games in flight): 823 decisions of 600."""
    exact = io.StringIO()
    with ProgressBar(total=600, desc="selfplay", unit="dec", file=exact, mininterval=0, line_every_s=0) as bar:
        bar.update(823)
    assert "%" not in _last_draw(exact) and "823dec" in _last_draw(exact)  # tqdm past its total: `823dec [00:00, ...]`
    floor = io.StringIO()
    with ProgressBar(
        total=600, desc="selfplay", unit="dec", file=floor, mininterval=0, line_every_s=0, total_is_floor=True
    ) as bar:
        bar.update(410)
        assert "410/600" in _last_draw(floor) and "68%" in _last_draw(floor)
        bar.update(413)
    assert bar.total == 823 and "100%" in _last_draw(floor) and "823/823" in _last_draw(floor)
    clock = FakeClock()
    monkeypatch.setattr(progress, "_now", clock)
    caplog.set_level(logging.INFO, logger="ml.base.progress")
    with ProgressBar(total=600, desc="selfplay", unit="dec", disable=True, line_every_s=30.0, total_is_floor=True) as bar:
        for n in (410, 413):
            clock.t += 30.0
            bar.update(n)
    assert [line.split(",")[0] for line in _lines(caplog)] == [
        "selfplay: 410/600 dec (68%)", "selfplay: 823/823 dec (100%)",
    ]  # fmt: skip


def test_selfplay_bar_ends_at_100_percent_of_the_decisions_played(capsys: pytest.CaptureFixture):
    from ml.config.sections import SelfplayParams
    from ml.game.commander.encoding import OBS_DIM
    from ml.game.commander.spec import commander
    from ml.learn.ppo import train_ppo
    from ml.learn.settings import RunSettings
    from ml.model.policy import PolicyNet

    cfg = SelfplayParams(learner_decisions=300, num_envs=4, rollout_steps=150, lr=3e-4, gamma=0.99, gae_lambda=0.95, clip_coef=0.2,
                         ent_coef=0.01, vf_coef=0.5, max_grad_norm=0.5, update_epochs=1, minibatch_size=64,
                         opponent_mix={"teacher": 1.0}, rollout_chunks=2, workers=1)  # fmt: skip
    _, metrics = train_ppo(PolicyNet(OBS_DIM, (16,)), {}, cfg, commander(4, 30), RunSettings(5, progress=True))
    played = metrics["selfplay/decisions"]
    last = capsys.readouterr().err.rstrip("\n").rsplit("\r", 1)[-1]
    assert played > 300 and f"{played}/{played}" in last and "100%" in last, last  # the games in flight counted, not lost


def test_finish_says_why_a_bar_ended_early(monkeypatch, caplog, tmp_path: Path):
    note = "decided early: SPRT accepted H1 after 12 of 40 games"
    drawn = io.StringIO()
    bar = ProgressBar(total=10, desc="gate: strength", unit="deal", file=drawn, mininterval=0, line_every_s=0)
    bar.update(3)
    bar.finish(note)
    assert _last_draw(drawn).startswith("gate: strength:  30%") and _last_draw(drawn).endswith(note + "]")
    caplog.set_level(logging.INFO, logger="ml.base.progress")
    monkeypatch.setenv(PROGRESS_FILE_ENV, str(tmp_path / "progress.json"))
    bar = ProgressBar(total=10, desc="gate: strength", unit="deal", disable=True, line_every_s=30.0)
    bar.update(3)
    bar.finish(note)  # a short run logs no line along the way, but the reason it stopped, yes
    (line,) = _lines(caplog)
    assert line.startswith("gate: strength: 3/10 deal (30%), ") and line.endswith(", " + note)
    assert json.loads((tmp_path / "progress.json").read_text())["note"] == note  # the dashboard's status
    caplog.clear()
    ProgressBar(total=10, desc="x", disable=True, line_every_s=0.0).finish(note)
    assert _lines(caplog) == []  # an interval of 0 still turns the lines off


def test_counted_counts_the_last_item_a_consumer_takes():
    def take_three(items) -> None:
        for i, _ in enumerate(items, start=1):
            if i == 3:
                break  # a sequential test that decided on its third deal

    looped = ProgressBar(range(10), disable=True, line_every_s=0)
    take_three(looped)
    bar = ProgressBar(total=10, disable=True, line_every_s=0)
    take_three(counted(iter(range(10)), bar))
    assert (looped._count, bar._count) == (2, 3)  # tqdm's iteration misses the third, counted does not


def test_stop_reason_names_the_decision_and_the_games():
    early = SimpleNamespace(decision="H1", decided_early=True, played=120)
    assert stop_reason(early, 1600) == "decided early: SPRT accepted H1 after 120 of 1600 games"
    late = SimpleNamespace(decision="H0", decided_early=False, played=1600)
    assert stop_reason(late, 1600) == "budget reached: 1600 of 1600 games, undecided, counted as H0"


GATE_END = re.compile(
    r"gate: (?P<bar>strength|student): (?P<done>\d+)/(?P<total>\d+) deal \(\d+%\), .*, (?P<why>"
    r"decided early: SPRT accepted H[01] after \d+ of (?P<early_of>\d+) games"
    r"|budget reached: \d+ of (?P<budget_of>\d+) games, undecided, counted as H[01])$"
)


def test_gate_bars_say_why_they_ended(pipeline: Pipeline, tmp_path: Path, caplog: pytest.LogCaptureFixture):
    from stages import gate

    caplog.set_level(logging.INFO, logger="ml.base.progress")
    args = [a if a != str(pipeline.root / "cand.pt") else str(tmp_path / "cand.pt") for a in pipeline.gate_args]
    assert gate.main([*pipeline.common, *args, "--metrics", str(tmp_path / "gate.json")]) == 0  # --no-progress: lines
    ends = {m["bar"]: m for line in _lines(caplog) if (m := GATE_END.match(line))}
    assert list(ends) == ["strength", "student"], _lines(caplog)
    assert [int(m["early_of"] or m["budget_of"]) for m in ends.values()] == [40, 16]  # TINY: max_games, student_games
    strength, decided = ends["strength"], json.loads((tmp_path / "gate.json").read_text())["gate/sprt_decided_early"]
    assert strength["why"].startswith("decided early" if decided else "budget reached")
    assert decided or strength["done"] == strength["total"]  # a bar short of its total says the test decided


def test_tournament_bar_counts_each_game(monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture):
    """One chunk is the whole tournament (``compute.chunk_games: 0``): the bar still moves game by game."""
    from ml.game.commander.encoding import OBS_DIM
    from ml.game.commander.spec import commander
    from ml.judge.tournament import TournamentPlay, play_tournament
    from ml.model.policy import PolicyNet

    monkeypatch.setenv(LINE_EVERY_ENV, "1e-9")  # a line per update
    caplog.set_level(logging.INFO, logger="ml.base.progress")
    rankings = play_tournament({"gen000": PolicyNet(OBS_DIM, (16,))}, "gen000", TournamentPlay(8, 4, 3), commander(4, 30),
                               progress=False)  # fmt: skip
    assert len(rankings) == 8
    counts = [int(m.group(1)) for line in _lines(caplog) if (m := re.match(r"rating: (\d+)/8 game", line))]
    assert counts == list(range(1, 9))  # each game as it ends


class _Tty(io.StringIO):
    """A terminal's stream that records each write, in order, into ``log`` shared with the other stream."""

    def __init__(self, name: str, log: list[tuple[str, str]]) -> None:
        super().__init__()
        self.name, self.log = name, log

    def isatty(self) -> bool:
        return True

    def write(self, text: str) -> int:
        self.log.append((self.name, text))
        return super().write(text)


@pytest.mark.expensive
def test_eval_clears_its_progress_before_the_table(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    from ml.driver.evaluate import evaluate
    from ml.driver.orchestrator import Loop
    from ml.game.commander.encoding import OBS_DIM
    from ml.model.policy import PolicyNet, save_policy

    repo = make_project_copy(tmp_path / "repo", tiny_params())
    for name in ("gen000", "gen001"):
        save_policy(PolicyNet(OBS_DIM, (16,)), repo / "data/merged/students" / f"{name}.pt")
    log: list[tuple[str, str]] = []
    monkeypatch.setattr(sys, "stdout", _Tty("out", log))
    monkeypatch.setattr(sys, "stderr", _Tty("err", log))
    assert evaluate(Loop(repo, echo=lambda *_: None), 8, None) == 0
    err = "".join(t for s, t in log if s == "err")
    out = "".join(t for s, t in log if s == "out")
    first_out = next(i for i, (s, _) in enumerate(log) if s == "out")
    assert all(s == "err" for s, _ in log[:first_out]) and all(s == "out" for s, _ in log[first_out:])  # not interleaved
    assert "eval gen000:" in err and "eval gen001:" in err and "\r" not in out
    assert err.rstrip("\r").rsplit("\r", 1)[-1].strip() == ""  # the last bar cleared its line
    table = out.splitlines()
    assert table[0].startswith("students (greedy) in pods against 3 teachers") and table[1].startswith("student ")
    assert [row.split()[0] for row in table[2:]] == ["gen000", "gen001"]


@pytest.mark.expensive
def test_stages_with_stderr_on_a_pipe_print_progress_lines(tmp_path: Path):
    """teacher and train as loop.py runs them under nohup or tee: stderr is a pipe, not a terminal."""
    params = tmp_path / "params.yaml"
    params.write_text(yaml_text(tiny_params({"train": {"epochs": 6, "samples_per_epoch": 600, "hidden_sizes": [16]}})))
    env = {**os.environ, LINE_EVERY_ENV: "0.001", "PYTHONHASHSEED": "0"}
    env.pop("DISTILL_PROGRESS", None)
    common = ["--params", str(params)]

    def stage(name: str, *args: str) -> str:
        cmd = [sys.executable, "-m", f"stages.{name}", *common, *args, "--metrics", str(tmp_path / f"{name}.json")]
        proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
        assert proc.returncode == 0, proc.stderr[-3000:]
        return proc.stderr

    teacher = stage("teacher", "--out", str(tmp_path / "teacher"))
    found = [m.groups() for m in LINE.finditer(teacher)]
    assert found and all(label == "teacher" and total == "24" and unit == "game" for label, _, total, unit in found)
    assert found[-1][1] == "24"  # the last line says where it ended
    (tmp_path / "pool").mkdir()
    train = stage("train", "--teacher", str(tmp_path / "teacher"), "--pool", str(tmp_path / "pool"),
                  "--out", str(tmp_path / "student.pt"))  # fmt: skip
    epochs = [m.groups() for m in LINE.finditer(train)]
    assert epochs and all(label == "train" and total == "6" and unit == "epoch" for label, _, total, unit in epochs)
    assert train.count("renormalising") == 1  # no PPO data in generation 0: said once, not once per epoch
    assert "\r" not in teacher + train  # no bar drawn into the pipe


def test_renormalising_is_said_once(monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture):
    monkeypatch.setattr(progress, "_said", set())
    caplog.set_level(logging.INFO, logger="ml.data.decisions")
    data = _fake_set({"sim": 100})
    for epoch in range(6):
        sample_mixture(data, {"sim": 1.0, "ppo": 0.5}, 100, np.random.default_rng(epoch))
    assert sum("renormalising" in r.getMessage() for r in caplog.records) == 1


# ---------------------------------------------------------------------------------------------- DVC's output


def _filtered(f: DvcOutputFilter, text: str, chunk: int = 7) -> str:
    """Feed ``text`` in small pieces, as a pipe delivers it, then close."""
    return "".join(f.feed(text[i : i + chunk]) for i in range(0, len(text), chunk)) + f.close()


def test_dvc_filter_drops_hints_and_summarises_empty_warnings():
    named: set[str] = set()
    teacher = _filtered(DvcOutputFilter(named), DVC_TEACHER)
    assert teacher.splitlines() == [
        "Running stage 'teacher':",
        "> sh t.sh",
        "2026 teacher INFO teacher: 3 games",
        "Generating lock file 'dvc.lock'",
        "Updating lock file 'dvc.lock'",
        "dvc: data/pool, data/seed, data/frozen are empty (9 'is empty' warnings of DVC left out)",
    ]
    train = _filtered(DvcOutputFilter(named), DVC_TRAIN)  # the next stage of the same loop
    assert not any(h in train for h in HINTS) and "Running stage 'train':" in train and "> sh u.sh" in train
    summary = [line for line in train.splitlines() if "empty" in line]
    assert summary == ["dvc: data/merged/pool is empty (1 'is empty' warning of DVC left out)"]  # only the new path
    assert _filtered(DvcOutputFilter(named), DVC_TRAIN.replace("'data/merged/pool'", "'data/pool'")).count("empty") == 0


def test_dvc_filter_keeps_errors_blank_lines_and_progress_bars():
    f = DvcOutputFilter()
    shown = _filtered(f, DVC_FAILED)
    assert "boom\n" in shown and "ERROR: failed to reproduce 'train': failed to run: sh u.sh, exited with 3\n" in shown
    assert list(f.shown)[-2:] == ["boom", "ERROR: failed to reproduce 'train': failed to run: sh u.sh, exited with 3"]
    assert _filtered(DvcOutputFilter(), "epoch 1\n\nepoch 2\n") == "epoch 1\n\nepoch 2\n"  # a stage's own blank line
    bar = DvcOutputFilter()
    assert bar.feed("\rtrain:  50%|#####") == "\rtrain:  50%|#####"  # a redrawing bar shows at once
    assert bar.feed("     | 1/2\rtrain: 100%|##########| 2/2\n") == "     | 1/2\rtrain: 100%|##########| 2/2\n"
    assert bar.feed("partial") == "" and bar.close() == "partial\n"  # other partial lines wait for their newline


PACK_DEL = """Exception ignored in: <function Pack.__del__ at 0x7f3a2c1e8d60>
Traceback (most recent call last):
  File "/venv/lib/python3.11/site-packages/dulwich/pack.py", line 2331, in __del__
    self.close()
ImportError: sys.meta_path is None, Python is likely shutting down
"""


def test_dvc_filter_drops_dulwich_shutdown_noise_and_keeps_other_ignored_exceptions():
    f = DvcOutputFilter()
    shown = _filtered(f, DVC_FAILED + PACK_DEL + PACK_DEL + "after\n")
    assert "Exception ignored" not in shown and "dulwich" not in shown and "meta_path" not in shown
    assert "exited with 3\nafter\n" in shown and list(f.shown)[-1] == "after"
    other = PACK_DEL.replace("dulwich/pack.py", "mystage/io.py")
    assert _filtered(DvcOutputFilter(), other + "after\n") == other + "after\n"  # not ours to hide
    unended = DvcOutputFilter()  # the command ends inside a block: what was held is shown
    assert unended.feed("Exception ignored in: x\nTraceback (most recent call last):\n") == ""
    assert unended.close() == "Exception ignored in: x\nTraceback (most recent call last):\n"


def _workspace(tmp_path: Path) -> Workspace:
    root = tmp_path / "ws"
    root.mkdir()
    git(root, "init", "-q", "-b", "main")
    return Workspace(root, echo=lambda *_: None)


def _say(text: str, rc: int = 0) -> list[str]:
    return [sys.executable, "-c", f"import sys; sys.stdout.write({text!r}); sys.stdout.flush(); sys.exit({rc})"]


@pytest.mark.expensive
def test_streamed_dvc_output_is_filtered(tmp_path: Path, capsys: pytest.CaptureFixture):
    ws = _workspace(tmp_path)
    raw, stage_times = ws.run_timed(_say(DVC_TEACHER))
    out = capsys.readouterr().out
    assert not any(h in out for h in HINTS) and "WARNING" not in out and out.count("are empty") == 1
    assert "Running stage 'teacher':\n> sh t.sh\n2026 teacher INFO teacher: 3 games\n" in out
    assert raw.count("is empty") == 9 and "dvc push" in raw  # the caller still gets all of it
    assert list(stage_times) == ["teacher"]
    ws.run(_say(DVC_TRAIN), stream=True)
    assert re.findall(r"dvc: (.*?) (?:is|are) empty", capsys.readouterr().out) == ["data/merged/pool"]  # once per loop
    with pytest.raises(LoopError) as err:
        ws.run(_say(DVC_FAILED, rc=1), stream=True)
    shown = capsys.readouterr().out
    assert shown.count("ERROR: failed to reproduce 'train'") == 1  # printed once, as it came
    assert str(err.value).endswith("its output is above); the attempt stays in flight, run loop.py again to resume.")
    tail = err.value.detail  # kept for the dashboard's status
    assert (
        tail.endswith("boom\nERROR: failed to reproduce 'train': failed to run: sh u.sh, exited with 3")
        and "empty" not in tail
    )
    with pytest.raises(LoopError) as err:  # not a DVC repository: named as a user types it
        ws.run_timed([*DVC, "status"])
    assert str(err.value).startswith("dvc status failed (")
