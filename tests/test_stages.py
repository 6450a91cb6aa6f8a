"""Each DVC stage end to end, in process, on tiny params (CleanRL's tiny-budget run).

Checks: teacher -> train -> selfplay -> export -> gate -> merge produce their outputs and
metrics; the exported PPO batch reads back through the schema, and for every exported
decision, encoding and labelling the record gives back the action index the agent took
and the policy's mask allowed it; an accepted batch goes to the pool and the PPO agent to
the frozen opponents, a rejected batch only to the audit folder; a bad params file exits
with status 2 naming the key.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from ml.data.batch_files import read_records, scan_batches
from ml.game.commander.encoding import RecordEncoder, label_record
from ml.learn import supervised
from ml.learn.reuse import TrainingData
from ml.model.policy import load_policy
from stages import gate, merge, teacher, train
from tests.conftest import REJECTING_GATE, TINY, Pipeline, tiny_params, yaml_text


def _params(tmp: Path, **over) -> Path:
    p = tmp / "params.yaml"
    p.write_text(yaml_text(tiny_params(over)))
    return p


def test_stage_outputs(pipeline: Pipeline):
    t = pipeline.metrics("teacher")
    assert t["teacher/games"] == 24 and t["teacher/decisions"] > 24 * 20
    tr = pipeline.metrics("train")
    assert tr["train/holdout_games"] == 3  # 12 % of 24 games, by game
    assert tr["train/holdout_decisions"] + tr["train/train_decisions"] == t["teacher/decisions"]
    # two tiny epochs must still beat the random init clearly (measured: 0.56 -> 0.66)
    assert tr["train/holdout_accuracy"] > tr["train/init_holdout_accuracy"] + 0.05
    assert pipeline.metrics("selfplay")["selfplay/decisions"] >= 600
    g = pipeline.metrics("gate")
    assert g["gate/accepted"] is True and g["gate/gated"] is False  # tiny params: ungated
    assert 8 <= g["gate/eval_games"] <= 40 and g["gate/eval_games"] % 4 == 0  # whole duplicate deals
    assert g["gate/win_rate"] == g["gate/wins"] / g["gate/eval_games"]
    assert g["gate/win_rate_low"] < g["gate/win_rate"] < g["gate/win_rate_high"]
    assert g["gate/win_rate_high"] - g["gate/win_rate_low"] < 0.5  # by deal, over 8 to 40 games
    assert g["gate/sprt_decision"] in ("H0", "H1") and g["gate/student_games"] + g["gate/student_draws"] == 16
    drop = g["gate/holdout_accuracy_current"] - g["gate/holdout_accuracy_candidate"]
    assert g["gate/holdout_accuracy_drop"] == pytest.approx(drop)
    assert g["gate/holdout_accuracy_current"] == tr["train/holdout_accuracy"]
    # McNemar's one-sided p: small only when the candidate is the one that got worse
    assert 0 <= g["gate/holdout_mcnemar_p"] <= 1
    assert drop > 0 or g["gate/holdout_mcnemar_p"] > 0.05
    batch = g["gate/batch"]
    assert batch["games"] == 12 and sum(batch["action_counts"].values()) == batch["decisions"]
    assert 1.0 < batch["action_entropy_bits"] <= np.log2(len(batch["action_counts"]))  # several actions, at most uniform


def test_export_round_trip_gives_back_the_action(pipeline: Pipeline):
    (batch,) = scan_batches(pipeline.dirs["candidate"], sources=("ppo",))
    assert batch.name == "ml-decisions-ppo-gen000-a1.jsonl"
    encoder = RecordEncoder()
    n = 0
    for rec in read_records(batch):
        assert rec.source == "ppo" and rec.model_version == "gen-000-a1" and rec.generation == 0
        assert label_record(rec.model_dump(), encoder.pool) == rec.action.action_idx
        assert rec.action_mask[rec.action.action_idx] == 1
        # the agent's distribution at the decision (schema 2): legal actions only, sums to 1
        assert rec.schema_version == 2 and rec.policy is not None
        assert abs(sum(rec.policy) - 1) < 1e-3 and all(p == 0 or m for p, m in zip(rec.policy, rec.action_mask, strict=True))
        n += 1
    assert n == pipeline.metrics("export")["export/decisions_exported"] > 0


def test_merge_accepted_and_rejected(pipeline: Pipeline, tmp_path):
    d, margs = pipeline.dirs, pipeline.merge_args
    gate_args = [*pipeline.gate_args[:-1], str(tmp_path / "cand.pt")]  # the shared run's cand.pt left as it is
    assert [p.name for p in (d["merged"] / "pool").iterdir()] == ["ml-decisions-ppo-gen000-a1.jsonl"]
    assert [p.name for p in (d["merged"] / "frozen").iterdir()] == ["gen000.pt"]
    assert [p.name for p in (d["merged"] / "students").iterdir()] == ["gen000.pt"]
    assert not list((d["merged"] / "rejected").iterdir())
    strict = _params(tmp_path, gate=REJECTING_GATE)
    gate_json = tmp_path / "gate.json"
    assert gate.main(["--params", str(strict), "--no-progress", *gate_args, "--metrics", str(gate_json)]) == 0
    verdict = json.loads(gate_json.read_text())
    assert verdict["gate/accepted"] is False and verdict["gate/reasons"][0].startswith("strength: the SPRT accepted H0")
    out = tmp_path / "merged"
    assert (
        merge.main(
            [
                "--params",
                str(strict),
                "--no-progress",
                "--gate",
                str(gate_json),
                *margs,
                "--out",
                str(out),
                "--metrics",
                str(tmp_path / "m2.json"),
            ]
        )
        == 0
    )
    assert (
        not list((out / "pool").iterdir()) and not list((out / "frozen").iterdir()) and not list((out / "students").iterdir())
    )
    assert [p.name for p in (out / "rejected").iterdir()] == ["ml-decisions-ppo-gen000-a1.jsonl"]


def test_train_once(pipeline: Pipeline, tmp_path, monkeypatch):
    """After an accepted attempt the next generation's train stage takes the gate's candidate
    student (trained on the same data and params) and trains nothing; on other data (the pool
    without the batch, as after a rejection) or other train params it trains."""
    d = pipeline.dirs
    reuse = d["merged"] / "next_student"
    assert [p.name for p in reuse.iterdir()] == ["student.pt"]

    def run_train(pool: Path, params: Path, name: str) -> tuple[Path, dict]:
        out, metrics = tmp_path / f"{name}.pt", tmp_path / f"{name}.json"
        args = ["--teacher", str(d["teacher"]), "--pool", str(pool), "--reuse", str(reuse), "--out", str(out)]
        assert train.main(["--params", str(params), "--no-progress", *args, "--metrics", str(metrics)]) == 0
        return out, json.loads(metrics.read_text())

    def no_training(*args, **kwargs):
        raise AssertionError("trained again")

    next_gen = _params(tmp_path, run={"generation": 1, "attempt": 1, "seed": 7})
    with monkeypatch.context() as m:
        m.setattr(supervised, "train_student", no_training)
        out, metrics = run_train(d["merged"] / "pool", next_gen, "next")
    assert metrics["train/reused"] is True and metrics["train/ppo_files"] == 1
    assert metrics["train/holdout_accuracy"] == pipeline.metrics("gate")["gate/holdout_accuracy_candidate"]
    (net, meta), (cand, cand_meta) = load_policy(out), load_policy(pipeline.root / "cand.pt")
    assert meta["generation"] == 1 and meta["role"] == "student"
    # one seed throughout: the gate pairs its candidate with the current student's, the reuse keeps it
    assert meta["train_seed"] == cand_meta["train_seed"] == load_policy(pipeline.root / "student.pt")[1]["train_seed"]
    assert all(torch.equal(a, b) for a, b in zip(net.state_dict().values(), cand.state_dict().values(), strict=True))
    # the pool without the batch (a rejected attempt) or another lr: trained
    assert run_train(d["pool"], next_gen, "rejected")[1]["train/reused"] is False
    (tmp_path / "lr").mkdir()
    other_lr = _params(tmp_path / "lr", run={"generation": 1, "attempt": 1, "seed": 7}, train={**TINY["train"], "lr": 0.002})
    assert run_train(d["merged"] / "pool", other_lr, "lr")[1]["train/reused"] is False


def test_warm_start_continues_the_last_accepted_student(pipeline: Pipeline, tmp_path, monkeypatch, caplog):
    """Under ``train.warm_start`` a student starts from the last accepted one (the train stage:
    ``--reuse``'s student.pt when it cannot take it) and trains ``warm_epochs`` at ``warm_lr``;
    the gate's warm candidate is taken by the next train stage; a student of another shape is
    no warm start."""
    from ml.base.io import file_md5
    from ml.config.params import load_params
    from ml.game.registry import make_game
    from ml.learn.settings import RunSettings
    from ml.model.policy import save_policy

    d, student = pipeline.dirs, pipeline.root / "student.pt"
    last = tmp_path / "last"
    last.mkdir()
    (last / "student.pt").write_bytes(student.read_bytes())  # trained on other data: not reusable
    warm = {**TINY["train"], "warm_start": True, "warm_epochs": 1, "warm_lr": 1e-9}

    def run_train(name: str, train_params: dict, reuse: Path = last) -> tuple[dict, torch.nn.Module]:
        (tmp_path / name).mkdir()
        params = _params(tmp_path / name, run={"generation": 1, "attempt": 1, "seed": 7}, train=train_params)
        out, metrics = tmp_path / name / "s.pt", tmp_path / name / "m.json"
        args = ["--teacher", str(d["teacher"]), "--pool", str(d["merged"] / "pool"), "--reuse", str(reuse)]
        assert train.main(["--params", str(params), "--no-progress", *args, "--out", str(out), "--metrics", str(metrics)]) == 0
        return json.loads(metrics.read_text()), load_policy(out)[0]

    current = load_policy(student)[0].state_dict()
    metrics, net = run_train("warm", warm)
    assert metrics["train/reused"] is False and metrics["train/warm_from"] == file_md5(student)
    # it starts from the student's weights (the same holdout accuracy) and a rate of 1e-9 keeps them
    assert metrics["train/init_holdout_accuracy"] == pipeline.metrics("train")["train/holdout_accuracy"]
    assert all(torch.allclose(a, b, atol=1e-5) for a, b in zip(net.state_dict().values(), current.values(), strict=True))
    cold, cold_net = run_train("cold", {**warm, "warm_start": False})
    assert cold["train/warm_from"] is None and cold["train/init_holdout_accuracy"] != metrics["train/init_holdout_accuracy"]
    assert not all(
        torch.allclose(a, b, atol=1e-3) for a, b in zip(cold_net.state_dict().values(), current.values(), strict=True)
    )
    with caplog.at_level("WARNING"):
        other, _ = run_train("shape", {**warm, "hidden_sizes": [16]})
    assert other["train/warm_from"] is None and "not warm-started" in caplog.text

    # the gate's warm candidate (current student + candidate batch) is what the next train stage takes
    params = load_params(_params(tmp_path, train={**warm, "warm_lr": 1e-3}))
    record: dict = {}
    candidate, _, _ = supervised.build_and_train(
        params.train, make_game(params.game, params.teacher),
        TrainingData(d["teacher"], (d["pool"], d["candidate"]), previous=student),
        RunSettings(params.stage_seed("train")), record=record,
    )  # fmt: skip
    assert [epoch for epoch, _ in record["train_curve"]] == [1]  # warm_epochs 1, not epochs 2
    assert not all(
        torch.allclose(a, b, atol=1e-4) for a, b in zip(candidate.state_dict().values(), current.values(), strict=True)
    )
    nxt = tmp_path / "next"
    nxt.mkdir()
    save_policy(candidate, nxt / "student.pt", record)
    monkeypatch.setattr(supervised, "train_student", lambda *a, **k: pytest.fail("trained again"))
    taken, net = run_train("taken", {**warm, "warm_lr": 1e-3}, reuse=nxt)
    assert taken["train/reused"] is True and taken["train/warm_from"] == file_md5(student)
    assert all(torch.equal(a, b) for a, b in zip(net.state_dict().values(), candidate.state_dict().values(), strict=True))
    # a retry's nudge of the optimisation knobs keeps the accepted student; another shape does not
    nudged = {**warm, "warm_lr": 5e-4, "warm_epochs": 3, "source_weights": {"sim": 1.0, "ppo": 0.35}}
    assert run_train("nudged", nudged, reuse=nxt)[0]["train/reused"] is True
    monkeypatch.undo()
    assert run_train("wider", {**warm, "hidden_sizes": [16]}, reuse=nxt)[0]["train/reused"] is False


def test_bad_params_exit_2(tmp_path, capsys):
    bad = tmp_path / "params.yaml"
    bad.write_text("teacher:\n  games: -1\n")
    with pytest.raises(SystemExit) as e:
        teacher.main(["--params", str(bad), "--out", str(tmp_path / "t"), "--metrics", str(tmp_path / "m.json")])
    assert e.value.code == 2
    assert "teacher.games" in capsys.readouterr().err


def test_bad_cache_cap_stops_the_reading_stages_at_start(pipeline: Pipeline, tmp_path, capsys, monkeypatch):
    """The stages that read decision files (train, gate) refuse a bad cache cap before any work,
    in one line, whatever the cache holds."""
    monkeypatch.setenv("DISTILL_ENCODED_CACHE_MAX_MB", "lots")
    want = "error: DISTILL_ENCODED_CACHE_MAX_MB='lots': expected a size in MiB (a number >= 0, or inf: no cap)"
    common = ["--params", str(pipeline.root / "params.yaml"), "--no-progress", "--metrics", str(tmp_path / "m.json")]
    args = ["--teacher", str(pipeline.dirs["teacher"]), "--pool", str(pipeline.dirs["pool"]), "--out", str(tmp_path / "s.pt")]
    assert train.main([*common, *args]) == 2 and not (tmp_path / "s.pt").exists()
    assert capsys.readouterr().err.strip().splitlines() == [want]
    gate_args = [a if a != str(pipeline.root / "cand.pt") else str(tmp_path / "cand.pt") for a in pipeline.gate_args]
    assert gate.main([*common, *gate_args]) == 2 and not (tmp_path / "cand.pt").exists()
    assert capsys.readouterr().err.strip().splitlines() == [want]


def test_bad_record_in_the_pool_is_one_line_exit_2(pipeline: Pipeline, tmp_path, capsys):
    """A PPO batch with a bad line stops the train stage with one line naming file, line and
    field (no traceback), and writes no student."""
    (batch,) = sorted((pipeline.dirs["merged"] / "pool").glob("*.jsonl"))
    lines = batch.read_text(encoding="utf-8").splitlines()
    rec = json.loads(lines[2])
    rec["policy"] = [0.5] * len(rec["policy"])
    pool = tmp_path / "pool"
    pool.mkdir()
    bad = pool / batch.name
    bad.write_text("\n".join([*lines[:2], json.dumps(rec), *lines[3:]]) + "\n", encoding="utf-8")
    out = tmp_path / "student.pt"
    args = ["--teacher", str(pipeline.dirs["teacher"]), "--pool", str(pool), "--out", str(out)]
    code = train.main(
        ["--params", str(pipeline.root / "params.yaml"), "--no-progress", *args, "--metrics", str(tmp_path / "m.json")]
    )
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and not out.exists()
    assert len(err) == 1 and err[0].startswith("error: ") and f"{batch.name}:3: policy: probabilities sum to" in err[0], err


def test_ppo_recency_changes_the_student(pipeline: Pipeline, tmp_path):
    """``train.ppo_recency`` reaches the sampler: with two batches in the window, weighting the
    older one down trains another student; with one batch it changes nothing."""
    (batch,) = sorted((pipeline.dirs["merged"] / "pool").glob("*.jsonl"))
    pool = tmp_path / "pool"
    pool.mkdir()
    lines = batch.read_text(encoding="utf-8").splitlines()
    (pool / "ml-decisions-ppo-gen000-a1.jsonl").write_text("\n".join(lines[: len(lines) // 2]) + "\n", encoding="utf-8")
    (pool / "ml-decisions-ppo-gen001-a1.jsonl").write_text("\n".join(lines[len(lines) // 2 :]) + "\n", encoding="utf-8")

    def student(name: str, recency: float, folder: Path) -> dict:
        (tmp_path / name).mkdir()
        params = _params(tmp_path / name, train={**TINY["train"], "ppo_window": 0, "ppo_recency": recency})
        out = tmp_path / name / "student.pt"
        args = ["--teacher", str(pipeline.dirs["teacher"]), "--pool", str(folder), "--out", str(out)]
        assert train.main(["--params", str(params), "--no-progress", *args, "--metrics", str(tmp_path / name / "m.json")]) == 0
        return load_policy(out)[0].state_dict()

    same = lambda a, b: all(torch.equal(x, y) for x, y in zip(a.values(), b.values(), strict=True))  # noqa: E731
    assert not same(student("alike", 1.0, pool), student("recent", 0.05, pool))
    assert same(
        student("one-alike", 1.0, pipeline.dirs["merged"] / "pool"),
        student("one-recent", 0.05, pipeline.dirs["merged"] / "pool"),
    )


def test_the_teacher_compiles_the_core_before_its_clock_and_bar_start(tmp_path, monkeypatch) -> None:
    """A cold compile (about 70 s) is not play: the rate and the progress bar's ETA start after it."""
    import ml.game.commander.core.warmup as warmup
    import ml.play.teacher as teacher_mod
    from ml.config.sections import TeacherParams
    from ml.game.commander.spec import commander
    from ml.play.runner import StagePlay

    order: list[str] = []
    real_warm_up, real_bar = warmup.warm_up, teacher_mod.ProgressBar
    monkeypatch.setattr(warmup, "warm_up", lambda: order.append("warm_up") or real_warm_up())
    monkeypatch.setattr(teacher_mod, "ProgressBar", lambda *a, **k: order.append("bar") or real_bar(*a, **k))
    teacher_mod.write_teacher_batch(tmp_path, commander(), TeacherParams(games=2), "t1", StagePlay(1))
    assert order[:2] == ["warm_up", "bar"]
