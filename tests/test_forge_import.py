"""Teacher data from Forge: ``python loop.py import-forge``, its labels and the teacher-folder guard.

Checks:
* Importing four kinds of Forge file (``tests/fixtures/forge/import/``: a worker ``-t3`` file
  with a truncated last line and unknown cards, a CRLF file with per-source commander damage,
  a 6-player pod, a file with bad lines first, in the middle, back to back and last) keeps
  every good line, reports every bad line as ``file:line: field: problem`` and leaves every
  input file as it was (md5 before and after); the copies read back with the strict reader.
* Nothing is overwritten: a second import is "already imported", another content under a
  taken name gets a new name, a non-Forge name gets a Forge name.
* The card table: errors name file, line and card; a built-in card cannot change kind; a
  merge that would change a kind is refused.
* Issue #12 item 8: a Forge attack without a target is a partial label (any attack on an
  opponent still in the game), cards of the user table are labelled by kind, the train stage
  keeps the good lines of a file with bad lines and reports non-trainable decisions by
  reason with the most frequent unknown cards; the share of trainable decisions of the
  realistic worker file goes from 17/84 (built-in labels) to 45/84; the partial-label loss
  moves the probability onto the allowed set.
* The walkthrough's defects of ``import-forge``: a missing or folder ``--cards`` is a one-line
  error (exit 2, nothing written); ``--weight`` must be finite and >= 0 (argparse); games
  already in ``data/forge`` (by their records) are left out (a CRLF copy is "already imported"); a UTF-8 BOM does
  not cost line 1; a card listed twice in a table is an error; the journalled commit message
  names the files before anything is copied.
* Issue #24 items 1 and 3: a game is known by its records (canonical JSON: line endings, a
  BOM, key order and whitespace ignored), not its ``game_id``: two files sharing ids with
  other games both import whole in either order (the same folder, byte for byte), the second
  file's games re-keyed ``<id>~<8 hex>`` with ``forge_game_id`` kept, four games for the
  train/gate loader; a second import adds nothing and reports the counts held; two runs of
  one seed in one file (also back to back) are kept apart; an empty line is a bad line
  (``file:line: empty line``) for the import and every reader.
* A file imported while Forge was still writing it (its first 7 lines), then complete: the
  game grew, only its 11 other decisions are imported under its id (also under a re-keyed
  id), 18 once in all, one game for the train/gate loader; its beginning after the whole
  file is "already imported"; both in one import give, in either order, the folder of the
  complete file alone; a third import adds nothing. A folder argument is refused as
  "is a directory".
* Issue #12 item 7: Forge files in ``data/teacher`` make ``loop.py`` refuse to run (untracked
  or committed) with a message naming ``import-forge``, and nothing is deleted; ``loop.py
  import-forge`` adds them to ``data/forge`` (``dvc add``-tracked, committed) and gives the
  ``forge`` source its weight in ``params.yaml``.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import re
import shutil
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch

import loop
from ml.base.io import DataFileError
from ml.base.jsonl import iter_jsonl
from ml.config.sections import TrainParams
from ml.config.yaml_file import safe_yaml
from ml.data.batch_files import read_records
from ml.data.dataset import load_teacher
from ml.data.decisions import DecisionSet, encode_records
from ml.driver.forge_command import import_command
from ml.driver.forge_import import format_report, import_files, read_games
from ml.driver.teacher_folder import FORGE_DIR, foreign_teacher_files
from ml.game.commander.actions import NUM_ACTIONS, attack_action
from ml.game.commander.encoding import RecordEncoder, label_record
from ml.game.commander.forge import CARD_TABLE, ForgeEncoder, load_card_table, merge_card_tables
from ml.game.commander.forge_record import DecisionRecord
from ml.learn.settings import RunSettings
from ml.learn.supervised import accuracy, train_student
from tests.conftest import git, tiny_params, yaml_text

FIX = Path(__file__).parent / "fixtures" / "forge" / "import"
WORKER = FIX / "ml-decisions-7c1e4b2a-t3.jsonl"
CRLF = FIX / "ml-decisions-5d0c3f19.jsonl"
POD6 = FIX / "ml-decisions-a6b2e9d4.jsonl"
BAD = FIX / "ml-decisions-badc0de5-t2.jsonl"
CARDS = FIX / "cards.yaml"
BAD_LINES = {  # line -> field (None: the line is not a JSON object at all; line 5 is empty)
    1: None, 4: "players.2.life", 5: None, 7: "phase", 8: "players.1.cmdr_dmg", 10: None, 11: "game_outcome",
    13: "players", 14: "source", 15: None, 16: "turn",
}  # fmt: skip


def md5(path: Path) -> str:
    return hashlib.md5(path.read_bytes()).hexdigest()


@pytest.fixture(scope="module")
def encoder() -> RecordEncoder:
    return RecordEncoder()


# --------------------------------------------------------------------------- import


def test_import_four_kinds_keeps_good_lines_reports_bad_ones(tmp_path: Path) -> None:
    sources = [WORKER, CRLF, POD6, BAD]
    before = {p: md5(p) for p in sources}
    reports = import_files(sources, tmp_path / "forge")
    assert {p: md5(p) for p in sources} == before  # the inputs are only read
    assert [(r.status, r.decisions, len(r.bad)) for r in reports] == [
        ("imported", 84, 1), ("imported", 18, 0), ("imported", 20, 0), ("imported", 5, len(BAD_LINES)),
    ]  # fmt: skip
    worker, crlf, pod6, bad = reports
    assert (worker.bad[0].line, worker.bad[0].field) == (85, None) and "truncated last line" in str(worker.bad[0])
    assert {e.line: e.field for e in bad.bad} == BAD_LINES
    text = format_report(reports, tmp_path)
    assert f"{BAD}:5: empty line" in text
    for line, field in BAD_LINES.items():
        assert f"{BAD}:{line}: {field + ': ' if field else ''}" in text
    assert f"{WORKER}:85: truncated last line" in text
    # the copies: same names, good lines byte for byte (CRLF kept), and they read strictly
    assert [r.dest.name for r in reports] == [p.name for p in sources]
    assert crlf.dest.read_bytes() == CRLF.read_bytes() and b"\r\n" in crlf.dest.read_bytes()
    assert worker.dest.read_bytes() == WORKER.read_bytes()[: WORKER.read_bytes().rindex(b"\n") + 1]
    good_bad = [r for r in read_records(bad.dest)]
    assert len(good_bad) == 5 and all(isinstance(r, DecisionRecord) and r.source == "forge" for r in good_bad)
    assert {len(r.players) for r in read_records(pod6.dest)} == {6}
    assert any(isinstance(p.cmdr_dmg, dict) and len(p.cmdr_dmg) > 1 for r in read_records(crlf.dest) for p in r.players)


def test_import_never_overwrites(tmp_path: Path) -> None:
    forge = tmp_path / "forge"
    first = import_files([CRLF], forge)[0]
    kept = md5(first.dest)
    assert import_files([CRLF], forge)[0].status == "already imported"
    other = tmp_path / "src" / CRLF.name  # same name, other content
    other.parent.mkdir()
    other.write_bytes(POD6.read_bytes())
    rep = import_files([other], forge)[0]
    digest = hashlib.sha256(POD6.read_bytes()).hexdigest()[:8]
    assert rep.status == "imported" and rep.dest.name == f"ml-decisions-{digest}.jsonl" and "is taken" in rep.notes[0]
    assert md5(first.dest) == kept and md5(other) == md5(POD6)
    renamed = tmp_path / "src" / "forge-run-2.jsonl"  # not a Forge file name
    renamed.write_bytes(WORKER.read_bytes())
    rep = import_files([renamed], forge)[0]
    assert rep.status == "imported" and rep.dest.name.startswith("ml-decisions-") and rep.dest.parent == forge
    missing = import_files([tmp_path / "nope.jsonl"], forge)[0]
    assert missing.status == "refused" and missing.notes == ["no such file"]
    assert sorted(p.name for p in forge.iterdir()) == sorted([CRLF.name, f"ml-decisions-{digest}.jsonl", rep.dest.name])


def test_card_table_errors(tmp_path: Path, encoder: RecordEncoder) -> None:
    table = load_card_table(CARDS, encoder.pool)
    assert table["Cultivate"] == "ramp" and table["Lim-Dûl's Vault"] == "draw" and table["Sol Ring"] == "ramp"
    bad = tmp_path / "cards.yaml"
    bad.write_text("Cultivate: ramp\nLightning Greaves: equipment\n", encoding="utf-8")
    with pytest.raises(DataFileError, match=r"cards\.yaml:2: Lightning Greaves: kind must be one of") as info:
        load_card_table(bad, encoder.pool)
    assert (info.value.line, info.value.field) == (2, "Lightning Greaves")
    bad.write_text("Cultivate: ramp\nSol Ring: creature\n", encoding="utf-8")
    with pytest.raises(DataFileError, match=r"cards\.yaml:2: Sol Ring: a built-in card of kind 'ramp'"):
        load_card_table(bad, encoder.pool)
    with pytest.raises(DataFileError, match=r"new\.yaml: Cultivate: kind 'draw', but .*has 'ramp'"):
        merge_card_tables({"Cultivate": "ramp"}, {"Cultivate": "draw"}, Path("new.yaml"), Path("data/forge/cards.yaml"))


# --------------------------------------------------------------------------- the walkthrough's defects


class FakeLoop:
    """What ``import_command`` uses of the ``Loop``, without git or DVC: journal and commit messages, echoes."""

    def __init__(self, root: Path) -> None:
        self.root, self.journal, self.commits, self.echoed = root, list[str](), list[str](), list[str]()
        (root / "params.yaml").write_text(yaml_text(tiny_params()))

    def path(self, rel: str) -> Path:
        return self.root / rel

    def load_state(self) -> SimpleNamespace:
        return SimpleNamespace(in_flight=None)

    def echo(self, message: str) -> None:
        self.echoed.append(message)

    def git(self, *args: str) -> str:
        return ""

    def set_params(self, updates: dict, message: str) -> None:
        self.commits.append(message)

    @contextlib.contextmanager
    def committing(self, message: str, paths: list[str], dvc_add: tuple[str, ...] = ()) -> Iterator[dict[str, str]]:
        self.journal.append(message)  # what an interrupted import would commit
        commit = {"message": message}
        yield commit
        self.commits.append(commit["message"])


def test_cards_missing_or_a_folder_is_a_one_line_error_nothing_written(tmp_path: Path) -> None:
    folder = tmp_path / "tables"
    folder.mkdir()
    for cards in (tmp_path / "nope.yaml", folder):
        fake = FakeLoop(tmp_path)
        assert import_command(fake, [CRLF], cards, 1.0) == 2
        assert len(fake.echoed) == 1 and "\n" not in fake.echoed[0] and f"{cards}:" in fake.echoed[0], fake.echoed
        assert fake.journal == fake.commits == [] and not (tmp_path / FORGE_DIR).exists()


@pytest.mark.parametrize("weight", ["-1", "inf", "nan", "-0.5", "x"])
def test_weight_is_checked_by_argparse_before_any_work(
    weight: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as info:
        loop.main(["--repo", str(tmp_path), "import-forge", "--weight", weight, str(CRLF)])
    assert info.value.code == 2 and "argument --weight" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []
    assert loop.parse_args(["import-forge", "--weight", "0", str(CRLF)]).weight == 0.0


def test_games_already_imported_are_left_out(tmp_path: Path) -> None:
    forge, src = tmp_path / "forge", tmp_path / "src"
    src.mkdir()
    assert import_files([CRLF], forge)[0].status == "imported"
    lf = src / "ml-decisions-0000aaaa.jsonl"  # the same games with LF endings: other bytes, same decisions
    lf.write_bytes(CRLF.read_bytes().replace(b"\r\n", b"\n"))
    mixed = src / "ml-decisions-0000bbbb.jsonl"  # imported games repeated, plus a new game
    mixed.write_bytes(CRLF.read_bytes() + POD6.read_bytes())
    before = {p: md5(p) for p in (lf, mixed)}
    again, grown = import_files([lf, mixed], forge)
    assert (again.status, again.held, again.decisions, again.dest) == ("already imported", 18, 0, forge / CRLF.name)
    assert (grown.status, grown.decisions, grown.held) == ("imported", 20, 18)
    assert "18 decisions of 1 games already imported, left out" in grown.notes
    assert "18 decisions of 1 games already imported, left out" in format_report([again, grown], tmp_path)
    assert grown.dest == forge / mixed.name and grown.dest.read_bytes() == POD6.read_bytes()
    assert {p: md5(p) for p in (lf, mixed)} == before and md5(forge / CRLF.name) == md5(CRLF)
    records = [r for p in sorted(forge.glob("*.jsonl")) for r in read_records(p)]
    assert len(records) == 18 + 20  # each decision once
    # the same file again, and a copy of it under its own name: nothing new
    assert [r.status for r in import_files([mixed, CRLF], forge)] == ["already imported", "already imported"]
    assert sorted(p.name for p in forge.iterdir()) == sorted([CRLF.name, mixed.name])


WORKER_IDS = ("game-1-307404304", "game-5-533458913")
WORKER_GOOD = WORKER.read_bytes()[: WORKER.read_bytes().rindex(b"\n") + 1]  # without the truncated last line


def _relabel(data: bytes, ids: dict[str, str]) -> bytes:
    """``data`` with the games ``ids`` names under other ids (the bytes otherwise as they are)."""
    for old, new in ids.items():
        data = data.replace(f'"game_id":"{old}"'.encode(), f'"game_id":"{new}"'.encode())
    return data


def _identities(*paths: Path) -> Counter[str]:
    return Counter(g.identity for p in paths for g in read_games(p, []))


def _folder(forge: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(forge.iterdir())}


def test_games_sharing_ids_with_other_games_import_whole_in_either_order(tmp_path: Path) -> None:
    rerun = tmp_path / "src" / "ml-decisions-0000cccc.jsonl"  # a run with the worker's seed: its ids, other games
    rerun.parent.mkdir()
    rerun.write_bytes(
        _relabel(CRLF.read_bytes(), {"game-2-151847156": WORKER_IDS[0]})  # a 4-player game, CRLF
        + _relabel(POD6.read_bytes(), {"game-5-585738843": WORKER_IDS[1]})  # a 6-player game
    )
    sources, good = [WORKER, rerun], {WORKER: WORKER_GOOD, rerun: rerun.read_bytes()}
    expected = _identities(*sources)
    assert len(expected) == 4 and set(expected.values()) == {1}
    folders = []
    for i, order in enumerate([sources, sources[::-1]]):
        forge = tmp_path / f"forge{i}"
        reports = {r.source: r for r in import_files(order, forge)}
        assert [(reports[p].status, reports[p].decisions, reports[p].held) for p in sources] == [
            ("imported", 84, 0), ("imported", 38, 0),
        ]  # fmt: skip
        assert _identities(*forge.glob("*.jsonl")) == expected  # every game once, by its records
        (kept,) = [r for r in reports.values() if not r.rekeyed]  # the file taken first keeps its ids
        (moved,) = [r for r in reports.values() if r.rekeyed]
        assert kept.imported_to.read_bytes() == good[kept.source]  # byte for byte
        assert [old for old, _ in moved.rekeyed] == list(WORKER_IDS)
        records = [r for p in sorted(forge.glob("*.jsonl")) for r in read_records(p)]
        assert len(records) == 84 + 38 and len({r.game_id for r in records}) == 4
        for old, new in moved.rekeyed:
            assert re.fullmatch(rf"{old}~[0-9a-f]{{8}}", new)
            assert {r.forge_game_id for r in records if r.game_id == new} == {old}
        assert {r.forge_game_id for r in records if r.game_id in WORKER_IDS} == {None}
        ends = [line.endswith(b"\r\n") for line in moved.imported_to.read_bytes().splitlines(keepends=True)]
        assert ends == [line.endswith(b"\r\n") for line in good[moved.source].splitlines(keepends=True)]  # CRLF kept
        line = next(
            s
            for s in format_report(list(reports.values()), tmp_path).splitlines()
            if s.startswith(f"imported: {moved.source} ")
        )
        assert "2 games re-keyed" in line and all(f"{old} -> {new}" in line for old, new in moved.rekeyed)
        _, _, stats = load_teacher([], 0.12, ForgeEncoder(RecordEncoder()), [forge])  # the train and gate loader
        assert (stats["teacher_games"], stats["teacher_decisions"]) == (4, 84 + 38)
        # a second import adds nothing and counts what the folder holds
        before = _folder(forge)
        again = {r.source: r for r in import_files(order, forge)}
        assert [(again[p].status, again[p].held, again[p].decisions) for p in sources] == [
            ("already imported", 84, 0), ("already imported", 38, 0),
        ]  # fmt: skip
        text = format_report(list(again.values()), forge)
        assert (
            f"already imported: {WORKER} -> {kept.dest.name if kept.source == WORKER else moved.dest.name}: 84 decisions"
            in text
        )
        assert _folder(forge) == before
        folders.append(before)
    assert folders[0] == folders[1]  # names, ids and bytes: the order of the arguments makes no difference


def test_one_file_with_two_runs_of_one_seed_keeps_both(tmp_path: Path) -> None:
    forge, src = tmp_path / "forge", tmp_path / "src"
    src.mkdir()
    run1 = _relabel(CRLF.read_bytes(), {"game-2-151847156": "game-0-7"}) + _relabel(
        POD6.read_bytes(), {"game-5-585738843": "game-1-7"}
    )
    run2 = _relabel(WORKER_GOOD, {WORKER_IDS[0]: "game-0-7", WORKER_IDS[1]: "game-1-7"})
    both = src / "ml-decisions-0000dddd.jsonl"
    both.write_bytes(run1 + run2 + POD6.read_bytes() * 2)  # and one game twice
    rep = import_files([both], forge)[0]
    assert (rep.status, rep.decisions, rep.held, rep.repeated) == ("imported", 18 + 20 + 84 + 20, 0, 20)
    assert [old for old, _ in rep.rekeyed] == ["game-0-7", "game-1-7"]
    (_, new0), (_, new1) = rep.rekeyed
    counts = Counter(r.game_id for r in read_records(rep.imported_to))
    assert counts == {"game-0-7": 18, "game-1-7": 20, new0: 68, new1: 16, "game-5-585738843": 20}
    assert rep.imported_to.read_bytes().startswith(run1)  # the first run as it was
    assert "20 decisions repeat a game earlier in the file, left out" in format_report([rep], tmp_path)
    again = import_files([both], forge)[0]
    assert (again.status, again.held, again.repeated, again.dest) == ("already imported", 142, 20, rep.dest)
    # a one-game run twice: the same id back to back, the turn starting again
    twice = src / "ml-decisions-0000eeee.jsonl"
    first_game = b"".join(line for line in WORKER_GOOD.splitlines(keepends=True) if WORKER_IDS[0].encode() in line)
    twice.write_bytes(
        _relabel(CRLF.read_bytes(), {"game-2-151847156": "game-0-9"}) + _relabel(first_game, {WORKER_IDS[0]: "game-0-9"})
    )
    rep = import_files([twice], forge)[0]
    assert (rep.decisions, [old for old, _ in rep.rekeyed]) == (18 + 68, ["game-0-9"])


CRLF_ID = "game-2-151847156"  # CRLF's one game: 18 decisions
CRLF_LINES = CRLF.read_bytes().splitlines(keepends=True)


def _decisions(forge: Path) -> Counter[tuple[str, bytes]]:
    """Every decision ``forge`` holds, as ``(game_id, digest of its canonical JSON)`` -> count."""
    return Counter((g.game_id, d) for p in sorted(forge.glob("*.jsonl")) for g in read_games(p, []) for d in g.line_digests)


def _prefix(tmp_path: Path, n: int = 7) -> Path:
    """CRLF as Forge was still writing it: its first ``n`` lines, under the same name."""
    part = tmp_path / "writing" / CRLF.name
    part.parent.mkdir(exist_ok=True)
    part.write_bytes(b"".join(CRLF_LINES[:n]))
    return part


def test_a_file_imported_while_forge_wrote_it_grows(tmp_path: Path) -> None:
    forge, part = tmp_path / "forge", _prefix(tmp_path)
    first = import_files([part], forge)[0]
    assert (first.status, first.decisions) == ("imported", 7)
    rep = import_files([CRLF], forge)[0]  # the file complete: its game grew, nothing re-keyed
    assert (rep.status, rep.decisions, rep.held, rep.repeated, rep.rekeyed) == ("imported", 11, 7, 0, [])
    assert rep.grown == [(CRLF_ID, 11, 7)]
    text = format_report([rep], tmp_path)
    assert f"game {CRLF_ID} grew: 11 new decisions imported (7 already held)" in text and "re-keyed" not in text
    assert rep.imported_to != first.dest and rep.imported_to.read_bytes() == b"".join(CRLF_LINES[7:])  # byte for byte
    held = _decisions(forge)
    assert Counter(gid for gid, _ in held.elements()) == {CRLF_ID: 18}  # each decision once: 7 + 11, not 7 + 18
    assert +held == Counter((CRLF_ID, d) for g in read_games(CRLF, []) for d in g.line_digests)
    _, _, stats = load_teacher([], 0.12, ForgeEncoder(RecordEncoder()), [forge])  # the train and gate loader
    assert (stats["teacher_games"], stats["teacher_decisions"]) == (1, 18)  # one game over two files
    # a third import of the complete file adds nothing and counts all 18 (held in two files)
    before = _folder(forge)
    again = import_files([CRLF], forge)[0]
    assert (again.status, again.held, again.decisions, again.dest) == ("already imported", 18, 0, None)
    assert f"its games are in {', '.join(sorted([first.imported_to.name, rep.imported_to.name]))}" in again.notes
    assert import_files([part], forge)[0].held == 7 and _folder(forge) == before
    # one file holding the beginning, then the whole game again (a new run: the turn goes back)
    both = tmp_path / "ml-decisions-0000f00d.jsonl"
    both.write_bytes(b"".join(CRLF_LINES[:7]) + CRLF.read_bytes())
    alone = import_files([both], tmp_path / "forge-both")[0]
    assert (alone.decisions, alone.repeated, alone.rekeyed) == (18, 7, [])
    assert alone.imported_to.read_bytes() == CRLF.read_bytes()


def test_a_beginning_of_a_held_game_is_already_imported(tmp_path: Path) -> None:
    forge, part = tmp_path / "forge", _prefix(tmp_path)
    assert import_files([CRLF], forge)[0].decisions == 18
    before = _folder(forge)
    rep = import_files([part], forge)[0]
    assert (rep.status, rep.held, rep.decisions, rep.dest) == ("already imported", 7, 0, forge / CRLF.name)
    assert f"already imported: {part} -> forge/{CRLF.name}: 7 decisions" in format_report([rep], tmp_path)
    assert _folder(forge) == before


def test_a_beginning_and_its_whole_file_in_one_import_either_order(tmp_path: Path) -> None:
    lf = tmp_path / "lf" / CRLF.name  # the same game with LF endings: another MD5
    lf.parent.mkdir()
    lf.write_bytes(CRLF.read_bytes().replace(b"\r\n", b"\n"))
    cases = []
    for k, (whole, n) in enumerate([(CRLF, 7), (lf, 9)]):
        part = tmp_path / f"writing{k}" / CRLF.name
        part.parent.mkdir()
        part.write_bytes(b"".join(whole.read_bytes().splitlines(keepends=True)[:n]))
        cases.append((whole, part, n))
    assert any(md5(part) < md5(whole) for whole, part, _ in cases)  # one beginning comes first by MD5 alone
    for k, (whole, part, n) in enumerate(cases):
        folders = []
        for i, order in enumerate([[part, whole], [whole, part]]):
            forge = tmp_path / f"forge{k}-{i}"
            reports = {r.source: r for r in import_files(order, forge)}
            assert (reports[whole].status, reports[whole].decisions) == ("imported", 18)
            assert (reports[part].status, reports[part].held, reports[part].decisions) == ("already imported", n, 0)
            folders.append(_folder(forge))
        alone = tmp_path / f"forge{k}-alone"  # the complete file alone, then its beginning: the same
        import_files([whole], alone)
        import_files([part], alone)
        assert folders[0] == folders[1] == _folder(alone) == {CRLF.name: whole.read_bytes()}
        grown = tmp_path / f"forge{k}-grown"  # the beginning first, in its own import: other files, the same decisions
        import_files([part], grown)
        import_files([whole], grown)
        assert _decisions(grown) == _decisions(alone) and sum(_decisions(grown).values()) == 18


def test_a_rekeyed_game_grows_under_its_new_id(tmp_path: Path) -> None:
    forge = tmp_path / "forge"
    other = tmp_path / "ml-decisions-0000beef.jsonl"  # another game holds CRLF's id first
    other.write_bytes(_relabel(POD6.read_bytes(), {"game-5-585738843": CRLF_ID}))
    import_files([other], forge)
    first = import_files([_prefix(tmp_path)], forge)[0]
    ((_, new_id),) = first.rekeyed
    rep = import_files([CRLF], forge)[0]
    assert (rep.decisions, rep.held, rep.rekeyed, rep.grown) == (11, 7, [], [(new_id, 11, 7)])
    records = list(read_records(rep.imported_to))
    assert {(r.game_id, r.forge_game_id) for r in records} == {(new_id, CRLF_ID)}  # rewritten, Forge's id kept
    assert all(line.endswith(b"\r\n") for line in rep.imported_to.read_bytes().splitlines(keepends=True))
    assert Counter(gid for gid, _ in _decisions(forge).elements()) == {CRLF_ID: 20, new_id: 18}
    assert import_files([CRLF], forge)[0].status == "already imported"


def test_a_folder_argument_is_refused_as_a_directory(tmp_path: Path) -> None:
    folder = tmp_path / "exports"
    folder.mkdir()
    shutil.copy(CRLF, folder)
    rep = import_files([folder], tmp_path / "forge")[0]
    assert (rep.status, rep.notes) == ("refused", ["is a directory"])
    assert format_report([rep], tmp_path) == f"refused: {folder}: 0 decisions (is a directory)"
    assert not (tmp_path / "forge").exists() or not any((tmp_path / "forge").iterdir())


def test_identity_ignores_line_endings_bom_key_order_and_whitespace(tmp_path: Path) -> None:
    forge = tmp_path / "forge"
    import_files([CRLF], forge)
    lines = CRLF.read_bytes().splitlines()
    sorted_keys = b"\n".join(json.dumps(json.loads(line), sort_keys=True, indent=None).encode() for line in lines)
    copy = tmp_path / "ml-decisions-0000ffff.jsonl"
    copy.write_bytes(b"\xef\xbb\xbf" + sorted_keys + b"\n")  # LF, a BOM, other key order, spaces after separators
    assert _identities(copy) == _identities(CRLF)
    rep = import_files([copy], forge)[0]
    assert (rep.status, rep.held, rep.dest) == ("already imported", 18, forge / CRLF.name)
    changed = tmp_path / "ml-decisions-0000abcd.jsonl"  # one value changed: another game under the same id
    changed.write_bytes(CRLF.read_bytes().replace(b'"life":19', b'"life":18', 1))
    rep = import_files([changed], forge)[0]
    assert rep.status == "imported" and rep.rekeyed[0][0] == "game-2-151847156" and rep.decisions == 18


def test_empty_line_in_a_forge_file_is_a_bad_line(tmp_path: Path) -> None:
    lines = CRLF.read_bytes().splitlines(keepends=True)
    src = tmp_path / "src" / CRLF.name
    src.parent.mkdir()
    src.write_bytes(b"".join(lines[:3]) + b"\r\n" + b"".join(lines[3:10]) + b"  \t\n" + b"".join(lines[10:]))
    rep = import_files([src], tmp_path / "forge")[0]
    assert [(e.line, e.field) for e in rep.bad] == [(4, None), (12, None)]
    text = format_report([rep], tmp_path)
    assert f"{src}:4: empty line" in text and f"{src}:12: empty line" in text
    assert (rep.status, rep.decisions) == ("imported", 18) and rep.imported_to.read_bytes() == CRLF.read_bytes()
    # every reader: the strict one names the line, the tolerant one (train, gate) reports it; a final newline is no line
    with pytest.raises(DataFileError, match=rf"{re.escape(str(src))}:4: empty line"):
        list(read_records(src))
    bad: list[DataFileError] = []
    assert len(list(read_records(src, on_error=bad.append))) == 18 and [e.line for e in bad] == [4, 12]
    assert import_files([CRLF], tmp_path / "forge2")[0].bad == [] and CRLF.read_bytes().endswith(b"\n")


def test_utf8_bom_keeps_line_one(tmp_path: Path) -> None:
    bom = tmp_path / "src" / CRLF.name
    bom.parent.mkdir()
    bom.write_bytes(b"\xef\xbb\xbf" + CRLF.read_bytes())
    assert [no for no, _ in iter_jsonl(bom)][:2] == [1, 2] and len(list(read_records(bom))) == 18
    rep = import_files([bom], tmp_path / "forge")[0]
    assert (rep.status, rep.decisions, rep.bad) == ("imported", 18, [])
    assert rep.imported_to.read_bytes() == CRLF.read_bytes()  # the mark is not copied


def test_card_listed_twice_is_an_error(tmp_path: Path, encoder: RecordEncoder) -> None:
    table = tmp_path / "cards.yaml"
    table.write_text("Cultivate: ramp\nLightning Greaves: creature\nCultivate: draw\n", encoding="utf-8")
    with pytest.raises(DataFileError, match=r"cards\.yaml:3: Cultivate: listed twice \(first on line 1\)") as info:
        load_card_table(table, encoder.pool)
    assert (info.value.line, info.value.field) == (3, "Cultivate")


def test_journal_names_the_files_before_copying(tmp_path: Path) -> None:
    fake = FakeLoop(tmp_path)
    assert import_command(fake, [CRLF, POD6], CARDS, 1.0) == 0
    first = fake.journal[0]  # what the next start commits if this import is killed while copying
    assert first.startswith("import-forge: 2 Forge file(s), card table") and "see the report" in first
    assert CRLF.name in first and POD6.name in first and CARDS.name in first
    assert fake.commits[0].startswith("import-forge: 2 Forge file(s), 38 decisions, card table")
    assert "train.source_weights.forge = 1.0" in fake.echoed[-1]


# --------------------------------------------------------------------------- issue #12 item 8


def test_item8_forge_decisions_are_trainable(encoder: RecordEncoder) -> None:
    records = list(read_records(WORKER))
    assert len(records) == 84
    before = sum(label_record(r, encoder.pool) is not None for r in records)
    forge_encoder = ForgeEncoder(encoder, load_card_table(CARDS, encoder.pool))
    data, skipped = encode_records(records, forge_encoder)
    assert (before, len(data)) == (17, 45)  # the share measured in the README: 20% -> 54% (the rest: land drops, equipment)
    attacks = [r for r in records if r.action.type == "attack"]
    assert len(attacks) == 18 and int((data.label < 0).sum()) == 18
    by_reason: Counter[str] = Counter()
    for (reason, _), k in skipped.items():
        by_reason[reason] += k
    assert by_reason == {"land_drop": 35, "unknown_card": 4}
    assert skipped[("unknown_card", "Æther Vial")] == 2
    # an attack without target allows attacking exactly the opponents still in the game
    rec = next(r for r in attacks if any(p.life <= 0 for p in r.players))
    allowed = forge_encoder.unlabelled(rec)
    n = len(rec.players)
    alive = {k for k in range(1, n) if rec.players[(rec.active_seat + k) % n].life > 0}
    assert set(np.flatnonzero(allowed)) == {attack_action(k) for k in alive}


def test_item8_train_stage_keeps_good_lines_and_reports_reasons(tmp_path: Path) -> None:
    from stages import train

    forge, teacher, pool = tmp_path / "forge", tmp_path / "teacher", tmp_path / "pool"
    teacher.mkdir(), pool.mkdir(), forge.mkdir()
    shutil.copy(WORKER, forge)  # as if copied by hand: a truncated last line
    shutil.copy(BAD, forge)  # and bad lines (import-forge would have left them out)
    shutil.copy(CARDS, forge / CARD_TABLE)
    params = tmp_path / "params.yaml"
    weights = {"sim": 1.0, "forge": 1.0, "ppo": 0.5}
    params.write_text(yaml_text(tiny_params({"train": {**tiny_params()["train"], "source_weights": weights}})))
    args = ["--params", str(params), "--no-progress", "--teacher", str(teacher), "--forge", str(forge), "--pool", str(pool)]
    assert train.main([*args, "--out", str(tmp_path / "s.pt"), "--metrics", str(tmp_path / "m.json")]) == 0
    m = json.loads((tmp_path / "m.json").read_text())
    assert m["train/forge_files"] == 2 and m["train/forge_bad_lines"] == len(BAD_LINES) + 1
    assert m["train/teacher_decisions"] == 84 + 5
    assert m["train/non_trainable_by_reason"]["unknown_card"] >= 4 and "land_drop" in m["train/non_trainable_by_reason"]
    assert m["train/non_trainable_top"]["unknown_card"]["Æther Vial"] == 2
    assert m["train/partial_label_decisions"] >= 18
    assert m["train/available_decisions"]["forge"] > 0 and m["train/sampled_share"] == {"forge": 1.0}


def test_partial_label_loss_puts_mass_on_the_allowed_set() -> None:
    rng = np.random.default_rng(0)
    n = 256
    attacks = [attack_action(k) for k in (1, 2, 3)]
    targets = np.zeros((n, NUM_ACTIONS), bool)
    targets[:, attacks] = True
    data = DecisionSet(
        rng.normal(size=(n, 8)).astype(np.float32), np.ones((n, NUM_ACTIONS), bool), np.full(n, -1, np.int64),
        np.zeros(n, np.float32), np.full(n, "forge", dtype=object), np.arange(n).astype(str).astype(object), targets,
    )  # fmt: skip
    cfg = TrainParams(epochs=3, batch_size=64, lr=1e-2, hidden_sizes=(16,), samples_per_epoch=2048,
                      source_weights={"forge": 1.0}, value_coef=0.0)  # fmt: skip
    net, _ = train_student(data, data, cfg, RunSettings(0))
    with torch.no_grad():
        logits, _ = net(torch.from_numpy(data.obs))
        p = logits.softmax(-1).numpy()
    assert p[:, attacks].sum(1).min() > 0.95  # the set's mass, not one action's
    assert accuracy(net, data) == 1.0


# --------------------------------------------------------------------------- issue #12 item 7


def _loop(repo: Path, *args: str) -> int:
    return loop.main(["--repo", str(repo), *args])


@pytest.mark.expensive
def test_item7_forge_files_in_teacher_folder(project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    teacher = project / "data" / "teacher"
    teacher.mkdir(parents=True)
    dropped = teacher / WORKER.name
    shutil.copy(WORKER, dropped)
    digest = md5(dropped)
    assert foreign_teacher_files(teacher) == [dropped]
    assert _loop(project) == 2  # refused before any DVC command, not deleted
    err = capsys.readouterr().err
    assert "python loop.py import-forge data/teacher/" + WORKER.name in err and md5(dropped) == digest
    git(project, "add", "-f", "data/teacher")  # committed: still refused, still there
    git(project, "commit", "-qm", "forge files in the teacher folder")
    assert _loop(project) == 2 and "import-forge" in capsys.readouterr().err and md5(dropped) == digest
    # the working path: import them
    assert _loop(project, "import-forge", str(dropped), "--cards", str(CARDS)) == 0
    out = capsys.readouterr().out
    assert f"{dropped}:85: truncated last line" in out and "imported:" in out
    assert md5(dropped) == digest and (project / "data/forge" / WORKER.name).exists()
    tracked = git(project, "ls-files", "data/forge.dvc", "params.yaml").split()
    assert tracked == ["data/forge.dvc", "params.yaml"] and git(project, "status", "--porcelain", "data/forge.dvc") == ""
    assert safe_yaml().load((project / "params.yaml").read_text())["train"]["source_weights"]["forge"] == 1.0
    assert "import-forge: 1 Forge file(s), 84 decisions" in git(project, "log", "-2", "--format=%s")
    assert load_card_table(project / "data/forge" / CARD_TABLE, RecordEncoder().pool)["Cultivate"] == "ramp"
    # a second import changes nothing and commits nothing
    head = git(project, "rev-parse", "HEAD")
    assert _loop(project, "import-forge", str(dropped)) == 0 and git(project, "rev-parse", "HEAD") == head
    assert "already imported" in capsys.readouterr().out
    train, holdout, stats = load_teacher([], 0.12, ForgeEncoder(RecordEncoder()), [project / "data/forge"])
    assert stats["teacher_decisions"] == 84 and len(train) + len(holdout) > 17
