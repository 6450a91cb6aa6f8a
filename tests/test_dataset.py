"""Dataset builder and labels.

Checks: the labeler on real Forge records (land drops non-trainable, commander casts,
attacks without a target unlabelable) and on our own records (attack targets relative to
the actor); the encoder is seat-relative (rotating the seats of a record leaves the
encoding unchanged) and ignores opponents' hidden cards; source weights hold as mixture
ratios on a sampled set within tolerance; the holdout is split by game, is 10-15% of
teacher games, never reaches the training split and does not move when data is added;
the PPO reward filter drops games below the threshold; the encoding of fixed records is
pinned bit for bit, and the feature table names every slot (combat features read by name).
"""

from __future__ import annotations

import copy
import json
import time
from pathlib import Path

import numpy as np
import pytest

from ml.base.io import file_md5
from ml.data.batch_files import read_records
from ml.data.dataset import load_ppo, load_teacher
from ml.data.decisions import DecisionSet, in_holdout, sample_mixture
from ml.data.encoded_cache import EncodedCache, encode_file
from ml.game.commander.actions import ACTION_INDEX, CAST_COMMANDER, attack_action
from ml.game.commander.encoding import OBS_DIM, RecordEncoder, label_record
from ml.game.commander.features import feature_index, feature_names
from ml.game.commander.forge import ForgeEncoder

FORGE = Path(__file__).parent / "fixtures" / "forge"
PINNED = Path(__file__).parent / "fixtures" / "encoding"


@pytest.fixture(scope="module")
def encoder():
    return RecordEncoder()


def test_forge_labels(encoder):
    recs = list(read_records(FORGE / "ml-decisions-3fa9c2e1.jsonl"))
    labels = [label_record(r, encoder.pool) for r in recs]
    kinds = [r.action.type for r in recs if r.action.type != "attack" or not r.action.target]  # every branch below occurs
    assert {k: kinds.count(k) for k in ("land", "cast_commander", "attack")} == {"land": 4, "cast_commander": 3, "attack": 4}
    for r, lab in zip(recs, labels, strict=True):
        if r.action.type == "land":
            assert lab is None
        if r.action.type == "cast_commander":
            assert lab == CAST_COMMANDER
        if r.action.type == "attack" and not r.action.target:
            assert lab is None
    obs = encoder.encode_batch(recs)
    assert obs.shape == (len(recs), OBS_DIM) and np.isfinite(obs).all()


def _own_record(actor=1, target=3):
    players = [
        {"seat": s, "life": 40 - 3 * s, "cmdr_dmg": {str((s + 1) % 4): s} if s else {}, "mana": s + 1, "cmdr_tax": 0,
         "creatures": 0, "lands": 3, "hand": ["Sol Ring"] * s, "battlefield": [], "graveyard": [], "command_zone": []}
        for s in range(4)
    ]  # fmt: skip
    return {
        "game_id": "game-0-1", "turn": 3, "phase": "combat", "active_seat": actor, "game_outcome": "draw",
        "players": players, "action": {"type": "attack", "card": "", "target": f"seat {target}", "raw": ""},
    }  # fmt: skip


def test_attack_label_is_relative_to_actor(encoder):
    assert label_record(_own_record(actor=1, target=3), encoder.pool) == attack_action(2)
    assert label_record(_own_record(actor=3, target=0), encoder.pool) == attack_action(1)
    rec = _own_record()
    rec["action"].update(macro_action="pass", action_idx=ACTION_INDEX["pass"])
    assert label_record(rec, encoder.pool) == ACTION_INDEX["pass"]


def test_encoding_is_seat_relative_and_hides_opponent_hands(encoder):
    rec = _own_record(actor=1)
    rotated = copy.deepcopy(rec)
    for p in rotated["players"]:  # renumber seats by +2 (mod 4), keep everyone's relative position
        p["seat"] = (p["seat"] + 2) % 4
        p["cmdr_dmg"] = {str((int(k) + 2) % 4): v for k, v in p["cmdr_dmg"].items()}
    rotated["players"].sort(key=lambda p: p["seat"])
    rotated["active_seat"] = 3
    np.testing.assert_array_equal(encoder(rec), encoder(rotated))
    peek = copy.deepcopy(rec)
    peek["players"][2]["hand"] = ["Swords to Plowshares", "Cultivate"]  # same size, other cards
    np.testing.assert_array_equal(encoder(rec), encoder(peek))


