"""Tests for the decision-record schema (``ml/data/batch_files.py``) and the file helpers (``ml/base/io.py``).

Checks:
* Real-looking Forge files (``tests/fixtures/forge/``) read as they are: record and game
  counts, raw non-ASCII and control characters in card names, ``cmdr_dmg`` as a summed int
  and as per-source objects, missing zone keys defaulting to empty, ``source`` filled from
  the file name.
* A truncated last line (no newline) is skipped with a warning, or raises when not allowed;
  a bad line anywhere else raises.
* Malformed JSON -> ``DataFileError`` naming file and line; a schema error -> ``RecordError``
  naming file, line and field (``players.2.life``).
* ``classify_file`` table (sim, ppo, forge, worker files, ``.tmp``, unknown names) and
  ``scan_batches`` never including Forge files unless asked.
* A PPO record round-trips write -> read with every field and the key order preserved.
* PPO records missing a required field, with an unknown ``schema_version``, or with an
  inconsistent ``macro_action``/``action_idx`` are rejected with the field named.
* ``BatchWriter`` fills outcome/source/version, counts games and decisions, and a bad
  record leaves nothing of its game.
* ``JsonlWriter`` leaves no final file when an exception happens mid-write;
  ``atomic_write_json`` leaves the old file intact when serialization fails.
"""

from __future__ import annotations

import json
import logging
import re
from pathlib import Path

import pytest

from ml.base.io import DataFileError, atomic_write_json, read_json
from ml.base.jsonl import JsonlWriter, iter_jsonl
from ml.data.batch_files import (
    SCHEMA_VERSION,
    BatchWriter,
    RecordError,
    batch_filename,
    classify_file,
    iter_games,
    read_records,
    record_to_json,
    scan_batches,
)
from ml.game.commander.actions import ACTION_INDEX, NUM_ACTIONS
from ml.game.commander.forge_record import DecisionRecord, cmdr_damage_by_source

FIXTURES = Path(__file__).parent / "fixtures" / "forge"
FORGE_MAIN = FIXTURES / "ml-decisions-3fa9c2e1.jsonl"
FORGE_WORKER = FIXTURES / "ml-decisions-3fa9c2e1-t1.jsonl"
BAD_JSON = FIXTURES / "bad" / "ml-decisions-0badf00d.jsonl"
BAD_SCHEMA = FIXTURES / "bad" / "ml-decisions-0badf00d-t1.jsonl"


def _player(seat: int, **kw: object) -> dict:
    zones = {"hand": [], "battlefield": [], "graveyard": [], "command_zone": []}
    return {"seat": seat, "life": 40, "cmdr_dmg": {}, "mana": 3, "cmdr_tax": 0, "creatures": 1, "lands": 3, **zones, **kw}


def _ppo_record(**kw: object) -> dict:
    mask = [1] * NUM_ACTIONS
    rec = {
        "game_id": "game-7-424242",
        "turn": 4,
        "phase": "combat",
        "active_seat": 1,
        "game_outcome": "win_seat_1",
        "deck_name": "Lim-Dûl Zombies",
        "commander": "Lim-Dûl the Necromancer",
        "archetype": "aggro",
        "players": [
            _player(0, life=33, cmdr_dmg={"1": 7, "2": 3}, hand=["Æther Vial"]),
            _player(1, hand=["Lim-Dûl's Vault", "Bell\x07Ringer"], command_zone=[], library=80, mana_sources=4),
            _player(2, eliminated=True),
        ],
        "action": {
            "type": "attack",
            "card": "",
            "target": "seat 0",
            "raw": "Combat: attacks seat 0",
            "macro_action": "attack_opponent_2",
            "action_idx": ACTION_INDEX["attack_opponent_2"],
        },
        "action_mask": mask,
        "source": "ppo",
        "model_version": "gen-003-a1",
        "generation": 3,
        "reward": 0.25,
        "episode_return": 1.0,
        "schema_version": SCHEMA_VERSION,
    }
    rec.update(kw)
    return rec


# --------------------------------------------------------------------------- real Forge files


