"""DVC's record files cut short by a kill during DVC's write (``ml.driver.torn``).

Checks: a ``dvc.lock`` or ``data/*.dvc`` cut short is put back as at HEAD while the loop had work
in progress, one line each, and a pointer HEAD never had is removed; the same file with nothing
in progress (an edit by hand) is refused in one line naming it and the command that restores
it, and nothing is written; whole files are left alone. (The kill chain of tests/test_faults.py
cuts both kinds short inside a real run and converges.)
"""

from __future__ import annotations

from pathlib import Path

import pytest

from ml.driver.torn import restore_torn, unloadable
from ml.driver.workspace import LoopError

LOCK = """\
schema: '2.0'
stages:
  teacher:
    cmd: python -m stages.teacher --out data/teacher
    outs:
    - path: data/teacher
      hash: md5
      md5: 0123456789abcdef0123456789abcdef.dir
      size: 10
      nfiles: 1
"""
POINTER = """\
outs:
- md5: 0123456789abcdef0123456789abcdef.dir
  size: 10
  nfiles: 1
  hash: md5
  path: pool
"""


def _repo(tmp_path: Path) -> Path:
    (tmp_path / "data").mkdir()
    (tmp_path / "dvc.lock").write_text(LOCK)
    (tmp_path / "data/pool.dvc").write_text(POINTER)
    return tmp_path


def test_whole_files_load_and_are_left_alone(tmp_path: Path):
    root = _repo(tmp_path)
    assert unloadable(root / "dvc.lock") is None and unloadable(root / "data/pool.dvc") is None
    assert restore_torn(root, lambda rel: None, True, print) == []


def test_cut_short_in_progress_is_put_back_as_at_head(tmp_path: Path):
    root = _repo(tmp_path)
    (root / "dvc.lock").write_text(LOCK[: LOCK.index("      size")] + "      si")  # a prefix: the write stopped here
    (root / "data/pool.dvc").write_bytes(POINTER.replace("pool", "pöol").encode()[: POINTER.index("pool") + 2])  # inside "ö"
    (root / "data/frozen.dvc").write_text("outs:\n- md5: 01")  # made by this attempt: HEAD has none
    assert unloadable(root / "dvc.lock") and unloadable(root / "data/pool.dvc")
    head = {"dvc.lock": LOCK.encode(), "data/pool.dvc": POINTER.encode()}
    said: list[str] = []
    assert restore_torn(root, head.get, True, said.append) == ["dvc.lock", "data/frozen.dvc", "data/pool.dvc"]
    assert (root / "dvc.lock").read_text() == LOCK and (root / "data/pool.dvc").read_text() == POINTER
    assert not (root / "data/frozen.dvc").exists()
    assert len(said) == 3 and all("cut short by a kill during DVC's write" in line for line in said)


def test_cut_short_with_nothing_in_progress_is_refused_in_one_line(tmp_path: Path):
    root = _repo(tmp_path)
    torn = LOCK[:30]
    (root / "dvc.lock").write_text(torn)
    with pytest.raises(LoopError) as refused:
        restore_torn(root, lambda rel: LOCK.encode(), False, print)
    said = str(refused.value)
    assert said.startswith("dvc.lock does not load (") and "`git checkout -- dvc.lock`" in said and "\n" not in said
    assert (root / "dvc.lock").read_text() == torn  # nothing written