def _fake_set(n_by_source: dict[str, int]) -> DecisionSet:
    src = np.concatenate([[s] * n for s, n in n_by_source.items()]).astype(object)
    n = len(src)
    return DecisionSet(
        np.zeros((n, OBS_DIM), np.float32),
        np.ones((n, 13), bool),
        np.zeros(n, np.int64),
        np.zeros(n, np.float32),
        src,
        src.copy(),
    )


@pytest.mark.parametrize("weights", [{"sim": 1.0, "ppo": 0.5}, {"sim": 1.0, "ppo": 1.0}, {"sim": 0.2, "ppo": 1.0}])
@pytest.mark.parametrize("sizes", [{"sim": 50_000, "ppo": 500}, {"sim": 300, "ppo": 40_000}])
def test_source_weights_are_mixture_ratios(weights, sizes):
    data = _fake_set(sizes)
    idx = sample_mixture(data, weights, 60_000, np.random.default_rng(0))
    share = float((data.source[idx] == "ppo").mean())
    expected = weights["ppo"] / (weights["sim"] + weights["ppo"])
    assert share == pytest.approx(expected, abs=0.01)  # 4+ standard errors at n=60k


def test_mixture_renormalises_missing_source_and_fails_without_data():
    data = _fake_set({"sim": 100})
    idx = sample_mixture(data, {"sim": 1.0, "ppo": 0.5}, 1000, np.random.default_rng(0))
    assert (data.source[idx] == "sim").all()
    with pytest.raises(ValueError, match="no training data"):
        sample_mixture(data, {"ppo": 1.0}, 10, np.random.default_rng(0))


def _write_teacher(folder: Path, n_games: int, start: int = 0) -> None:
    base = json.loads((FORGE / "ml-decisions-3fa9c2e1-t1.jsonl").read_text(encoding="utf-8").splitlines()[0])
    folder.mkdir(parents=True, exist_ok=True)
    lines = []
    for g in range(start, start + n_games):
        for turn in (1, 2):
            rec = copy.deepcopy(base)
            rec.update(game_id=f"game-{g}-{1000 + g}", turn=turn, source="sim", schema_version=1, game_outcome="win_seat_0")
            rec["action"] = {"type": "pass", "card": "", "target": "", "raw": "", "macro_action": "pass", "action_idx": 7}
            lines.append(json.dumps(rec, ensure_ascii=False))
    (folder / f"ml-decisions-sim-t{start}.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")


def test_holdout_split_by_game_and_stable(tmp_path, encoder):
    _write_teacher(tmp_path / "t", 400)
    train, hold, stats = load_teacher([tmp_path / "t"], 0.12, encoder)
    assert 0.10 <= stats["holdout_games"] / stats["teacher_games"] <= 0.15
    assert not set(train.game_id) & set(hold.game_id)
    assert len(train) + len(hold) == 800 and len(hold) == 2 * stats["holdout_games"]
    _write_teacher(tmp_path / "t", 200, start=400)  # more data must not move old games
    _, hold2, _ = load_teacher([tmp_path / "t"], 0.12, encoder)
    assert set(hold.game_id) <= set(hold2.game_id)
    assert all(in_holdout(g, 0.12) for g in hold2.game_id)