def test_forge_main_file_reads_as_is() -> None:
    records = list(read_records(FORGE_MAIN))
    assert len(records) == 18
    games = list(iter_games(records))
    assert [len(g) for g in games] == [9, 5, 4]
    assert [g[0].winner() for g in games] == [3, None, 0]
    assert all(r.source == "forge" and r.schema_version is None and r.reward is None for r in records)
    assert {r.action.type for r in records} == {"land", "cast", "cast_commander", "attack"}
    assert all(r.action.target == "" for r in records)
    assert all(r.action.card == "" for r in records if r.action.type == "attack")
    assert all(len(r.players) == 4 for r in records)
    cards = {r.action.card for r in records}
    assert {"Lim-Dûl's Vault", "Æther Vial", 'Bell\x07Ringer "Deluxe"\tEdition'} <= cards
    assert records[0].commander == "Atraxa, Praetors' Voice"
    # summed int form, and a seat whose zone keys Forge left out
    last = records[-1]
    assert last.players[1].cmdr_dmg == 21
    assert cmdr_damage_by_source(last.players[1].cmdr_dmg) == {-1: 21}
    assert last.players[1].hand == [] and last.players[1].command_zone == []


def test_forge_worker_file_per_source_and_truncated_tail(caplog: pytest.LogCaptureFixture) -> None:
    assert not FORGE_WORKER.read_bytes().endswith(b"\n")
    with caplog.at_level(logging.WARNING, logger="ml.base.io"):
        records = list(read_records(FORGE_WORKER))
    assert len(records) == 5
    assert [len(g) for g in iter_games(records)] == [4, 1]
    assert any("truncated last line" in m and ":6:" in m for m in caplog.messages)
    last_attack = records[3]
    assert last_attack.players[2].cmdr_dmg == {"1": 11, "3": 10}
    assert cmdr_damage_by_source(last_attack.players[2].cmdr_dmg) == {1: 11, 3: 10}
    assert cmdr_damage_by_source(last_attack.players[0].cmdr_dmg) == {1: 18}
    with pytest.raises(DataFileError, match=r"ml-decisions-3fa9c2e1-t1\.jsonl:6: invalid JSON"):
        list(iter_jsonl(FORGE_WORKER, allow_truncated_last=False))


def test_bad_line_mid_file_is_never_skipped(tmp_path: Path) -> None:
    good = FORGE_MAIN.read_text(encoding="utf-8").splitlines()
    path = tmp_path / "ml-decisions-sim-x.jsonl"
    path.write_text(good[0] + "\n" + good[1][:50] + "\n\n" + good[2] + "\n", encoding="utf-8")
    with pytest.raises(DataFileError, match=r"ml-decisions-sim-x\.jsonl:2: invalid JSON: .* \(column (\d+)\)") as info:
        list(iter_jsonl(path))
    column = int(re.search(r"column (\d+)", str(info.value)).group(1))
    assert 40 <= column <= 51  # where the cut line stops, not "column 1" of the line after its newline
    path.write_text('{"game_id": "g", "turn": 1,\n', encoding="utf-8")  # cut after a comma: JSON's error lies past the newline
    with pytest.raises(DataFileError, match=r":1: invalid JSON: Expecting property name .* \(column 29\)"):
        list(iter_jsonl(path))


def test_malformed_json_names_file_and_line() -> None:
    with pytest.raises(DataFileError) as info:
        list(read_records(BAD_JSON))
    e = info.value
    assert not isinstance(e, RecordError)
    assert (e.path, e.line, e.field) == (BAD_JSON, 3, None)
    assert str(e).startswith(f"{BAD_JSON}:3: invalid JSON")


def test_schema_error_names_file_line_and_field() -> None:
    with pytest.raises(RecordError) as info:
        list(read_records(BAD_SCHEMA))
    e = info.value
    assert (e.path, e.line, e.field) == (BAD_SCHEMA, 2, "players.2.life")
    assert str(e).startswith(f"{BAD_SCHEMA}:2: players.2.life: ")
    assert "'forty'" in str(e)


def test_read_json_error_names_file_and_line(tmp_path: Path) -> None:
    path = tmp_path / "m.json"
    path.write_text('{\n  "a": 1,\n  "b": \n}\n', encoding="utf-8")
    with pytest.raises(DataFileError, match=r"m\.json:4: invalid JSON"):
        read_json(path)


# --------------------------------------------------------------------------- file names


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("ml-decisions-sim-gen003-att1-w0.jsonl", "sim"),
        ("ml-decisions-ppo-gen003-att1.jsonl", "ppo"),
        ("ml-decisions-3fa9c2e1.jsonl", "forge"),
        ("ml-decisions-3fa9c2e1-t1.jsonl", "forge"),
        ("ml-decisions-3FA9C2E1-t12.jsonl", "forge"),
        ("ml-decisions-sim-gen003.jsonl.tmp", None),
        ("ml-decisions-3fa9c2e1.jsonl.tmp", None),
        (".ml-decisions-sim-a.jsonl.x1y2.tmp", None),
        ("ml-decisions-foo.jsonl", None),
        ("ml-decisions-3fa9c2e.jsonl", None),
        ("ml-decisions-3fa9c2e1-t.jsonl", None),
        ("ml-decisions-sim-.jsonl", None),
        ("ml-decisions-3fa9c2e1.json", None),
        ("decisions.jsonl", None),
    ],
)
def test_classify_file(name: str, expected: str | None) -> None:
    assert classify_file(Path("some/dir") / name) == expected


