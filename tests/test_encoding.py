"""The compiled record encoder equals the Python oracle of the arithmetic, bit for bit
(``ml.game.commander.encoding``, ``tests/encoding_oracle.py``): on every decision of many
object-engine games, teacher and PPO records, the Forge fixtures and hostile records at the
schema's bounds; and records and live games share one compiled encoder."""

from __future__ import annotations

import json
import random
from pathlib import Path

import numpy as np
import pytest

from ml.data.batch_files import read_records
from ml.game.commander import core
from ml.game.commander.actions import MAX_POD, NUM_ACTIONS
from ml.game.commander.encoding import RecordEncoder
from ml.game.commander.features import PHASES, feature_names
from ml.game.commander.forge_record import (
    BATTLEFIELD_MAX,
    CMDR_DMG_MAX,
    CMDR_TAX_MAX,
    LIFE_BOUND,
    MANA_MAX,
    POD_CARDS,
    DecisionRecord,
)
from ml.game.commander.observation import CHUNK
from ml.game.commander.reference.players import HeuristicPlayer, RandomPlayer
from ml.game.commander.reference.rules import apply_action, decision_record, describe_action, new_game
from ml.game.commander.spec import commander
from tests.encoding_oracle import encode_record, encode_state

FIXTURES = Path(__file__).parent / "fixtures"


@pytest.fixture(scope="module")
def encoder() -> RecordEncoder:
    return RecordEncoder()


def _games(n_games: int, pod_size: int):
    """Every decision point of ``n_games`` seeded games, heuristic and random seats mixed."""
    for g in range(n_games):
        state = new_game(1000 + g, pod_size, 30, g)
        players = [(HeuristicPlayer if (g + s) % 3 else RandomPlayer)(g * 7 + s) for s in range(pod_size)]
        while not state.done:
            yield state
            apply_action(state, players[state.current_seat].act(state))


def assert_agree(encoder: RecordEncoder, records: list, what: str) -> np.ndarray:
    """The batched compiled encoding of ``records`` equals the oracle's, record by record; returns it."""
    got = encoder.encode_batch(records)
    for i, rec in enumerate(records):
        want = encode_record(rec, encoder.pool)
        if not np.array_equal(got[i], want):
            bad = np.flatnonzero(got[i] != want)
            names = [feature_names()[b] for b in bad]
            raise AssertionError(f"{what} record {i}: slots {names} {got[i][bad].tolist()} vs oracle {want[bad].tolist()}")
    return got


def test_compiled_encoder_equals_the_oracle_on_every_decision_of_200_games(encoder):
    records, states = [], []
    for pod_size in (4, 3):
        for state in _games(100, pod_size):
            record = decision_record(state)
            oracle_live = encode_state(state, state.current_seat)
            np.testing.assert_array_equal(oracle_live, encode_record(record, encoder.pool))
            if len(records) % 10 == 0:  # the validated record model (how files are read) and JSON too
                np.testing.assert_array_equal(encoder(json.loads(json.dumps(record))), oracle_live)
                model = {**record, "action": describe_action(state, state.legal[0]), "game_outcome": "draw"}
                np.testing.assert_array_equal(encoder(DecisionRecord.model_validate(model)), oracle_live)
            records.append(record)
            states.append(oracle_live)
    assert len(records) > 10_000 > 2 * CHUNK
    np.testing.assert_array_equal(encoder.encode_batch(records), np.stack(states))  # chunked batches


def test_encoder_observes_a_seat_that_is_not_to_act(encoder):
    state = next(s for s in _games(1, 4) if s.turn == 3)
    for seat in range(4):
        np.testing.assert_array_equal(encoder(decision_record(state, seat)), encode_state(state, seat))


def test_teacher_and_ppo_records_agree(encoder, tmp_path):
    import torch

    from ml.config.sections import ExportParams, RunParams, TeacherParams
    from ml.model.policy import PolicyNet
    from ml.play.export import export_batch
    from ml.play.runner import StagePlay
    from ml.play.teacher import write_teacher_batch

    write_teacher_batch(tmp_path / "teacher", commander(6, 30), TeacherParams(games=3), "six", StagePlay(4))
    teacher = [r for f in sorted((tmp_path / "teacher").glob("*.jsonl")) for r in read_records(f)]
    torch.manual_seed(0)
    net = PolicyNet(encoder.obs_dim, (16,))
    export_batch(net, tmp_path / "ppo", ExportParams(games=4, only_wins=False), RunParams(), commander(4, 30), StagePlay(2),
                 num_envs=4)  # fmt: skip
    ppo = [r for f in sorted((tmp_path / "ppo").glob("*.jsonl")) for r in read_records(f)]
    assert len(teacher) > 300 and len(ppo) > 50 and all(r.source == "ppo" for r in ppo)
    assert_agree(encoder, teacher, "teacher")
    assert_agree(encoder, ppo, "ppo")


def test_forge_fixtures_and_pinned_records_agree(encoder):
    """Every line of the Forge fixtures that parses as a record (unknown cards, summed commander damage,
    no library, Forge's phases) and the pinned records."""
    lines = [
        line
        for f in sorted(FIXTURES.glob("forge/**/*.jsonl"))
        for line in f.read_text(encoding="utf-8", errors="replace").splitlines()
    ]
    lines += (FIXTURES / "encoding/pinned-records.jsonl").read_text(encoding="utf-8").splitlines()
    records = []
    for line in lines:
        try:
            records.append(DecisionRecord.model_validate_json(line))
        except ValueError:
            continue  # the fixtures' bad lines
    assert len(records) > 20
    unknown = [r for r in records if any(n not in encoder.pool for p in r.players for n in p.hand + p.battlefield)]
    assert unknown and any(isinstance(p.cmdr_dmg, int) and p.cmdr_dmg for r in records for p in r.players)
    got = assert_agree(encoder, records, "fixture")
    assert_agree(encoder, [json.loads(r.model_dump_json()) for r in records], "fixture dict")
    hand_unknown = feature_names().index("hand/hand_unknown")
    assert got[:, hand_unknown].any()