def test_ppo_reward_filter(tmp_path, encoder):
    base = json.loads((FORGE / "ml-decisions-3fa9c2e1-t1.jsonl").read_text(encoding="utf-8").splitlines()[0])
    lines = []
    for g, ret in enumerate([1.0, -0.33, 1.0]):
        rec = copy.deepcopy(base)
        rec.update(game_id=f"game-{g}-1", source="ppo", schema_version=1, model_version="gen-000-a1", generation=0,
                   reward=ret, episode_return=ret, game_outcome="win_seat_0")  # fmt: skip
        rec["action"] = {"type": "pass", "card": "", "target": "", "raw": "", "macro_action": "pass", "action_idx": 7}
        lines.append(json.dumps(rec))
    (tmp_path / "ml-decisions-ppo-gen000-a1.jsonl").write_text("\n".join(lines) + "\n")
    data, stats = load_ppo([tmp_path], encoder, min_reward_threshold=0.5)
    assert stats == {"ppo_files": 1, "ppo_games": 3, "ppo_games_filtered": 1}
    assert len(data) == 2 and set(data.source) == {"ppo"}
    data, stats = load_ppo([tmp_path], encoder, min_reward_threshold=None)  # null: every game, the lost one too
    assert stats["ppo_games_filtered"] == 0 and len(data) == 3
    # the window keeps the newest batches by generation, across pool folders
    newer = tmp_path / "candidate"
    newer.mkdir()
    (newer / "ml-decisions-ppo-gen002-a2.jsonl").write_text(lines[0] + "\n")
    (tmp_path / "ml-decisions-ppo-gen001-a1.jsonl").write_text(lines[0] + "\n" + lines[2] + "\n")
    for window, files, games in ((0, 3, 3), (1, 1, 1), (2, 2, 2)):
        data, stats = load_ppo([newer, tmp_path], encoder, min_reward_threshold=0.5, window=window)
        assert (stats["ppo_files"], stats["ppo_games"]) == (files, games), window
    # recency: batch k places older than the newest weighs recency**k among the PPO rows
    data, _ = load_ppo([newer, tmp_path], encoder, min_reward_threshold=0.5, recency=0.5)
    by_game = {(g, w) for g, w in zip(data.game_id.tolist(), data.row_weight.tolist(), strict=True)}
    assert by_game == {("game-0-1", 0.25), ("game-2-1", 0.25), ("game-0-1", 0.5), ("game-2-1", 0.5), ("game-0-1", 1.0)}
    assert (load_ppo([newer, tmp_path], encoder, min_reward_threshold=0.5)[0].row_weight == 1.0).all()
    # per batch (fictitious play's average): each batch's rows together weigh recency**k, whatever its size
    data, stats = load_ppo([newer, tmp_path], encoder, min_reward_threshold=0.5, recency=0.5, per_batch=True)
    by_batch = {}
    for model, w in zip(data.game_id.tolist(), data.row_weight.tolist(), strict=True):
        by_batch.setdefault(w, []).append(model)
    assert {w * len(rows) for w, rows in by_batch.items()} == {1.0, 0.5, 0.25}
    assert stats["ppo_policies"] == 1.75


def test_row_weights_shape_the_draws_within_a_source():
    """``sample_mixture`` draws a source's rows in proportion to their weights; equal weights
    give exactly the uniform draws (same generator stream), so recency 1 changes no run."""
    n = 300
    data = DecisionSet(
        np.zeros((n, 2), np.float32), np.ones((n, 3), bool), np.zeros(n, np.int64), np.zeros(n, np.float32),
        np.asarray(["sim"] * 100 + ["ppo"] * 200, dtype=object), np.asarray([f"g{i}" for i in range(n)], dtype=object),
    )  # fmt: skip
    uniform = sample_mixture(data, {"sim": 1.0, "ppo": 1.0}, 20_000, np.random.default_rng(3))
    data.row_weight[:] = 7.0  # equal weights, another value: the same draws
    assert (sample_mixture(data, {"sim": 1.0, "ppo": 1.0}, 20_000, np.random.default_rng(3)) == uniform).all()
    data.row_weight[100:200] = 1.0  # older PPO batch
    data.row_weight[200:] = 3.0  # newer batch: three times as likely per row
    idx = sample_mixture(data, {"sim": 1.0, "ppo": 1.0}, 20_000, np.random.default_rng(3))
    ppo = idx[idx >= 100]
    assert abs((ppo >= 200).mean() - 0.75) < 0.02  # 100 rows x 3 against 100 rows x 1
    assert abs((idx < 100).mean() - 0.5) < 0.02  # the source shares are untouched


def _same_sets(a: DecisionSet, b: DecisionSet) -> None:
    for x, y in zip(a._fields(), b._fields(), strict=True):
        assert x.dtype == y.dtype and x.shape == y.shape and (x == y).all()


def test_encoded_cache_is_exact_and_never_trusted(tmp_path, encoder, monkeypatch):
    _write_teacher(tmp_path / "t", 60)
    forge_encoder = ForgeEncoder(encoder)
    cache = EncodedCache.for_encoder(tmp_path / "cache", forge_encoder)
    want = load_teacher([tmp_path / "t"], 0.12, forge_encoder, [FORGE])
    cold = load_teacher([tmp_path / "t"], 0.12, forge_encoder, [FORGE], cache=cache)
    entries = sorted(cache.directory.glob("*.npz"))
    assert len(entries) == 1 + len(list(FORGE.glob("ml-decisions-*.jsonl")))
    with monkeypatch.context() as m:  # a warm cache parses nothing
        m.setattr("ml.data.encoded_cache.read_records", lambda *a, **k: pytest.fail("parsed a cached file"))
        warm = load_teacher([tmp_path / "t"], 0.12, forge_encoder, [FORGE], cache=cache)
    for got in (cold, warm):
        _same_sets(got[0], want[0])
        _same_sets(got[1], want[1])
        assert got[2] == want[2]
    # a damaged entry is rebuilt, not trusted; another encoder (key) never reads this one's entries
    entries[0].write_bytes(entries[0].read_bytes()[:-50])
    _same_sets(load_teacher([tmp_path / "t"], 0.12, forge_encoder, [FORGE], cache=cache)[0], want[0])
    assert sorted(cache.directory.glob("*.npz")) == entries and not list(cache.directory.glob("*.tmp"))
    assert EncodedCache.for_encoder(cache.directory, forge_encoder, "cards: other").key != cache.key