def test_batch_filename_round_trips_and_rejects_bad_ids() -> None:
    assert batch_filename("ppo", "gen003-att1") == "ml-decisions-ppo-gen003-att1.jsonl"
    assert classify_file(batch_filename("sim", "g0_w3")) == "sim"
    for source, batch_id in [("forge", "x"), ("sim", ""), ("sim", "a.b"), ("sim", "a/b"), ("ppo", "-a")]:
        with pytest.raises(ValueError):
            batch_filename(source, batch_id)


def test_scan_batches_is_never_a_catch_all(tmp_path: Path) -> None:
    for name in [
        "ml-decisions-sim-b.jsonl",
        "ml-decisions-sim-a.jsonl",
        "ml-decisions-ppo-a.jsonl",
        "ml-decisions-3fa9c2e1.jsonl",
        "ml-decisions-sim-c.jsonl.tmp",
        "ml-decisions-foo.jsonl",
    ]:
        (tmp_path / name).write_text("", encoding="utf-8")
    names = lambda paths: [p.name for p in paths]  # noqa: E731
    assert names(scan_batches(tmp_path)) == [
        "ml-decisions-ppo-a.jsonl",
        "ml-decisions-sim-a.jsonl",
        "ml-decisions-sim-b.jsonl",
    ]
    assert names(scan_batches(tmp_path, sources=("sim",))) == ["ml-decisions-sim-a.jsonl", "ml-decisions-sim-b.jsonl"]
    assert "ml-decisions-3fa9c2e1.jsonl" in names(scan_batches(tmp_path, include_forge=True))
    with pytest.raises(ValueError, match="include_forge"):
        scan_batches(tmp_path, sources=("forge",))
    with pytest.raises(NotADirectoryError):
        scan_batches(tmp_path / "missing")


# --------------------------------------------------------------------------- PPO records


def test_ppo_record_round_trip_preserves_fields_and_key_order(tmp_path: Path) -> None:
    original = _ppo_record()
    path = tmp_path / batch_filename("ppo", "gen003-att1")
    with JsonlWriter(path) as w:
        w.write_line(record_to_json(original))
    line = path.read_text(encoding="utf-8").rstrip("\n")
    assert json.loads(line) == original
    assert list(json.loads(line)) == list(original)  # key order, top level
    assert list(json.loads(line)["players"][1])[:7] == ["seat", "life", "cmdr_dmg", "mana", "cmdr_tax", "creatures", "lands"]
    assert "Lim-Dûl" in line  # non-ASCII written raw
    (record,) = read_records(path)
    assert record.model_dump(exclude_none=True) == original
    assert record_to_json(record) == line


def test_forge_line_rewrites_in_forge_shape() -> None:
    """Rewriting a Forge line keeps its keys and order; zone keys Forge left out come back as []."""
    for line in FORGE_MAIN.read_text(encoding="utf-8").splitlines():
        original = json.loads(line, strict=False)
        rewritten = record_to_json(DecisionRecord.model_validate(original))
        for player in original["players"]:
            for zone in ("hand", "battlefield", "graveyard", "command_zone"):
                player.setdefault(zone, [])
        assert json.loads(rewritten) == original
        assert list(json.loads(rewritten)) == list(original)


@pytest.mark.parametrize("field", ["episode_return", "model_version", "schema_version"])
def test_ppo_record_missing_field_is_rejected(tmp_path: Path, field: str) -> None:
    rec = _ppo_record()
    del rec[field]
    path = tmp_path / "ml-decisions-ppo-x.jsonl"
    path.write_text(json.dumps(_ppo_record()) + "\n" + json.dumps(rec) + "\n", encoding="utf-8")
    with pytest.raises(RecordError) as info:
        list(read_records(path))
    assert (info.value.line, info.value.field) == (2, field)
    assert f":2: {field}: a ppo record requires {field}" in str(info.value)


