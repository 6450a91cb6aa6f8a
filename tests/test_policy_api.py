"""The policy endpoints (``ml.api.policy``) and the ONNX export (``ml.model.onnx_file``).

Checks: the single and batch answers for a few hundred holdout teacher decision points equal the
student's own greedy action, probabilities and value; ONNX Runtime's outputs equal torch's within
1e-5 on 1,000 decision points, with a sidecar naming every feature and action; a bad request gets
a 422 whose ``loc`` names the field; unknown cards are answered and reported; a model switch (a bot
selected, a new student accepted) while hundreds of requests are in flight loses none and every
answer comes from one whole model; ``loop.py onnx`` in a git repo (expensive).

The app here is a bare FastAPI app with only the policy routes (no git); the models are tiny
PolicyNets written into a temporary repository layout.
"""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

import httpx
import numpy as np
import pytest
import torch
from fastapi import FastAPI
from fastapi.testclient import TestClient

from ml.api.policy import add_policy_routes
from ml.base.io import atomic_write_json
from ml.config.sections import TeacherParams
from ml.data.batch_files import read_records, record_to_json
from ml.data.decisions import in_holdout
from ml.game.commander.actions import ACTION_INDEX, MACRO_ACTIONS, MAX_POD
from ml.game.commander.encoding import OBS_DIM, RecordEncoder
from ml.game.commander.features import feature_names
from ml.game.commander.spec import commander
from ml.game.schema_errors import UNION_TAG_RE
from ml.model.policy import PolicyNet, save_policy
from ml.play.runner import StagePlay
from ml.play.teacher import write_teacher_batch

ATTEMPT = "20260101-0000-gen001-a1"
COMMIT = "c0ffee" * 6 + "abcd"


def tiny_net(seed: int) -> PolicyNet:
    torch.manual_seed(seed)
    return PolicyNet(OBS_DIM, (64, 64)).eval()


@pytest.fixture(scope="module")
def records(tmp_path_factory) -> list:
    """~1,400 teacher decision points of 12 games (records as read from the batch file)."""
    out = tmp_path_factory.mktemp("teacher")
    write_teacher_batch(out, commander(), TeacherParams(games=12), "t1", StagePlay(11))
    return list(read_records(next(out.glob("*.jsonl"))))


@pytest.fixture(scope="module")
def holdout(records) -> list:
    return [r for r in records if in_holdout(r.game_id, 0.3)]


def point_json(record) -> dict:
    """A record as a client sends it: the JSON line without ``action``."""
    obj = json.loads(record_to_json(record))
    del obj["action"]
    return obj


@pytest.fixture
def repo(tmp_path) -> Path:
    save_policy(tiny_net(1), tmp_path / "data/merged/students/gen001.pt", {"role": "student", "generation": 1})
    save_policy(tiny_net(2), tmp_path / "bots/promoted/rival.pt", {"attempt_id": "x-gen000-a1", "commit": "beef" * 10})
    atomic_write_json(tmp_path / "state/eval_history.json", [{"attempt_id": ATTEMPT, "generation": 1, "verdict": "accepted"}])
    return tmp_path


@pytest.fixture
def app(repo) -> FastAPI:
    app = FastAPI()
    add_policy_routes(app, repo, {ATTEMPT: COMMIT}.get, guard=[])
    return app


def own_answers(net: PolicyNet, recs: list) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The student's own greedy actions, probabilities and values (``PolicyNet.act``), and the masks."""
    enc = RecordEncoder()
    obs = enc.encode_batch(recs)
    mask = np.stack([enc.action_mask(r) for r in recs])
    actions, _, values, _ = net.act(obs, mask, greedy=True)
    with torch.no_grad():
        probs = torch.softmax(net(torch.from_numpy(obs), torch.from_numpy(mask))[0], -1).numpy()
    return actions, probs, values, mask