def test_encoded_cache_keeps_the_recently_used_entries_under_its_cap(tmp_path, encoder, monkeypatch):
    """The cache stays flat as a run grows: past its cap the least recently used entries go,
    a read entry counts as used, and the entry just written always stays."""
    forge_encoder = ForgeEncoder(encoder)
    cache = EncodedCache.for_encoder(tmp_path / "cache", forge_encoder)
    files = []
    for i in range(3):
        _write_teacher(tmp_path / f"t{i}", 20, start=100 * i)
        files += sorted((tmp_path / f"t{i}").glob("*.jsonl"))
    first = encode_file(files[0], forge_encoder, cache)
    size = next(cache.directory.glob("*.npz")).stat().st_size
    monkeypatch.setenv("DISTILL_ENCODED_CACHE_MAX_MB", str(2.5 * size / 2**20))  # room for two entries
    encode_file(files[1], forge_encoder, cache)
    time.sleep(0.01)
    encode_file(files[0], forge_encoder, cache)  # read: now more recent than files[1]'s entry
    time.sleep(0.01)
    encode_file(files[2], forge_encoder, cache)  # a third entry: the least recently used goes
    kept = {p.name.split("-")[0] for p in cache.directory.glob("*.npz")}
    assert kept == {file_md5(files[0]), file_md5(files[2])}
    _same_sets(encode_file(files[0], forge_encoder, cache).data, first.data)
    monkeypatch.setenv("DISTILL_ENCODED_CACHE_MAX_MB", "0")  # a cap below one entry keeps the newest only
    encode_file(files[1], forge_encoder, cache)
    assert [p.name.split("-")[0] for p in cache.directory.glob("*.npz")] == [file_md5(files[1])]
    monkeypatch.setenv("DISTILL_ENCODED_CACHE_MAX_MB", "lots")  # refused before any work, even for a cached file
    with pytest.raises(ValueError, match="DISTILL_ENCODED_CACHE_MAX_MB='lots'"):
        encode_file(files[1], forge_encoder, cache)
    monkeypatch.setenv("DISTILL_ENCODED_CACHE_MAX_MB", "inf")  # no cap: nothing deleted
    encode_file(files[2], forge_encoder, cache)
    assert len(list(cache.directory.glob("*.npz"))) == 2


def test_combat_features_follow_the_block_rule_and_tapped_state(encoder):
    from ml.game.commander.reference.rules import decision_record, new_game

    vanilla = sorted(
        (c for c in encoder.pool.values() if c.kind == "creature" and not c.keywords and not c.legendary),
        key=lambda c: (c.power, c.name),
    )
    small, big = vanilla[0], vanilla[-1]
    assert big.power > small.toughness and big.toughness > small.power
    rec = decision_record(new_game(3))
    actor = rec["active_seat"]
    by_offset = {(p["seat"] - actor) % 4: p for p in rec["players"]}
    for p in rec["players"]:
        p.update(battlefield=[], tapped=[], sick=[], cmdr_dmg={}, life=40)
    by_offset[0]["battlefield"] = [big.name, big.name]  # two ready attackers
    by_offset[1]["life"] = 2 * big.power  # no blockers: exactly lethal
    by_offset[2]["battlefield"] = [big.name]  # one untapped blocker: walls or trades with one attacker
    by_offset[3]["battlefield"] = [big.name]
    by_offset[3]["tapped"] = [big.name]  # tapped: cannot block

    def feat(obs, offset, name):
        return obs[feature_index(f"seat{offset}/{name}")]

    obs = encoder(rec)
    assert feat(obs, 0, "ready_attackers") == pytest.approx(0.2)
    assert feat(obs, 0, "ready_power") == pytest.approx(2 * big.power / 20)
    assert feat(obs, 1, "attack_lethal") == 1.0  # lethal on the open board
    assert feat(obs, 2, "attack_lethal") == 0.0  # one attacker blocked
    assert feat(obs, 2, "attack_damage") == pytest.approx(big.power / 40)
    assert feat(obs, 2, "untapped_creatures") == pytest.approx(0.1)  # one untapped creature
    assert feat(obs, 3, "untapped_creatures") == 0.0  # tapped: no block
    assert feat(obs, 3, "attack_damage") == pytest.approx(2 * big.power / 40)
    assert [feat(obs, k, "attacked_me_last") for k in (1, 2, 3)] == [0.0, 0.0, 0.0]
    by_offset[0]["last_attacker"] = by_offset[2]["seat"]
    assert [feat(encoder(rec), k, "attacked_me_last") for k in (1, 2, 3)] == [0.0, 1.0, 0.0]
    by_offset[0]["sick"] = [big.name, big.name]  # summoning sick: no attackers, no attack preview
    assert feat(encoder(rec), 0, "ready_attackers") == 0.0 and feat(encoder(rec), 1, "attack_lethal") == 0.0
    for p in rec["players"]:  # a Forge file has no tapped/sick extras: everything reads untapped and ready
        del p["tapped"], p["sick"]
    assert feat(encoder(rec), 3, "untapped_creatures") == pytest.approx(0.1)
    assert feat(encoder(rec), 1, "attack_lethal") == 1.0


