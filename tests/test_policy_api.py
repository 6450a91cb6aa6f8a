"""The policy endpoints (``ml.api.policy``) and the ONNX export (``ml.onnx_export``).

Checks: the single and batch answers for a few hundred holdout teacher decision points equal the
student's own greedy action, probabilities and value; ONNX Runtime's outputs equal torch's within
1e-5 on 1,000 decision points, with a sidecar naming every feature and action; a bad request gets
a 422 whose ``loc`` names the field; unknown cards are answered and reported; a model switch (a bot
selected, a new student accepted) while hundreds of requests are in flight loses none and every
answer comes from one whole model; ``loop.py export-onnx`` in a git repo (expensive).

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
from ml.decisions import in_holdout
from ml.game.commander.actions import ACTION_INDEX, MACRO_ACTIONS, MAX_POD
from ml.game.commander.encoding import OBS_DIM, RecordEncoder
from ml.game.commander.features import feature_names
from ml.game.registry import commander
from ml.io import atomic_write_json
from ml.policy import PolicyNet, save_policy
from ml.records import read_records, record_to_json
from ml.teacher import write_teacher_batch

ATTEMPT = "20260101-0000-gen001-a1"
COMMIT = "c0ffee" * 6 + "abcd"


def tiny_net(seed: int) -> PolicyNet:
    torch.manual_seed(seed)
    return PolicyNet(OBS_DIM, (64, 64)).eval()


@pytest.fixture(scope="module")
def records(tmp_path_factory) -> list:
    """~1,400 teacher decision points of 12 games (records as read from the batch file)."""
    out = tmp_path_factory.mktemp("teacher")
    write_teacher_batch(out, commander(), batch_id="t1", games=12, pod_size=4, max_turns=30, seed=11)
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
    from ml.onnx_export import export_onnx, run_onnx

    recs = records[:1000]
    assert len(recs) == 1000
    net = tiny_net(4)
    side = export_onnx(net, tmp_path / "m.onnx", {"feature_names": feature_names(), "action_names": list(MACRO_ACTIONS)})
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
def test_loop_export_onnx_writes_model_and_sidecar(repo, tmp_path):
    """``loop.py export-onnx`` in a git repository: the newest student with its attempt and commit."""
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
        [sys.executable, str(ROOT / "loop.py"), "--repo", str(repo), "export-onnx", "--out", str(out)],
        capture_output=True, text=True, cwd=ROOT,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    meta = json.loads(out.with_suffix(".json").read_text())
    assert meta["model"]["name"] == "gen001" and meta["model"]["attempt_id"] == ATTEMPT
    assert meta["model"]["commit"] and len(meta["model"]["commit"]) == 40
    bad = subprocess.run(
        [sys.executable, str(ROOT / "loop.py"), "--repo", str(repo), "export-onnx", "nobody"], capture_output=True, text=True
    )
    assert bad.returncode == 2 and "nobody" in bad.stderr

    for wrong in (
        tmp_path / "m.json",
        tmp_path,
        out / "x.onnx",
    ):  # would overwrite the model with its sidecar; a folder; under a file
        res = subprocess.run(
            [sys.executable, str(ROOT / "loop.py"), "--repo", str(repo), "export-onnx", "--out", str(wrong)],
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