def check_answer(answer: dict, action: int, probs: np.ndarray, value: float, mask: np.ndarray) -> None:
    assert answer["action_idx"] == action and answer["macro_action"] == MACRO_ACTIONS[action]
    assert set(answer["probs"]) == {MACRO_ACTIONS[a] for a in np.flatnonzero(mask)}
    got = np.array([answer["probs"][MACRO_ACTIONS[a]] for a in np.flatnonzero(mask)])
    np.testing.assert_allclose(got, probs[mask], atol=1e-6)
    assert answer["value"] == pytest.approx(float(value), abs=1e-6)


def test_answers_equal_the_students_greedy_choice_on_holdout(app, holdout):
    assert len(holdout) >= 200, len(holdout)
    actions, probs, values, mask = own_answers(tiny_net(1), holdout)
    with TestClient(app) as client:
        for i, rec in enumerate(holdout):
            r = client.post("/api/ml/policy/act", json=point_json(rec))
            assert r.status_code == 200, r.text
            check_answer(r.json(), actions[i], probs[i], values[i], mask[i])
            assert r.json()["model"] == {
                "name": "gen001", "kind": "student", "path": "data/merged/students/gen001.pt",
                "attempt_id": ATTEMPT, "commit": COMMIT, "generation": 1,
            }  # fmt: skip
        r = client.post("/api/ml/policy/act/batch", json={"decisions": [point_json(x) for x in holdout]})
        assert r.status_code == 200, r.text
        for i, answer in enumerate(r.json()["answers"]):
            check_answer(answer, actions[i], probs[i], values[i], mask[i])
        bot = client.post("/api/ml/policy/act/batch?model=rival", json={"decisions": [point_json(holdout[0])]}).json()
        assert bot["model"]["name"] == "rival" and bot["model"]["commit"] == "beef" * 10
        assert client.get("/api/ml/policy/models").json() == {"default": "student", "students": ["gen001"], "bots": ["rival"]}


def test_forge_record_with_unknown_cards_is_answered_and_reported(app):
    line = (Path(__file__).parent / "fixtures/forge/ml-decisions-3fa9c2e1.jsonl").read_text(encoding="utf-8").splitlines()[0]
    point = json.loads(line)
    del point["action"]
    with TestClient(app) as client:
        answer = client.post("/api/ml/policy/act", json=point).json()
    assert "Æther Vial" in answer["unknown_cards"] and answer["unknown_card_fallback"]
    n = len(point["players"])  # no action_mask: every action but attacks on seats the pod lacks
    assert set(answer["probs"]) == set(MACRO_ACTIONS) - {f"attack_opponent_{k}" for k in range(n, MAX_POD)}
    assert sum(answer["probs"].values()) == pytest.approx(1.0, abs=1e-5)


def test_record_without_mask_never_gets_an_attack_on_a_missing_or_eliminated_seat(app, records):
    """A 4-seat record without ``action_mask``: never ``attack_opponent_4/5``, even from a student that prefers them."""
    biased = tiny_net(5)
    with torch.no_grad():  # the student's favourite actions: attacks on seats 4 and 5 of a 6-seat pod
        biased.policy_head.bias[ACTION_INDEX["attack_opponent_4"]] = biased.policy_head.bias[
            ACTION_INDEX["attack_opponent_5"]
        ] = 50.0
    save_policy(biased, app.state.policy.registry.root / "bots/promoted/seat_hunter.pt", {})
    points = []
    for rec in records[:60]:
        point = point_json(rec)
        del point["action_mask"]
        points.append(point)
    points[0]["players"][1].update(eliminated=True)  # an opponent that is out cannot be attacked either
    with TestClient(app) as client:
        r = client.post("/api/ml/policy/act/batch?model=seat_hunter", json={"decisions": points})
        single = client.post("/api/ml/policy/act?model=seat_hunter", json=points[1]).json()
    assert r.status_code == 200, r.text
    answers = r.json()["answers"]
    for point, answer in zip(points, [*answers, single], strict=False):
        assert len(point["players"]) == 4
        assert answer["macro_action"] not in ("attack_opponent_4", "attack_opponent_5"), answer
        assert not {"attack_opponent_4", "attack_opponent_5"} & set(answer["probs"])
    gone = (1 - points[0]["active_seat"]) % 4  # the offset of seat 1 from the actor
    assert gone == 0 or f"attack_opponent_{gone}" not in answers[0]["probs"]


