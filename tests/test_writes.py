"""A write that fails names what was written, the step and its path, in one line (issue 24, item 5).

Folders are made unwritable with ``chattr +i`` (``tests.conftest.immutable``; as root ``chmod``
does not stop writes); a test skips, saying why, where the file system cannot set the flag.

Checks: an atomic write and a JSONL batch in an unwritable folder raise ``ml.base.io.WriteError``
naming the file and the step, leave nothing behind, and the error pickles (worker processes);
promoting into an unwritable ``data/pool`` names the folder and the step, leaves no
``data/pool.tmp`` and the folder as it was; a ``.tmp`` a kill left behind is removed by the
next promotion and the next merge, whose output holds only what it should; the merge stage
reports its unwritable output in one line, exit status 2.
"""

from __future__ import annotations

import errno
import pickle
from pathlib import Path

import pytest

from ml.base.io import WriteError, atomic_write_json
from ml.base.jsonl import JsonlWriter
from ml.data.merge import merge_generation, promote_folders
from stages import merge
from tests.conftest import immutable, tiny_params, yaml_text


def test_atomic_writes_name_the_file_and_the_step(tmp_path: Path):
    d = tmp_path / "metrics"
    d.mkdir()
    with immutable(d):
        with pytest.raises(WriteError) as e:
            atomic_write_json(d / "train.json", {"train/epochs": 2})
        assert str(e.value) == f"cannot write {d / 'train.json'} (creating a temporary file in {d}): Operation not permitted"
        assert isinstance(e.value, OSError) and e.value.errno == errno.EPERM
        assert str(pickle.loads(pickle.dumps(e.value))) == str(e.value)
        batch = d / "ml-decisions-sim-a.jsonl"
        with pytest.raises(WriteError) as e:
            JsonlWriter(batch)
        assert str(e.value) == f"cannot write {batch} (creating {batch}.tmp): Operation not permitted"
    assert list(d.iterdir()) == []


def _merged(root: Path) -> tuple[Path, Path]:
    """``root/merged/pool`` holding this merge's batch, ``root/data/pool`` the one before."""
    (root / "merged/pool").mkdir(parents=True)
    (root / "merged/pool/ml-decisions-ppo-gen001-a1.jsonl").write_text("generation 1\n")
    (root / "data/pool").mkdir(parents=True)
    (root / "data/pool/ml-decisions-ppo-gen000-a1.jsonl").write_text("generation 0\n")
    return root / "merged", root / "data"


def test_unwritable_promoted_folder_is_one_line_and_leaves_no_tmp(tmp_path: Path):
    """The PermissionError of ``shutil.rmtree(ignore_errors=True)`` + rename came out as a
    traceback and left ``data/pool.tmp``."""
    merged, data = _merged(tmp_path)
    pool = data / "pool"
    with immutable(pool):
        with pytest.raises(WriteError) as e:
            promote_folders(merged, data, ["pool"])
    old = pool / "ml-decisions-ppo-gen000-a1.jsonl"
    assert str(e.value) == f"cannot write {pool} (removing {old}): Operation not permitted"
    assert sorted(p.name for p in data.iterdir()) == ["pool"] and [p.name for p in pool.iterdir()] == [old.name]


def test_leftover_tmp_is_removed_by_the_next_promotion(tmp_path: Path):
    merged, data = _merged(tmp_path)
    leftover = data / "pool.tmp"  # a kill while the folder was being built
    leftover.mkdir()
    (leftover / "ml-decisions-ppo-gen000-a9.jsonl").write_text("half built\n")
    assert promote_folders(merged, data, ["pool"]) == ["pool"]
    assert sorted(p.name for p in data.iterdir()) == ["pool"]
    (batch,) = (data / "pool").iterdir()
    assert batch.samefile(merged / "pool" / batch.name)


def _merge_inputs(tmp_path: Path) -> tuple[Path, dict[str, Path], Path, Path]:
    """A candidate folder with one PPO batch, empty current folders, a PPO agent and a student."""
    cand = tmp_path / "candidate"
    cand.mkdir()
    (cand / "ml-decisions-ppo-gen001-a1.jsonl").write_text("the candidate\n")
    current = {n: tmp_path / n for n in ("pool", "rejected", "frozen", "students")}
    for d in current.values():
        d.mkdir()
    model, student = tmp_path / "ppo.pt", tmp_path / "student.pt"
    model.write_bytes(b"ppo")
    student.write_bytes(b"student")
    return cand, current, model, student


def test_merge_names_its_output_and_removes_a_leftover_tmp(tmp_path: Path):
    cand, current, model, student = _merge_inputs(tmp_path)
    locked = tmp_path / "locked"
    locked.mkdir()
    with immutable(locked), pytest.raises(WriteError) as e:
        merge_generation(True, cand, model, student, current, locked / "merged", generation=1)
    assert str(e.value) == f"cannot write {locked / 'merged'} (creating {locked / 'merged.tmp'}): Operation not permitted"
    out = tmp_path / "merged"
    leftover = tmp_path / "merged.tmp"  # a killed merge's
    (leftover / "pool").mkdir(parents=True)
    (leftover / "pool/ml-decisions-ppo-gen000-a9.jsonl").write_text("half built\n")
    merge_generation(True, cand, model, student, current, out, generation=1)
    assert not leftover.exists()
    assert sorted(str(p.relative_to(out)) for p in out.rglob("*") if p.is_file()) == [
        "frozen/gen001.pt",
        "pool/ml-decisions-ppo-gen001-a1.jsonl",
        "students/gen001.pt",
    ]


def test_merge_stage_unwritable_output_is_one_line_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture):
    cand, current, model, student = _merge_inputs(tmp_path)
    (tmp_path / "params.yaml").write_text(yaml_text(tiny_params()))
    (tmp_path / "gate.json").write_text('{"gate/accepted": true}')
    locked = tmp_path / "locked"
    locked.mkdir()
    args = ["--params", str(tmp_path / "params.yaml"), "--no-progress", "--gate", str(tmp_path / "gate.json"),
            "--candidate", str(cand), "--model", str(model), "--student", str(student),
            *(a for n, d in current.items() for a in (f"--{n}", str(d))),
            "--out", str(locked / "merged"), "--metrics", str(tmp_path / "merge.json")]  # fmt: skip
    with immutable(locked):
        code = merge.main(args)
    err = capsys.readouterr().err
    assert code == 2 and "Traceback" not in err and not (tmp_path / "merge.json").exists()
    assert err.splitlines()[-1] == (
        f"error: cannot write {locked / 'merged'} (creating {locked / 'merged.tmp'}): Operation not permitted"
    )