def _hostile_record(rng: random.Random, names: list[str], creatures: list[str], big: bool) -> dict:
    """A record the schema accepts, at and around its bounds: seats in any order, repeated or
    missing (the actor too), unknown cards, summed or per-source commander damage from seats beyond
    the pod (zeros included), no library, any phase, long lists when ``big``."""
    n = rng.randint(2, MAX_POD)
    seats = rng.sample(range(MAX_POD), n) if rng.random() < 0.3 else rng.sample(range(n), n)
    if rng.random() < 0.15:
        seats[-1] = seats[0]
    unknown = [f"Forge Card {i}" for i in range(5)]

    def cards(k: int, pool: list[str]) -> list[str]:
        return [rng.choice(pool + unknown) if rng.random() < 0.8 else rng.choice(unknown) for _ in range(k)]

    players = []
    for seat in seats:
        size = rng.choice([0, 1, 3, 8]) if not big else rng.choice([40, 150])
        others = rng.choice([BATTLEFIELD_MAX - size, rng.randint(0, 50)]) if big else rng.randint(0, 5)
        field = cards(size, creatures) + cards(others, names)
        listed = [c for c in field if c in creatures]
        if rng.random() < 0.3:
            dmg: int | dict = rng.choice([0, CMDR_DMG_MAX, rng.randint(0, 60)])
        else:
            dmg = {
                str(s): rng.choice([0, rng.randint(0, 25), CMDR_DMG_MAX])
                for s in rng.sample(range(MAX_POD), rng.randint(0, MAX_POD))
            }
        players.append({
            "seat": seat,
            "life": rng.choice([-LIFE_BOUND, LIFE_BOUND, 0, 1, rng.randint(-30, 60)]),
            "cmdr_dmg": dmg,
            "mana": rng.choice([0, MANA_MAX, rng.randint(0, 12)]),
            "cmdr_tax": rng.choice([0, 1, 3, CMDR_TAX_MAX, rng.randint(0, 10)]),
            "creatures": rng.choice([0, len(listed), len(field), BATTLEFIELD_MAX]),
            "lands": rng.choice([0, BATTLEFIELD_MAX, rng.randint(0, 12)]),
            "hand": cards(POD_CARDS if big and rng.random() < 0.5 else rng.randint(0, 12), names),
            "battlefield": field,
            "graveyard": cards(rng.choice([0, 5, POD_CARDS]), names),
            "command_zone": rng.choice([[], [rng.choice(creatures)], [rng.choice(unknown)], [rng.choice(names)]]),
            "library": rng.choice([None, 0, 40, POD_CARDS]),
            "mana_sources": rng.choice([None, 0, MANA_MAX, rng.randint(0, 12)]),
            "eliminated": rng.choice([None, None, True, False]),
            "commander_name": rng.choice([None, rng.choice(creatures), *listed[:1]]),
            "tapped": rng.choice([None, [], listed[::2], listed]),
            "sick": rng.choice([None, [], listed[1::3], listed]),
            "last_attacker": rng.choice([None, -1, *range(MAX_POD)]),
        })  # fmt: skip
    actor = rng.choice(seats) if rng.random() < 0.9 else rng.randrange(MAX_POD)
    return {
        "game_id": "g", "turn": rng.choice([1, 200, rng.randint(1, 40)]),
        "phase": rng.choice([*PHASES, "upkeep", "draw", "cleanup"]), "active_seat": actor, "game_outcome": "draw",
        "players": players, "action": {"type": "pass"}, "action_mask": [1] * NUM_ACTIONS,
    }  # fmt: skip


def test_hostile_records_at_the_bounds_agree(encoder):
    names = list(encoder.pool)
    creatures = [n for n, c in encoder.pool.items() if c.kind == "creature"]
    rng = random.Random(7)
    records = [_hostile_record(rng, names, creatures, big=i < 4) for i in range(600)]
    models = [DecisionRecord.model_validate(r) for r in records]  # every one is valid
    assert any(max(len(p.battlefield) for p in m.players) > 900 for m in models[:4])
    assert any(len(p.hand) == POD_CARDS for m in models[:4] for p in m.players)
    assert any(m.active_seat not in {p.seat for p in m.players} for m in models)
    assert any(len({p.seat for p in m.players}) < len(m.players) for m in models)
    assert_agree(encoder, records, "hostile dict")
    assert_agree(encoder, models, "hostile model")


def test_records_and_live_games_share_one_compiled_encoder(encoder):
    """The record path reuses the live games' compiled encoder: no second specialization to compile."""
    from ml.game.commander.core import kernels

    if not hasattr(kernels.encode_kernel, "signatures"):
        pytest.skip("numba's JIT is disabled")
    tables, st = core.load_tables(), core.new_state(2)
    core.reset(st, tables, np.array([1, 2], np.int64), 4, 30)
    core.encode(st, tables, np.zeros(2, np.int64), np.zeros((2, core.OBS_DIM), np.float32))
    encoder(decision_record(new_game(5, 4, 30, 0)))
    assert len(kernels.encode_kernel.signatures) == 1


def test_a_record_outside_the_schema_shape_is_refused(encoder):
    record = decision_record(new_game(5, 4, 30, 0))
    with pytest.raises(ValueError, match="active_seat 7"):
        encoder({**record, "active_seat": 7})
    with pytest.raises(ValueError, match="beyond int16"):
        encoder({**record, "players": [{**record["players"][0], "life": 40_000}, *record["players"][1:]]})