@pytest.mark.parametrize(
    ("path", "edit", "loc"),
    [
        ("/api/ml/policy/act", lambda p: p["players"][0].pop("life"), ["body", "players", 0, "life"]),
        ("/api/ml/policy/act", lambda p: p.update(active_seat=5), ["body", "active_seat"]),
        ("/api/ml/policy/act", lambda p: p.update(phase=3), ["body", "phase"]),
        ("/api/ml/policy/act", lambda p: p.update(action_mask=[0] * len(MACRO_ACTIONS)), ["body", "action_mask"]),
        ("/api/ml/policy/act", lambda p: p["players"][1].update(seat=0), ["body", "players"]),
        ("/api/ml/policy/act/batch", lambda p: p.pop("turn"), ["body", "decisions", 1, "turn"]),
    ],
)
def test_bad_request_gets_422_naming_the_field(app, holdout, path, edit, loc):
    point = point_json(holdout[0])
    edit(point)
    body = point if path.endswith("/act") else {"decisions": [point_json(holdout[1]), point]}
    with TestClient(app) as client:
        r = client.post(path, json=body)
    assert r.status_code == 422, r.text
    assert loc in [e["loc"] for e in r.json()["detail"]], r.json()


def test_unknown_model_is_404(app, holdout):
    with TestClient(app) as client:
        r = client.post("/api/ml/policy/act?model=nobody", json=point_json(holdout[0]))
        assert r.status_code == 404 and "nobody" in r.json()["detail"]
        assert client.put("/api/ml/policy/model", json={"model": "nobody"}).status_code == 404
        assert client.get("/api/ml/policy/models").json()["default"] == "student"


def test_model_switch_under_load_loses_no_request(app, repo, holdout):
    points = [point_json(r) for r in holdout[:40]]
    nets = {"gen001": tiny_net(1), "rival": tiny_net(2), "gen002": tiny_net(3)}
    expected = {name: own_answers(net, holdout[:40]) for name, net in nets.items()}

    async def load() -> list[httpx.Response]:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:

            async def one(i: int) -> httpx.Response:
                if i % 5 == 0:
                    return await client.post("/api/ml/policy/act/batch", json={"decisions": points[:8]})
                return await client.post("/api/ml/policy/act", json=points[i % len(points)])

            async def switch(step: int) -> None:
                if step == 1:
                    save_policy(nets["gen002"], repo / "data/merged/students/gen002.pt", {"generation": 2})  # newly accepted
                name = ("rival", "student", "rival")[step]
                assert (await client.put("/api/ml/policy/model", json={"model": name})).status_code == 200

            results: list[httpx.Response] = []
            for wave in range(4):  # each switch happens while a wave of 100 requests is in flight
                tasks = [asyncio.create_task(one(wave * 100 + i)) for i in range(100)]
                await asyncio.sleep(0)
                if wave < 3:
                    await switch(wave)
                results += await asyncio.gather(*tasks)
            return results

    responses = asyncio.run(load())
    assert len(responses) == 400 and all(r.status_code == 200 for r in responses), [r.text for r in responses[:3]]
    seen = set()
    for i, r in enumerate(responses):
        body = r.json()
        name = body["model"]["name"]
        seen.add(name)
        actions, probs, values, mask = expected[name]
        answers = body["answers"] if "answers" in body else [body]
        rows = range(8) if "answers" in body else [i % len(points)]
        for answer, row in zip(answers, rows, strict=True):
            check_answer(answer, actions[row], probs[row], values[row], mask[row])
    assert seen == {"gen001", "rival", "gen002"}, seen
    batcher = app.state.policy.batcher
    assert batcher.batches < 400, "concurrent requests were not batched"