def test_ppo_record_missing_action_idx_names_nested_field() -> None:
    rec = _ppo_record()
    del rec["action"]["action_idx"]
    with pytest.raises(ValueError, match=r"requires action\.action_idx"):
        DecisionRecord.model_validate(rec)


def test_ppo_source_is_filled_from_file_name(tmp_path: Path) -> None:
    rec = _ppo_record()
    del rec["source"]
    path = tmp_path / "ml-decisions-ppo-x.jsonl"
    path.write_text(json.dumps(rec) + "\n", encoding="utf-8")
    assert next(read_records(path)).source == "ppo"
    path.write_text(json.dumps(_ppo_record(source="sim")) + "\n", encoding="utf-8")
    with pytest.raises(RecordError, match=r":1: source: "):
        list(read_records(path))


def test_unknown_schema_version_is_rejected(tmp_path: Path) -> None:
    path = tmp_path / "ml-decisions-ppo-x.jsonl"
    path.write_text(json.dumps(_ppo_record(schema_version=3, players="reshaped")) + "\n", encoding="utf-8")
    with pytest.raises(RecordError) as info:
        list(read_records(path))
    assert info.value.field == "schema_version"
    assert "unsupported schema_version 3 (this reader knows 1, 2)" in str(info.value)
    with pytest.raises(ValueError, match="unsupported schema_version 9"):
        DecisionRecord.model_validate(_ppo_record(schema_version=9))


@pytest.mark.parametrize(
    ("action", "field"),
    [
        ({"macro_action": "cast_draw", "action_idx": ACTION_INDEX["pass"]}, "action.action_idx"),
        ({"macro_action": "cast_everything"}, "action.macro_action"),
        ({"action_idx": NUM_ACTIONS}, "action.action_idx"),
    ],
)
def test_inconsistent_macro_action_is_rejected(tmp_path: Path, action: dict, field: str) -> None:
    rec = _ppo_record()
    rec["action"].update(action)
    path = tmp_path / "ml-decisions-ppo-x.jsonl"
    path.write_text(json.dumps(rec) + "\n", encoding="utf-8")
    with pytest.raises(RecordError) as info:
        list(read_records(path))
    assert info.value.field == field


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"game_outcome": "win"}, "game_outcome"),
        ({"game_outcome": "win_seat_9"}, "game_outcome"),
        ({"action_mask": [1, 0]}, "action_mask"),
        ({"reward": float("nan")}, "reward"),
        ({"turn": "4"}, "turn"),
    ],
)
def test_bad_values_are_rejected(tmp_path: Path, change: dict, field: str) -> None:
    path = tmp_path / "ml-decisions-ppo-x.jsonl"
    path.write_text(json.dumps(_ppo_record(**change)) + "\n", encoding="utf-8")
    with pytest.raises(RecordError) as info:
        list(read_records(path))
    assert info.value.field == field


def test_players_bounds_and_unknown_keys() -> None:
    rec = _ppo_record(future_key={"x": 1})
    assert DecisionRecord.model_validate(rec).players[2].eliminated is True
    with pytest.raises(ValueError, match="players"):
        DecisionRecord.model_validate(_ppo_record(players=[_player(0)]))


@pytest.mark.parametrize(
    ("cmdr_dmg", "field"),
    [("x", "players.1.cmdr_dmg"), ({"1": "x"}, "players.1.cmdr_dmg.1"), ({"a": 1}, "players.1.cmdr_dmg")],
)
def test_bad_cmdr_dmg_names_the_field(tmp_path: Path, cmdr_dmg: object, field: str) -> None:
    rec = _ppo_record()
    rec["players"][1]["cmdr_dmg"] = cmdr_dmg
    path = tmp_path / "ml-decisions-ppo-x.jsonl"
    path.write_text(json.dumps(rec) + "\n", encoding="utf-8")
    with pytest.raises(RecordError) as info:
        list(read_records(path))
    assert info.value.field == field


def test_truncated_last_line_cut_inside_a_utf8_character_is_skipped(tmp_path: Path) -> None:
    line = record_to_json(_ppo_record()).encode("utf-8")
    cut = line.index("Dûl".encode()) + 2  # inside the two bytes of "û"
    path = tmp_path / "ml-decisions-ppo-x.jsonl"
    path.write_bytes(line + b"\r\n" + line[:cut])
    assert [n for n, _ in iter_jsonl(path)] == [1]


# --------------------------------------------------------------------------- writers