def test_encoding_is_pinned(encoder):
    """The encoder's output on fixed records, bit for bit (self-play records of 3-, 4- and
    5-seat pods, and a Forge file): any change to a feature, a scale or the order shows here."""
    own = [json.loads(line) for line in (PINNED / "pinned-records.jsonl").read_text().splitlines()]
    forge = list(read_records(FORGE / "ml-decisions-3fa9c2e1.jsonl"))
    obs = np.concatenate([encoder.encode_batch(own), encoder.encode_batch(forge)])
    expected = np.load(PINNED / "pinned-obs.npy")
    assert obs.dtype == expected.dtype and obs.tobytes() == expected.tobytes()


def test_feature_table_names_every_slot(encoder):
    names = feature_names()
    assert len(names) == len(set(names)) == OBS_DIM
    assert [feature_index(n) for n in names] == list(range(OBS_DIM))
    assert feature_index("seat0/ready_attackers") == feature_index("seat0/attack_damage")
    with pytest.raises(KeyError):
        feature_index("seat6/life")
    rec = _own_record(actor=1)
    obs = encoder(rec)
    assert obs[feature_index("turn")] == pytest.approx(3 / 30) and obs[feature_index("phase_combat")] == 1.0
    assert obs[feature_index("seat0/life")] == pytest.approx(37 / 40) and obs[feature_index("seat0/is_actor")] == 1.0
    assert obs[feature_index("seat1/life")] == pytest.approx(34 / 40)  # seat 2, one place after the actor
    assert obs[feature_index("seat0/cmdr_damage_from_1")] == pytest.approx(1 / 21)  # seat 1 took 1 from seat 2
    assert obs[feature_index("hand/hand_unknown")] == 0.0 and obs[feature_index("seat3/hand_size")] == 0.0


def test_fictitious_average_gives_the_teacher_and_each_batch_an_equal_share():
    """``train.average: fictitious``: batches of 10, 60 and 400 decisions beside 1,000 teacher decisions, each
    batch's rows weighing 1 / its size (``load_ppo(per_batch=True)``) and the PPO weight times the batch count
    (``fictitious_weights``): the teacher data and each batch hold a quarter of the sample."""
    from ml.data.decisions import fictitious_weights

    sizes = (10, 60, 400)
    data = _fake_set({"sim": 1000, "ppo": sum(sizes)})
    batch = np.concatenate([[-1] * 1000] + [[k] * n for k, n in enumerate(sizes)])
    for k, n in enumerate(sizes):
        data.row_weight[batch == k] = 1.0 / n
    weights = fictitious_weights({"sim": 1.0, "ppo": 1.0}, float(len(sizes)))
    assert weights == {"sim": 1.0, "ppo": 3.0}
    idx = sample_mixture(data, weights, 80_000, np.random.default_rng(0))
    shares = [float((batch[idx] == k).mean()) for k in (-1, 0, 1, 2)]
    assert shares == pytest.approx([0.25] * 4, abs=0.01)
    plain = sample_mixture(
        _fake_set({"sim": 1000, "ppo": sum(sizes)}), {"sim": 1.0, "ppo": 1.0}, 80_000, np.random.default_rng(0)
    )
    assert float((batch[plain] == 0).mean()) == pytest.approx(0.5 * 10 / 470, abs=0.005)  # mixture: by decisions