def test_onnx_runtime_equals_torch_on_1000_points(tmp_path, records):
    pytest.importorskip("onnxruntime")
    from ml.model.onnx_file import run_onnx, write_onnx

    recs = records[:1000]
    assert len(recs) == 1000
    net = tiny_net(4)
    side = write_onnx(net, tmp_path / "m.onnx", {"feature_names": feature_names(), "action_names": list(MACRO_ACTIONS)})
    enc = RecordEncoder()
    obs = enc.encode_batch(recs)
    mask = np.stack([enc.action_mask(r) for r in recs])
    probs, value, logits = run_onnx(tmp_path / "m.onnx", obs, mask)
    with torch.no_grad():
        t_logits, t_value = net(torch.from_numpy(obs), torch.from_numpy(mask))
    np.testing.assert_allclose(probs, torch.softmax(t_logits, -1).numpy(), atol=1e-5, rtol=0)
    np.testing.assert_allclose(value, t_value.numpy(), atol=1e-5, rtol=0)
    np.testing.assert_allclose(logits[mask], t_logits.numpy()[mask], atol=1e-5, rtol=0)
    assert (probs[~mask] == 0).all()
    meta = json.loads(side.read_text())
    assert len(meta["feature_names"]) == meta["inputs"][0]["shape"][1] == OBS_DIM
    assert meta["action_names"] == list(MACRO_ACTIONS) and meta["inputs"][1] == {
        "name": "action_mask", "dtype": "bool", "shape": ["batch", len(MACRO_ACTIONS)]
    }  # fmt: skip
    assert [o["name"] for o in meta["outputs"]] == ["probs", "value", "logits"]