def test_batch_writer_fills_and_counts(tmp_path: Path) -> None:
    game = [_ppo_record(game_outcome="draw") for _ in range(3)]
    for rec in game:
        del rec["source"], rec["schema_version"]
    with BatchWriter(tmp_path, "ppo", "gen003-att1") as bw:
        bw.write_game(game, "win_seat_2")
        g2 = _ppo_record(game_id="g2")
        g2["players"][1]["cmdr_dmg"] = {0: 4}  # a Python writer keying by int seat
        bw.write_game([DecisionRecord.model_validate(g2)], "draw")
        with pytest.raises(RecordError, match=r"ml-decisions-ppo-gen003-att1\.jsonl: players\.0\.life: game 'g3' record 1"):
            bw.write_game(
                [_ppo_record(game_id="g3"), _ppo_record(game_id="g3", players=[_player(0, life="x"), _player(1)])], "draw"
            )
        with pytest.raises(ValueError, match="already written"):
            bw.write_game([_ppo_record(game_id="g2")], "draw")
        assert not bw.path.exists()
    assert (bw.games, bw.decisions) == (2, 4)
    records = list(read_records(bw.path))
    assert [r.game_outcome for r in records] == ["win_seat_2"] * 3 + ["draw"]
    assert all(r.source == "ppo" and r.schema_version == SCHEMA_VERSION for r in records)
    assert [len(g) for g in iter_games(records)] == [3, 1]
    assert cmdr_damage_by_source(records[-1].players[1].cmdr_dmg) == {0: 4}


def test_jsonl_writer_leaves_no_final_file_on_exception(tmp_path: Path) -> None:
    path = tmp_path / "out" / "ml-decisions-sim-a.jsonl"
    with pytest.raises(RuntimeError), JsonlWriter(path) as w:
        w.write({"a": 1})
        w.write({"b": "Æther"})
        assert w.count == 2 and w.tmp_path.exists()
        raise RuntimeError("killed mid-batch")
    assert not path.exists()
    assert list(path.parent.iterdir()) == []
    with JsonlWriter(path) as w:
        w.write({"b": "Æther"})
    assert path.read_text(encoding="utf-8") == '{"b":"Æther"}\n'
    assert not w.tmp_path.exists()


def test_atomic_write_json_keeps_old_file_on_failure(tmp_path: Path) -> None:
    path = tmp_path / "sub" / "metrics.json"
    atomic_write_json(path, {"z": 1, "a": "Æ"})
    assert path.read_text(encoding="utf-8") == '{\n  "z": 1,\n  "a": "Æ"\n}\n'
    with pytest.raises(TypeError):
        atomic_write_json(path, {"z": 2, "bad": object()})
    assert read_json(path) == {"z": 1, "a": "Æ"}
    assert [p.name for p in path.parent.iterdir()] == ["metrics.json"]


def test_policy_is_read_and_checked(tmp_path: Path) -> None:
    """Schema 2 adds ``policy`` (the acting policy's probabilities); version-1 lines still read."""
    old = _ppo_record(schema_version=1)
    assert "policy" not in old and DecisionRecord.model_validate(old).policy is None
    mask = [1] * NUM_ACTIONS
    mask[0] = 0
    policy = [0.0] + [1.0 / (NUM_ACTIONS - 1)] * (NUM_ACTIONS - 1)
    rec = DecisionRecord.model_validate(_ppo_record(schema_version=2, action_mask=mask, policy=policy))
    assert rec.policy == policy
    bad = {
        "sum": [0.0] + [0.5 / (NUM_ACTIONS - 1)] * (NUM_ACTIONS - 1),
        "illegal": [0.5, 0.5] + [0.0] * (NUM_ACTIONS - 2),
        "length": [1.0],
        "range": [0.0, 1.5, -0.5] + [0.0] * (NUM_ACTIONS - 3),
    }
    for name, values in bad.items():
        path = tmp_path / f"ml-decisions-ppo-{name}.jsonl"
        path.write_text(json.dumps(_ppo_record(schema_version=2, action_mask=mask, policy=values)) + "\n", encoding="utf-8")
        with pytest.raises(RecordError) as info:
            list(read_records(path))
        assert info.value.field == "policy", name
        assert f"{path.name}:1" in str(info.value), name
    path = tmp_path / "ml-decisions-ppo-v1.jsonl"  # a version-1 line cannot carry the version-2 field
    path.write_text(json.dumps(_ppo_record(schema_version=1, action_mask=mask, policy=policy)) + "\n", encoding="utf-8")
    with pytest.raises(RecordError, match="schema_version 1 has no policy") as info:
        list(read_records(path))
    assert info.value.field == "policy" and f"{path.name}:1" in str(info.value)
