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

import pytest
import yaml

from ml.game.commander.encoding import RecordEncoder, label_record
from ml.records import read_records, scan_batches
from stages import export, gate, merge, selfplay, teacher, train
from tests.conftest import tiny_params


def _params(tmp: Path, **over) -> Path:
    p = tmp / "params.yaml"
    p.write_text(yaml.safe_dump(tiny_params(over)))
    return p


@pytest.fixture(scope="module")
def pipeline(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("stages")
    params = _params(tmp)
    d = {name: tmp / name for name in ("teacher", "pool", "frozen", "rejected", "students", "candidate", "merged", "m")}
    for name in ("pool", "frozen", "rejected", "students"):
        d[name].mkdir()
    common = ["--params", str(params), "--no-progress"]
    assert teacher.main([*common, "--out", str(d["teacher"]), "--metrics", str(d["m"] / "teacher.json")]) == 0
    assert (
        train.main(
            [
                *common,
                "--teacher",
                str(d["teacher"]),
                "--pool",
                str(d["pool"]),
                "--out",
                str(tmp / "student.pt"),
                "--metrics",
                str(d["m"] / "train.json"),
            ]
        )
        == 0
    )
    assert (
        selfplay.main(
            [
                *common,
                "--student",
                str(tmp / "student.pt"),
                "--frozen",
                str(d["frozen"]),
                "--out",
                str(tmp / "ppo.pt"),
                "--metrics",
                str(d["m"] / "selfplay.json"),
            ]
        )
        == 0
    )
    assert (
        export.main(
            [*common, "--model", str(tmp / "ppo.pt"), "--out", str(d["candidate"]), "--metrics", str(d["m"] / "export.json")]
        )
        == 0
    )
    gate_args = ["--model", str(tmp / "ppo.pt"), "--student", str(tmp / "student.pt"), "--teacher", str(d["teacher"]), "--pool", str(d["pool"]),
                 "--candidate", str(d["candidate"]), "--out-student", str(tmp / "cand.pt")]  # fmt: skip
    assert gate.main([*common, *gate_args, "--metrics", str(d["m"] / "gate.json")]) == 0
    return tmp, d, common, gate_args


def _metrics(d, name):
    return json.loads((d["m"] / f"{name}.json").read_text())


def test_stage_outputs(pipeline):
    _tmp, d, _, _ = pipeline
    t = _metrics(d, "teacher")
    assert t["teacher/games"] == 24 and t["teacher/decisions"] > 24 * 20
    tr = _metrics(d, "train")
    assert 0.0 <= tr["train/holdout_accuracy"] <= 1.0 and tr["train/holdout_games"] >= 1
    assert _metrics(d, "selfplay")["selfplay/decisions"] >= 600
    g = _metrics(d, "gate")
    assert g["gate/accepted"] is True and g["gate/gated"] is False  # tiny params: ungated
    assert 8 <= g["gate/eval_games"] <= 40 and g["gate/eval_games"] % 4 == 0  # whole duplicate deals
    assert g["gate/win_rate_low"] <= g["gate/win_rate"] <= g["gate/win_rate_high"]
    assert g["gate/sprt_decision"] in ("H0", "H1") and g["gate/student_games"] + g["gate/student_draws"] == 16
    assert 0 <= g["gate/holdout_mcnemar_p"] <= 1
    assert g["gate/batch"]["games"] == 12 and g["gate/batch"]["action_entropy_bits"] > 0


def test_export_round_trip_gives_back_the_action(pipeline):
    _, d, _, _ = pipeline
    (batch,) = scan_batches(d["candidate"], sources=("ppo",))
    assert batch.name == "ml-decisions-ppo-gen000-a1.jsonl"
    encoder = RecordEncoder()
    n = 0
    for rec in read_records(batch):
        assert rec.source == "ppo" and rec.model_version == "gen-000-a1" and rec.generation == 0
        assert label_record(rec.model_dump(), encoder.pool) == rec.action.action_idx
        assert rec.action_mask[rec.action.action_idx] == 1
        n += 1
    assert n == _metrics(d, "export")["export/decisions_exported"] > 0


def test_merge_accepted_and_rejected(pipeline, tmp_path):
    tmp, d, common, gate_args = pipeline
    margs = ["--candidate", str(d["candidate"]), "--model", str(tmp / "ppo.pt"), "--student", str(tmp / "student.pt"), "--pool", str(d["pool"]),
             "--rejected", str(d["rejected"]), "--frozen", str(d["frozen"]), "--students", str(d["students"])]  # fmt: skip
    assert (
        merge.main(
            [
                *common,
                "--gate",
                str(d["m"] / "gate.json"),
                *margs,
                "--out",
                str(d["merged"]),
                "--metrics",
                str(tmp_path / "m.json"),
            ]
        )
        == 0
    )
    assert [p.name for p in (d["merged"] / "pool").iterdir()] == ["ml-decisions-ppo-gen000-a1.jsonl"]
    assert [p.name for p in (d["merged"] / "frozen").iterdir()] == ["gen000.pt"]
    assert [p.name for p in (d["merged"] / "students").iterdir()] == ["gen000.pt"]
    assert not list((d["merged"] / "rejected").iterdir())
    strict = _params(
        tmp_path, gate={"gated": True, "target_win_rate": 0.9, "min_games": 8, "max_games": 40, "student_games": 16}
    )
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


def test_bad_params_exit_2(tmp_path, capsys):
    bad = tmp_path / "params.yaml"
    bad.write_text("teacher:\n  games: -1\n")
    with pytest.raises(SystemExit) as e:
        teacher.main(["--params", str(bad), "--out", str(tmp_path / "t"), "--metrics", str(tmp_path / "m.json")])
    assert e.value.code == 2
    assert "teacher.games" in capsys.readouterr().err