@pytest.mark.expensive
def test_loop_onnx_writes_model_and_sidecar(repo, tmp_path):
    """``loop.py onnx`` in a git repository: the newest student with its attempt and commit."""
    pytest.importorskip("onnxruntime")
    import subprocess

    from tests.conftest import ROOT

    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    env = ["-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run(
        ["git", *env, "-C", str(repo), "commit", "-q", "--allow-empty", "-m", f"gen 001\n\nAttempt-Id: {ATTEMPT}"], check=True
    )
    out = tmp_path / "exp" / "s.onnx"
    proc = subprocess.run(
        [sys.executable, str(ROOT / "loop.py"), "--repo", str(repo), "onnx", "--out", str(out)],
        capture_output=True, text=True, cwd=ROOT,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    meta = json.loads(out.with_suffix(".json").read_text())
    assert meta["model"]["name"] == "gen001" and meta["model"]["attempt_id"] == ATTEMPT
    assert meta["model"]["commit"] and len(meta["model"]["commit"]) == 40
    bad = subprocess.run(
        [sys.executable, str(ROOT / "loop.py"), "--repo", str(repo), "onnx", "nobody"], capture_output=True, text=True
    )
    assert bad.returncode == 2 and "nobody" in bad.stderr
    former = subprocess.run(  # the command's former name still runs it
        [sys.executable, str(ROOT / "loop.py"), "--repo", str(repo), "export-onnx", "--out", str(tmp_path / "f.onnx")],
        capture_output=True, text=True, cwd=ROOT,
    )  # fmt: skip
    assert former.returncode == 0, former.stderr
    assert json.loads((tmp_path / "f.json").read_text())["model"]["name"] == "gen001"

    for wrong in (
        tmp_path / "m.json",
        tmp_path,
        out / "x.onnx",
    ):  # would overwrite the model with its sidecar; a folder; under a file
        res = subprocess.run(
            [sys.executable, str(ROOT / "loop.py"), "--repo", str(repo), "onnx", "--out", str(wrong)],
            capture_output=True, text=True,
        )  # fmt: skip
        assert res.returncode == 2 and "--out" in res.stderr and "Traceback" not in res.stderr, res.stderr
    assert out.is_file() and not (tmp_path / "m.json").exists()


def test_a_sent_mask_never_allows_an_attack_on_a_missing_seat(records):
    """A client's ``action_mask`` is narrowed by the pod: no attack on a seat the pod lacks."""
    from ml.game.commander.encoding import record_legal_mask

    rec = json.loads(record_to_json(records[0]))
    rec["action_mask"] = [True] * len(MACRO_ACTIONS)
    mask = record_legal_mask(rec)
    assert not mask[ACTION_INDEX["attack_opponent_4"]] and not mask[ACTION_INDEX["attack_opponent_5"]]
    assert mask[ACTION_INDEX["attack_opponent_1"]] and rec["action_mask"] == [True] * len(MACRO_ACTIONS)


# ---------------------------------------------------------------------------- bounds and body limit

# (JSON path in a decision point, allowed low, allowed high, what is bounded): the bounds of
# ``ml.game.commander.forge_record``, written out here so that a changed bound fails a test.
BOUNDS = [
    (("turn",), 1, 200, "value"),
    (("active_seat",), 0, 5, "value"),
    (("players",), 2, 6, "length"),
    (("action_mask",), 13, 13, "length"),
    (("policy",), 0, 13, "length"),
    (("game_id",), 0, 200, "text"),
    (("phase",), 0, 200, "text"),
    (("deck_name",), 0, 200, "text"),
    (("commander",), 0, 200, "text"),
    (("archetype",), 0, 200, "text"),
    (("model_version",), 0, 200, "text"),
    (("action", "action_idx"), 0, 12, "value"),
    (("action", "type"), 0, 200, "text"),
    (("action", "card"), 0, 200, "text"),
    (("action", "target"), 0, 200, "text"),
    (("action", "raw"), 0, 200, "text"),
    (("action", "macro_action"), 0, 200, "text"),
    (("players", 0, "seat"), 0, 5, "value"),
    (("players", 0, "life"), -1000, 1000, "value"),
    (("players", 0, "cmdr_dmg"), 0, 200, "value"),
    (("players", 0, "cmdr_dmg", "1"), 0, 200, "value"),
    (("players", 0, "mana"), 0, 1000, "value"),
    (("players", 0, "cmdr_tax"), 0, 1002, "value"),
    (("players", 0, "creatures"), 0, 1000, "value"),
    (("players", 0, "lands"), 0, 1000, "value"),
    (("players", 0, "library"), 0, 600, "value"),
    (("players", 0, "mana_sources"), 0, 1000, "value"),
    (("players", 0, "last_attacker"), -1, 5, "value"),
    (("players", 0, "hand"), 0, 600, "length"),
    (("players", 0, "hand", 0), 0, 200, "text"),
    (("players", 0, "battlefield"), 0, 1000, "length"),
    (("players", 0, "battlefield", 0), 0, 200, "text"),
    (("players", 0, "graveyard"), 0, 600, "length"),
    (("players", 0, "graveyard", 0), 0, 200, "text"),
    (("players", 0, "command_zone"), 0, 600, "length"),
    (("players", 0, "command_zone", 0), 0, 200, "text"),
    (("players", 0, "tapped"), 0, 1000, "length"),
    (("players", 0, "tapped", 0), 0, 200, "text"),
    (("players", 0, "sick"), 0, 1000, "length"),
    (("players", 0, "sick", 0), 0, 200, "text"),
    (("players", 0, "commander_name"), 0, 200, "text"),
]
OUT_OF_RANGE = [
    pytest.param(path, lo, hi, kind, side, id=f"{'.'.join(map(str, path))}-{side}")
    for path, lo, hi, kind in BOUNDS
    for side in ("below", "above")
    if side == "above" or lo > 0 or kind == "value"
]


def set_path(obj: dict, path: tuple, value) -> None:
    """``obj[path[0]][path[1]]... = value``, creating the last dict or list level when absent."""
    *head, last = path
    for part in head:
        if isinstance(obj, dict) and part not in obj:
            obj[part] = [] if isinstance(last, int) else {}
        obj = obj[part]
    if isinstance(obj, list):
        obj[last:] = [value]
    else:
        obj[last] = value


@pytest.mark.parametrize(("path", "lo", "hi", "kind", "side"), OUT_OF_RANGE)
def test_each_out_of_range_count_is_422_naming_field_and_range(app, holdout, path, lo, hi, kind, side):
    """Every bounded field, one step below and one above its range: 422, ``loc`` the field, ``msg`` its range."""
    n = lo - 1 if side == "below" else hi + 1
    point = point_json(holdout[0])
    point["action"] = {"type": "pass", "macro_action": "pass", "action_idx": 7}  # a sent action is validated too
    item = {("players",): point["players"][0], ("policy",): 0.0, ("action_mask",): 1}.get(path, "Forest")
    value = {"value": n, "text": "x" * n, "length": [item] * n}[kind]
    set_path(point, path, value)
    with TestClient(app) as client:
        r = client.post("/api/ml/policy/act", json=point)
    assert r.status_code == 422, r.text
    loc = ["body", *path]
    hits = [e for e in r.json()["detail"] if [p for p in e["loc"] if not UNION_TAG_RE.match(str(p))] == loc]
    assert hits, r.json()
    assert any(f"{lo}..{hi}" in e["msg"] and e["ctx"]["allowed"] == [lo, hi] for e in hits), hits


def test_bounds_table_lists_every_bounded_field():
    """``BOUNDS`` covers each bound of the request schema (so the test above checks every one)."""
    from ml.api.policy import DecisionPoint

    schema = DecisionPoint.model_json_schema()
    keys = {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "minItems", "maxItems", "maxLength"}
    found: set[tuple] = set()

    def walk(node: dict, path: tuple) -> None:
        if "$ref" in node:
            node = schema["$defs"][node["$ref"].rsplit("/", 1)[1]]
        if keys & node.keys():
            found.add(path)
        for member in node.get("anyOf", []):
            walk(member, path)
        for name, child in node.get("properties", {}).items():
            walk(child, (*path, name))
        if isinstance(node.get("items"), dict):
            walk(node["items"], (*path, 0))
        if isinstance(node.get("additionalProperties"), dict):
            walk(node["additionalProperties"], (*path, "1"))

    walk(schema, ())
    unbounded_above = {("generation",)}  # >= 0 only: the loop's generation counter, unused by the policy
    assert found == {p for p, *_ in BOUNDS} | unbounded_above


def test_absurd_counts_of_the_issue_are_422_in_a_batch(app, holdout):
    """The values the endpoint once answered 200 to, in a batch: each named by its point and field."""
    points = [point_json(r) for r in holdout[:5]]
    absurd = [("creatures", -5), ("lands", -3), ("cmdr_tax", -9), ("life", -1_000_000), ("mana", 1e12)]
    for i, (field, value) in enumerate(absurd):
        points[i]["players"][1][field] = value
    with TestClient(app) as client:
        r = client.post("/api/ml/policy/act/batch", json={"decisions": points})
    assert r.status_code == 422, r.text
    got = {tuple(e["loc"]): e["msg"] for e in r.json()["detail"]}
    for i, (field, _) in enumerate(absurd):
        assert ("body", "decisions", i, "players", 1, field) in got, got
    assert "-1000..1000" in got[("body", "decisions", 3, "players", 1, "life")]


def test_a_forge_line_out_of_range_names_file_line_field_and_range(tmp_path):
    """The import reads the same record model: a bad count is one line naming file, line, field and range."""
    from ml.game.record import RecordError

    lines = (Path(__file__).parent / "fixtures/forge/ml-decisions-3fa9c2e1.jsonl").read_text(encoding="utf-8").splitlines()
    bad = json.loads(lines[1])
    bad["players"][2]["life"] = -1_000_000
    path = tmp_path / "ml-decisions-0000beef.jsonl"
    path.write_text("\n".join([lines[0], json.dumps(bad), *lines[2:]]) + "\n", encoding="utf-8")
    problems: list[RecordError] = []
    good = list(read_records(path, on_error=problems.append))
    assert len(good) == len(lines) - 1 and len(problems) == 1
    msg = str(problems[0])
    assert msg.startswith(f"{path}:2: players.2.life: ") and "allowed -1000..1000" in msg and "\n" not in msg, msg


def test_real_records_lie_inside_the_bounds(tmp_path):
    """Teacher records of 6-seat pods, the pinned decision points and every Forge fixture line the import
    accepts read as before: the bounds reject no game the simulator or Forge writes."""
    from ml.api.policy import DecisionPoint

    write_teacher_batch(tmp_path, commander(6, 30), TeacherParams(games=4), "six", StagePlay(3))
    six = list(read_records(next(tmp_path.glob("*.jsonl"))))
    assert len(six) > 500 and all(len(r.players) == 6 for r in six)
    pinned = (Path(__file__).parent / "fixtures/encoding/pinned-records.jsonl").read_text(encoding="utf-8").splitlines()
    assert all(DecisionPoint.model_validate_json(line) for line in pinned)
    forge = sorted((Path(__file__).parent / "fixtures/forge").glob("*.jsonl"))  # the good files; import/ has bad lines
    assert len(forge) == 2
    for f in forge:  # every complete line (a worker file ends in a truncated one)
        assert sum(1 for _ in read_records(f)) == f.read_text(encoding="utf-8").count("\n"), f


BODY_LIMIT = 64 * 1024


@pytest.fixture
def small_limit_app(repo) -> FastAPI:
    app = FastAPI()
    add_policy_routes(app, repo, {ATTEMPT: COMMIT}.get, guard=[], max_body_bytes=BODY_LIMIT)
    return app


@pytest.mark.parametrize("path", ["/api/ml/policy/act", "/api/ml/policy/act/batch"])
def test_oversized_body_is_413_with_and_without_content_length(small_limit_app, holdout, path, monkeypatch):
    """Over the limit: 413 from Content-Length, and from a chunked body's bytes; never parsed. Under it: answered."""
    import ml.api.policy

    parsed = []
    real = ml.api.policy.PolicyService.answer
    monkeypatch.setattr(ml.api.policy.PolicyService, "answer", lambda self, *a: parsed.append(1) or real(self, *a))
    big = b'{"decisions": [' + b'{"game_id": "g"},' * (BODY_LIMIT // 16) + b"{}]}"
    assert len(big) > BODY_LIMIT

    def chunks():
        for i in range(0, len(big), 4096):
            yield big[i : i + 4096]

    small = point_json(holdout[0]) if path.endswith("/act") else {"decisions": [point_json(r) for r in holdout[:3]]}
    with TestClient(small_limit_app) as client:
        declared = client.post(path, content=big, headers={"Content-Type": "application/json"})
        streamed = client.post(path, content=chunks(), headers={"Content-Type": "application/json"})
        assert parsed == []
        fits = client.post(path, json=small)
    assert declared.status_code == 413 and "Content-Length" in declared.request.headers
    assert streamed.status_code == 413 and streamed.request.headers["Transfer-Encoding"] == "chunked"
    assert "Too Large" in declared.text and "Too Large" in streamed.text
    assert fits.status_code == 200 and parsed == [1], fits.text


def test_one_point_body_has_the_smaller_limit(app, holdout):
    """``/act`` takes one point: a body past MAX_POINT_BODY_BYTES is 413 there, while the batch route,
    whose limit is a full batch, reads the same body (and answers it on its merits)."""
    from ml.api.policy import DEFAULT_MAX_BODY_BYTES, MAX_POINT_BODY_BYTES

    point = point_json(holdout[0])
    point["hand"] = ["x" * 150] * (MAX_POINT_BODY_BYTES // 150)  # past the point limit, far under the batch one
    body = json.dumps(point).encode()
    assert MAX_POINT_BODY_BYTES < len(body) < DEFAULT_MAX_BODY_BYTES
    with TestClient(app) as client:
        one = client.post("/api/ml/policy/act", content=body, headers={"Content-Type": "application/json"})
        batch = client.post("/api/ml/policy/act/batch", json={"decisions": [point]})
        fits = client.post("/api/ml/policy/act", json=point_json(holdout[0]))
    assert one.status_code == 413
    assert batch.status_code in (200, 422), batch.text  # read and answered on its merits, not refused by size
    assert fits.status_code == 200, fits.text


def _post_oversized(port: int, chunked: bool, chunk: bytes, total: int = 50_000_000) -> bytes:
    """POST a ``total``-byte body to the act endpoint over a raw socket, declared by Content-Length or
    chunked, sending ``chunk`` after ``chunk`` until it is all sent or the server answers; the status line."""
    import select
    import socket

    head = "POST /api/ml/policy/act HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
    head += "Transfer-Encoding: chunked\r\n\r\n" if chunked else f"Content-Length: {total}\r\n\r\n"
    pieces = [chunk] * (total // len(chunk)) + [chunk[: total % len(chunk)]]
    frames = [f"{len(c):x}\r\n".encode() + c + b"\r\n" for c in pieces if c] + [b"0\r\n\r\n"] if chunked else pieces
    answer = b""
    with socket.create_connection(("127.0.0.1", port), timeout=30) as s:
        try:
            s.sendall(head.encode())
            for frame in frames:
                if select.select([s], [], [], 0)[0]:
                    break  # answered before the whole body
                s.sendall(frame)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the server answered and closed: read what it sent
        try:
            while b"\r\n" not in answer and (data := s.recv(65536)):
                answer += data
        except ConnectionResetError:
            pass
    return answer.split(b"\r\n", 1)[0]


def test_flood_of_oversized_bodies_is_413_and_memory_stays_flat(repo, capsys):
    """20 requests declaring 50 MB and 20 streaming 50 MB chunked, against uvicorn on 127.0.0.1 with the
    default limit (32 MiB): 413 each, and the server's memory (this process: the server runs in a
    thread) does not grow with the requests (RSS before, after; the bound only catches a body kept)."""
    import socket
    import threading

    import psutil
    import uvicorn

    from ml.api.policy import DEFAULT_MAX_BODY_BYTES
    from tests.conftest import wait_for

    app = FastAPI()
    add_policy_routes(app, repo, {ATTEMPT: COMMIT}.get, guard=[])
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", log_config=None, lifespan="off"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    try:
        wait_for(lambda: server.started, 60, "uvicorn to start")
        chunk = b"x" * (1 << 20)
        rss = psutil.Process().memory_info().rss
        declared = [_post_oversized(port, False, chunk) for _ in range(20)]
        rss_declared = psutil.Process().memory_info().rss
        streamed = [_post_oversized(port, True, chunk) for _ in range(20)]
        rss_streamed = psutil.Process().memory_info().rss
    finally:
        server.should_exit = True
        thread.join(30)
        sock.close()
    assert all(b" 413 " in d for d in declared), declared
    assert all(b" 413 " in s for s in streamed), streamed
    mib = 1 << 20
    with capsys.disabled():
        print(
            f"\nRSS {rss / mib:.0f} MiB before, {rss_declared / mib:.0f} after 20 x 50 MB declared, "
            f"{rss_streamed / mib:.0f} after 20 x 50 MB chunked (limit {DEFAULT_MAX_BODY_BYTES / mib:.0f} MiB)"
        )
    assert rss_streamed - rss < 10 * DEFAULT_MAX_BODY_BYTES, "memory grew with the oversized requests"
