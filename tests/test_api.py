"""The dashboard API (``ml.api``) with FastAPI's TestClient on a fake loop repository.

The repository is made in tmp_path: params.yaml, state/eval_history.json,
state/curriculum_state.json, metrics/train.json and a git history whose attempt commits
carry ``Attempt-Id:`` trailers. Starting the loop launches a stand-in ``loop.py`` (a few
lines that write status.json and obey control.json like the real loop) instead of the
real one.

Checks: status, history (with commit SHAs), Elo history (``[]`` when absent) and the
OpenAPI schema; generations named as the commits name them (``gen 001`` in flight or
next, the accepted ones counted apart, never "generation 2" for gen 001); the dashboard page's win-rate points (one per generation, the accepted
attempt), pies (``train/sampled_share``) and attempts table; start -> pause -> resume ->
stop through the control file, and a forced stop killing the process group; a stale
pause cleared by start; a server restart finding the running loop again; a loop holding
only the lock counts as running; two simultaneous starts launch one loop (409 for the
other); params overrides committed to params.yaml with its comments kept; 422 naming
the field for bad bodies; 403 for control on a non-loopback bind without a token, 401/403
without or with a wrong token and 200 with it; 403 for a cross-origin browser request.
"""

from __future__ import annotations

import html
import json
import os
import re
import shutil
import sys
import threading
from collections.abc import Callable
from pathlib import Path

import psutil
import pytest
from fastapi.testclient import TestClient
from filelock import FileLock

from ml.api import __main__ as api_main
from ml.api import control, policy
from ml.api.app import create_app
from ml.api.control import LoopController
from ml.api.readers import RepoView, per_generation
from ml.api.status import loop_status
from ml.api.vega import composition_chart, elo_chart
from ml.config.yaml_file import safe_yaml
from tests.conftest import ROOT, git, wait_for

FAKE_LOOP = """
import json, os, sys, time
from pathlib import Path
rt = Path(".dvc/tmp/loop")
rt.mkdir(parents=True, exist_ok=True)
def status(s):
    doc = {"pid": os.getpid(), "status": s, "updated_at": time.time(), "generation": 2, "attempt": 1,
           "attempt_id": "x-gen002-a1", "stage": "train", "stage_index": 1, "stages": ["teacher", "train"]}
    (rt / "status.json.tmp").write_text(json.dumps(doc))
    os.replace(rt / "status.json.tmp", rt / "status.json")
deadline = time.time() + 60
while time.time() < deadline:
    try:
        cmd = json.loads((rt / "control.json").read_text()).get("command")
    except (FileNotFoundError, ValueError):
        cmd = None
    if cmd == "stop":
        (rt / "control.json").unlink()
        status("stopped")
        sys.exit(0)
    status("paused" if cmd == "pause" else "running")
    time.sleep(0.05)
"""

ATTEMPTS = [  # (attempt id, generation, attempt, verdict, win rate, sampled_share)
    ("20261129-2348-gen000-a1", 0, 1, "accepted", 0.31, {"sim": 1.0}),
    ("20261129-2350-gen001-a1", 1, 1, "rejected", 0.22, {"ppo": 0.333, "sim": 0.667}),
    ("20261129-2352-gen001-a2", 1, 2, "accepted", 0.36, {"ppo": 0.333, "sim": 0.667}),
]


def _entry(attempt_id: str, gen: int, att: int, verdict: str, win: float, share: dict) -> dict:
    figures = {"win_rate": win, "win_rate_low": win - 0.04, "win_rate_high": win + 0.04, "eval_games": 400,
               "holdout_accuracy": 0.7, "holdout_accuracy_drop": 0.01, "sampled_share": share}  # fmt: skip
    return {"attempt_id": attempt_id, "generation": gen, "attempt": att, "verdict": verdict, "figures": figures,
            "reasons": [] if verdict == "accepted" else ["win rate too low"], "wall_s": 30.0,
            "metrics": {"train": {"train/sampled_share": share}}}  # fmt: skip


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """A loop repository after three attempts (the last one's commit not made yet)."""
    root = tmp_path / "repo"
    (root / "state").mkdir(parents=True)
    (root / "metrics").mkdir()
    shutil.copy(ROOT / "params.yaml", root / "params.yaml")
    (root / "loop.py").write_text("raise SystemExit('not the real loop')\n")
    history = [_entry(*a) for a in ATTEMPTS]
    (root / "state/eval_history.json").write_text(json.dumps(history))
    log = [{k: e[k] for k in ("attempt_id", "generation", "attempt", "verdict", "figures", "reasons")} for e in history]
    state = {"status": "running", "generation": 2, "attempt": 1, "failures": 0, "in_flight": None, "log": log}
    (root / "state/curriculum_state.json").write_text(json.dumps(state))
    (root / "metrics/train.json").write_text(json.dumps({"train/sampled_share": {"ppo": 0.333, "sim": 0.667}}))
    git(root, "init", "-q", "-b", "main")
    git(root, "config", "user.email", "test@example.com")
    git(root, "config", "user.name", "test")
    git(root, "add", "-A")
    git(root, "commit", "-qm", "project")
    for attempt_id, gen, att, verdict, *_ in ATTEMPTS[:2]:
        git(
            root,
            "commit",
            "-q",
            "--allow-empty",
            "-m",
            f"gen {gen:03d} attempt {att}: {verdict}\n\nAttempt-Id: {attempt_id}\n",
        )
    return root


@pytest.fixture
def launches(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """Replace the real loop by the stand-in; yields the argv of every launch; kills what is left."""
    fake = tmp_path / "fake" / "loop.py"
    fake.parent.mkdir()
    fake.write_text(FAKE_LOOP)
    argvs: list[list[str]] = []
    procs = []
    real = control.launch_loop

    def launch(argv: list[str], cwd: Path, log_path: Path, env: dict[str, str]):
        argvs.append(argv)
        proc = real([sys.executable, str(fake), *argv[2:]], cwd, log_path, env)
        procs.append(proc)
        return proc

    monkeypatch.setattr(control, "launch_loop", launch)
    yield argvs
    for proc in procs:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def client(repo: Path, host: str = "127.0.0.1", token: str | None = None) -> TestClient:
    return TestClient(create_app(repo, bind_host=host, token=token))


@pytest.mark.expensive  # git
def test_the_encoder_is_compiled_when_the_server_starts_not_when_the_app_is_built(repo: Path, monkeypatch: pytest.MonkeyPatch):
    """The manual's build reads ``create_app(...).openapi()``: that compiles nothing (numba, about 20 s
    on a fresh clone); a server's start compiles the policy endpoint's encoder before its first request."""
    calls: list[int] = []
    monkeypatch.setattr(policy, "encode_a_record", lambda: calls.append(1) or 0.0)
    app = create_app(repo)
    assert "/api/ml/policy/act" in str(app.openapi()["paths"]) and calls == []
    with TestClient(app):
        assert calls == [1]


def state_is(c: TestClient, *states: str) -> Callable[[], bool]:
    return lambda: c.get("/api/ml/distill/status").json()["state"] in states


# ---------------------------------------------------------------------------------------------- reading


@pytest.mark.expensive
def test_status_without_loop(repo: Path):
    s = client(repo).get("/api/ml/distill/status").json()
    assert s["state"] == "stopped" and s["running"] is False and s["pid"] is None
    assert (s["generation"], s["attempt"]) == (2, 1)
    assert s["last_verdict"]["attempt_id"] == ATTEMPTS[2][0] and s["last_verdict"]["verdict"] == "accepted"
    assert s["commit"] == git(repo, "rev-parse", "HEAD").strip()


def _panel(page: str, element_id: str) -> str:
    """The text of the ``<dd id=...>`` of the status panel, tags and extra spaces removed."""
    dd = re.search(rf'<dd id="{element_id}"[^>]*>(.*?)</dd>', page, re.S).group(1)
    return " ".join(re.sub(r"<[^>]+>", " ", dd).replace("&mdash;", "-").split())


@pytest.mark.expensive
def test_generation_numbering_matches_the_commits(repo: Path):
    """Issue #12 item 13: the commits say gen 000 and gen 001; the status must not call gen 001 "generation 2"."""
    c = client(repo)
    subjects = git(repo, "log", "--format=%s", "-2").splitlines()
    assert subjects == ["gen 001 attempt 1: rejected", "gen 000 attempt 1: accepted"]
    s = loop_status(RepoView(repo), LoopController(RepoView(repo)))
    assert (s["generation"], s["generation_label"], s["generation_in_flight"]) == (2, "gen 002", False)  # the next one
    assert (s["accepted"], s["last_accepted_label"]) == (2, "gen 001")
    panels = c.get("/dashboard/panels").text
    assert _panel(panels, "status-generation") == "gen 002 next"
    assert _panel(panels, "status-accepted") == "2 of 2 (last gen 001)"
    assert _panel(panels, "status-verdict").startswith("accepted gen 001 attempt 2: win 0.360")
    rows = re.findall(
        r'<tr class="attempt-row" data-attempt-id="[^"]*-(gen\d{3})-a(\d)".*?<td>[^<]*</td><td>(\d+)</td>', panels, re.S
    )
    assert rows and all(f"gen{gen}" == tag for tag, _, gen in rows)  # the table's gen column as in the ids
    status = re.search(r'<section id="status".*?</section>', panels, re.S).group(0)
    assert not re.search(r"generation\W+2", re.sub(r"<[^>]+>", " ", status))
    assert 'id="composition-chart"' in panels and 'id="winrate-chart"' in panels  # Vega-Lite specs (ml.api.vega)

    state = json.loads((repo / "state/curriculum_state.json").read_text())
    (repo / "state/curriculum_state.json").write_text(json.dumps({**state, "status": "done"}))
    panels = c.get("/dashboard/panels").text
    assert _panel(panels, "status-generation") == "- none in flight" and "2 of 2" in _panel(panels, "status-accepted")

    flight = {"attempt_id": "20261129-2354-gen001-a3", "generation": 1, "attempt": 3, "params_sha256": "0" * 64,
              "started_at": "2026-11-29T23:54:00"}  # fmt: skip
    (repo / "state/curriculum_state.json").write_text(
        json.dumps({**state, "generation": 1, "attempt": 3, "in_flight": flight})
    )
    panels = c.get("/dashboard/panels").text
    assert _panel(panels, "status-generation") == "gen 001 in flight"


@pytest.mark.expensive
def test_history_with_commits(repo: Path):
    c = client(repo)
    rows = c.get("/api/ml/distill/history").json()
    assert [r["attempt_id"] for r in rows] == [a[0] for a in ATTEMPTS]
    shas = git(repo, "log", "--format=%H", "-2").split()
    assert [r["commit"] for r in rows] == [shas[1], shas[0], None]
    assert rows[1]["figures"]["win_rate"] == 0.22 and "metrics" in rows[1]
    assert "metrics" not in c.get("/api/ml/distill/history", params={"metrics": False}).json()[0]


@pytest.mark.expensive
def test_elo_history(repo: Path):
    c = client(repo)
    assert c.get("/api/ml/elo/history").json() == []
    table = [{"player": "teacher", "elo": 1500.0, "low": 1500.0, "high": 1500.0, "games": 40},
             {"player": "gen000", "elo": 1420.0, "low": 1380.0, "high": 1460.0, "games": 20},
             {"player": "gen001", "elo": 1510.0, "low": 1470.0, "high": 1550.0, "games": 20}]  # fmt: skip
    elo = [{"attempt_id": ATTEMPTS[2][0], "generation": 1, "games": 40, "table": table, "gain": None}]
    (repo / "state/elo_history.json").write_text(json.dumps(elo))
    assert c.get("/api/ml/elo/history").json() == elo
    page = c.get("/").text
    spec = re.search(r'id="elo-chart"[^>]*data-spec="([^"]*)"', page).group(1)
    points = json.loads(html.unescape(spec))["data"]["values"]
    assert [(p["generation"], p["elo"], p["elo_low"]) for p in points] == [(0, 1420.0, 1380.0), (1, 1510.0, 1470.0)]


@pytest.mark.expensive
def test_openapi_lists_every_endpoint(repo: Path):
    paths = client(repo).get("/openapi.json").json()["paths"]
    for path in ("start", "status", "stop", "pause", "resume", "history"):
        assert f"/api/ml/distill/{path}" in paths
    assert "/api/ml/elo/history" in paths
    docs = client(repo).get("/docs").text  # swagger-ui from the vendored files, no CDN
    assert "/static/vendor/swagger-ui-bundle.js" in docs and "cdn" not in docs.lower()
    assert client(repo).get("/static/vendor/swagger-ui-bundle.js").status_code == 200


@pytest.mark.expensive
def test_dashboard_page(repo: Path):
    page = client(repo).get("/").text
    specs = {
        i: json.loads(html.unescape(v)) for i, v in re.findall(r'class="vl-chart" id="([\w-]+)"[^>]*data-spec="([^"]*)"', page)
    }
    points = specs["winrate-chart"]["data"]["values"]
    assert [(p["generation"], p["verdict"]) for p in points] == [
        (0, "accepted"),
        (1, "rejected"),
        (1, "accepted"),
    ]  # every attempt
    current = [v for v in specs["composition-chart"]["data"]["values"] if v["attempt"] == "current"]
    assert {v["source"]: v["share"] for v in current} == {"ppo": 0.333, "sim": 0.667}
    assert '<script src="/static/vendor/vega-embed.min.js">' in page and "cdn" not in page.lower()
    assert page.count('class="attempt-row"') == 3 and 'id="btn-pause"' in page
    assert specs["elo-chart"]["data"]["values"] == []  # no Elo ratings yet


def test_charts_units():
    chosen = per_generation([_entry(*a) for a in ATTEMPTS])
    assert [e["attempt_id"] for e in chosen] == [ATTEMPTS[0][0], ATTEMPTS[2][0]] and chosen[1]["attempts"] == 2
    bars = composition_chart([], {"sim": 1.0}).spec["data"]["values"]
    assert bars == [{"attempt": "current", "source": "sim", "share": 1.0}]
    rows = [{"generation": 0, "elo": 40.0, "elo_low": 10.0, "elo_high": 70.0}, {"generation": 1, "elo": None}]
    assert elo_chart(rows).spec["data"]["values"] == rows[:1]


# ---------------------------------------------------------------------------------------------- control


@pytest.mark.expensive
def test_start_pause_resume_stop(repo: Path, launches: list):
    c = client(repo)
    (repo / ".dvc/tmp/loop").mkdir(parents=True)
    (repo / ".dvc/tmp/loop/control.json").write_text('{"command": "pause"}')  # stale, from an earlier run
    r = c.post("/api/ml/distill/start", json={"max_generations": 3})
    assert r.status_code == 200, r.text
    assert launches[0][1:] == ["loop.py", "--max-generations", "3"]
    assert not (repo / ".dvc/tmp/loop/control.json").exists()
    wait_for(state_is(c, "running"))
    s = c.get("/api/ml/distill/status").json()
    assert s["pid"] == r.json()["pid"] and s["stage"] == "train" and s["max_generations"] == 3
    assert c.post("/api/ml/distill/start").status_code == 409
    assert c.post("/api/ml/distill/pause").status_code == 200
    wait_for(state_is(c, "paused"))
    assert c.post("/api/ml/distill/resume").status_code == 200
    wait_for(state_is(c, "running"))
    assert c.post("/api/ml/distill/stop").status_code == 200
    wait_for(state_is(c, "stopped"))
    assert c.get("/api/ml/distill/status").json()["running"] is False
    assert c.post("/api/ml/distill/pause").status_code == 409


@pytest.mark.expensive
def test_forced_stop_kills_the_process_group(repo: Path, launches: list):
    c = client(repo)
    pid = c.post("/api/ml/distill/start").json()["pid"]
    wait_for(state_is(c, "running"))
    r = c.post("/api/ml/distill/stop", json={"force": True})
    assert r.status_code == 200 and r.json() == {"requested": "kill", "pid": pid}
    assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    s = c.get("/api/ml/distill/status").json()
    assert s["state"] == "stopped" and not s["running"]
    assert c.post("/api/ml/distill/stop", json={"force": True}).status_code == 409


@pytest.mark.expensive
def test_restarted_server_reattaches(repo: Path, launches: list):
    pid = client(repo).post("/api/ml/distill/start").json()["pid"]
    fresh = client(repo)  # a new app: nothing in memory about the launch
    wait_for(state_is(fresh, "running"))
    assert fresh.get("/api/ml/distill/status").json()["pid"] == pid
    assert fresh.post("/api/ml/distill/start").status_code == 409
    assert fresh.post("/api/ml/distill/stop").status_code == 200
    wait_for(state_is(fresh, "stopped"))


@pytest.mark.expensive
def test_loop_holding_only_the_lock_counts_as_running(repo: Path, launches: list):
    lock_path = repo / ".dvc/tmp/loop.lock"
    lock_path.parent.mkdir(parents=True)
    lock = FileLock(str(lock_path))
    lock.acquire(timeout=0)
    try:
        c = client(repo)
        assert c.get("/api/ml/distill/status").json()["running"] is True
        r = c.post("/api/ml/distill/start")
        assert r.status_code == 409 and "already running" in r.json()["detail"]
    finally:
        lock.release()
    assert launches == []


@pytest.mark.expensive
def test_two_simultaneous_starts_launch_one_loop(repo: Path, launches: list):
    c = client(repo)
    barrier = threading.Barrier(2)
    codes: list[int] = []

    def start() -> None:
        barrier.wait()
        codes.append(c.post("/api/ml/distill/start").status_code)

    threads = [threading.Thread(target=start) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(codes) == [200, 409] and len(launches) == 1


@pytest.mark.expensive
def test_params_with_a_nul_byte_is_one_line(repo: Path, launches: list, caplog: pytest.LogCaptureFixture):
    """Issue 24, item 4: the status read logs one line naming the file, line and column and goes on;
    a start with overrides answers 409 with that line, writes nothing and launches nothing."""
    text = (repo / "params.yaml").read_text()
    bad = text.replace("\ntrain:\n  epochs: 8\n", "\ntrain:\n  epochs: 8\0\n", 1)
    (repo / "params.yaml").write_text(bad)
    git(repo, "commit", "-qam", "a NUL")
    line = text[: text.index("\ntrain:\n  epochs: 8\n")].count("\n") + 3
    problem = f"{repo / 'params.yaml'}:{line}:12: a NUL byte (U+0000) is not allowed in YAML"
    c = client(repo)
    with caplog.at_level("WARNING", logger="ml.api.readers"):
        assert c.get("/api/ml/distill/status").status_code == 200 and c.get("/").status_code == 200
    logged = [r.getMessage() for r in caplog.records if "params.yaml" in r.getMessage()]
    assert logged[-1] == f"params.yaml unreadable: {problem}"
    r = c.post("/api/ml/distill/start", json={"params": {"train": {"epochs": 3}}})
    assert r.status_code == 409 and r.json() == {"detail": problem}, r.text
    assert (repo / "params.yaml").read_text() == bad and launches == []


@pytest.mark.expensive
def test_start_commits_params_overrides(repo: Path, launches: list):
    before = (repo / "params.yaml").read_text()
    c = client(repo)
    # checked like params.yaml: strict types, so a string is not an integer
    refused = c.post("/api/ml/distill/start", json={"params": {"teacher": {"games": "120"}}})
    assert refused.status_code == 422 and "games" in refused.text and launches == []
    body = {"params": {"train": {"epochs": 3, "hidden_sizes": [64, 64]}, "teacher": {"games": 120}}}
    r = c.post("/api/ml/distill/start", json=body)
    assert r.status_code == 200, r.text
    text = (repo / "params.yaml").read_text()
    assert "epochs: 3" in text and "games: 120" in text and safe_yaml().load(text)["train"]["hidden_sizes"] == [64, 64]
    comments = [line for line in before.splitlines() if line.lstrip().startswith("#")]
    assert comments and all(line in text for line in comments)  # comments kept
    assert git(repo, "log", "-1", "--format=%s").startswith("params: overrides from the dashboard")
    assert r.json()["params_commit"] == git(repo, "rev-parse", "HEAD").strip()
    assert git(repo, "status", "--porcelain", "--", "params.yaml") == ""
    assert sorted(r.json()["params_changed"]) == ["teacher.games=120", "train.epochs=3", "train.hidden_sizes=[64, 64]"]


@pytest.mark.expensive
def test_overrides_refused_on_foreign_params_edit(repo: Path, launches: list):
    with open(repo / "params.yaml", "a") as f:
        f.write("# my edit\n")
    r = client(repo).post("/api/ml/distill/start", json={"params": {"train": {"epochs": 3}}})
    assert r.status_code == 409 and "params.yaml" in r.json()["detail"] and launches == []


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"max_generations": 0}, "max_generations"),
        ({"max_generations": "two"}, "max_generations"),
        ({"max_generations": 1.5}, "max_generations"),
        ({"params": {"nosuch": {"a": 1}}}, "nosuch"),
        ({"params": {"train": {"nosuch": 1}}}, "nosuch"),
        ({"params": {"train": {"epochs": "many"}}}, "epochs"),
        ({"params": {"train": {"lr": -1}}}, "lr"),
        ({"params": {"run": {"seed": 1}}}, "run"),
        ({"params": {"profiles": {"full": {}}}}, "profiles"),
        ({"params": {"train": 3}}, "train"),
        ({"bogus": 1}, "bogus"),
    ],
)
@pytest.mark.expensive
def test_bad_start_bodies_are_422_naming_the_field(repo: Path, launches: list, body: dict, field: str):
    before = (repo / "params.yaml").read_text()
    r = client(repo).post("/api/ml/distill/start", json=body)
    assert r.status_code == 422, r.text
    assert any(field in [str(x) for x in err["loc"]] for err in r.json()["detail"]), r.json()
    assert launches == [] and (repo / "params.yaml").read_text() == before


@pytest.mark.expensive
def test_bad_stop_body_is_422(repo: Path):
    r = client(repo).post("/api/ml/distill/stop", json={"force": "yes"})
    assert r.status_code == 422 and r.json()["detail"][0]["loc"][-1] == "force"


@pytest.mark.expensive
@pytest.mark.parametrize(
    ("path", "body"),
    [("/api/ml/distill/start", '{"max_generations": NaN}'), ("/api/ml/policy/act/batch", '{"decisions": [Infinity]}')],
)
def test_nan_or_infinity_in_a_body_is_422_not_500(repo: Path, launches: list, path: str, body: str):
    """Python's json reads NaN and Infinity; the 422 names the field without echoing them (a 500 before)."""
    r = client(repo).post(path, content=body, headers={"Content-Type": "application/json"})
    assert r.status_code == 422 and r.json()["detail"][0]["loc"][:2] in (["body", "max_generations"], ["body", "decisions"])
    assert launches == []


# ---------------------------------------------------------------------------------------------- safety


@pytest.mark.parametrize("action", ["start", "stop", "pause", "resume"])
@pytest.mark.expensive
def test_non_loopback_without_token_refuses_control(repo: Path, launches: list, action: str):
    c = client(repo, host="0.0.0.0")
    r = c.post(f"/api/ml/distill/{action}")
    assert r.status_code == 403 and "token" in r.json()["detail"]
    assert c.get("/api/ml/distill/status").status_code == 200 and launches == []


@pytest.mark.parametrize("host", ["0.0.0.0", "127.0.0.1"])
@pytest.mark.expensive
def test_token_required_when_set(repo: Path, launches: list, host: str):
    c = client(repo, host=host, token="s3cret")
    assert c.post("/api/ml/distill/start").status_code == 401
    assert c.post("/api/ml/distill/start", headers={"Authorization": "Bearer wrong"}).status_code == 403
    assert c.post("/api/ml/distill/start", headers={"Authorization": "Bearer s3cret"}).status_code == 200
    assert len(launches) == 1


@pytest.mark.expensive
def test_token_from_environment(repo: Path, monkeypatch: pytest.MonkeyPatch):
    seen = {}
    monkeypatch.setenv(api_main.TOKEN_ENV, "from-env")
    monkeypatch.setattr(api_main.uvicorn, "run", lambda app, **kw: seen.update(app=app, **kw))
    monkeypatch.setattr(api_main, "create_app", lambda repo, bind_host, token, **kw: seen.update(token=token) or "app")
    assert api_main.main(["--repo", str(repo), "--host", "0.0.0.0", "--port", "9999"]) == 0
    assert seen["token"] == "from-env" and seen["host"] == "0.0.0.0" and seen["port"] == 9999


@pytest.mark.expensive
def test_max_body_bytes_flag_limits_every_endpoint(repo: Path, launches: list, monkeypatch: pytest.MonkeyPatch):
    """``--max-body-bytes 100``: a 101-byte body is a 413 at the control and the policy endpoints, read or
    not; the default (32 MiB) lets a 1 MiB body through to the batch route's validation (422), while
    ``/act``, which takes one point, refuses it (``MAX_POINT_BODY_BYTES``, 128 KiB)."""
    seen: dict = {}
    monkeypatch.setattr(api_main.uvicorn, "run", lambda app, **kw: seen.update(app=app))
    assert api_main.main(["--repo", str(repo), "--max-body-bytes", "100"]) == 0
    c = TestClient(seen["app"])
    body = b'{"max_generations": 1, "params": {"gate": {}}' + b" " * 55 + b"}"
    assert len(body) == 101
    for path in ("/api/ml/distill/start", "/api/ml/policy/act", "/api/ml/policy/act/batch"):
        r = c.post(path, content=body, headers={"Content-Type": "application/json"})
        assert r.status_code == 413, (path, r.text)
    assert launches == []
    json_type = {"Content-Type": "application/json"}
    assert c.post("/api/ml/distill/stop", content=b'{"force": false}', headers=json_type).status_code != 413
    big = b'{"turn": 1' + b" " * (1 << 20) + b"}"
    assert client(repo).post("/api/ml/policy/act/batch", content=big, headers=json_type).status_code == 422
    assert client(repo).post("/api/ml/policy/act", content=big, headers=json_type).status_code == 413  # one point: 128 KiB
    with pytest.raises(SystemExit):
        api_main.parse_args(["--max-body-bytes", "0"])


@pytest.mark.expensive
def test_cross_origin_control_refused(repo: Path, launches: list):
    r = client(repo).post("/api/ml/distill/start", headers={"Origin": "http://evil.example"})
    assert r.status_code == 403 and launches == []


@pytest.mark.expensive
def test_foreign_host_header_refused_on_loopback(repo: Path):
    assert client(repo).get("/api/ml/distill/status", headers={"Host": "evil.example"}).status_code == 400


def test_cli_help():
    with pytest.raises(SystemExit) as e:
        api_main.main(["--help"])
    assert e.value.code == 0


def test_not_a_repository(tmp_path: Path):
    assert api_main.main(["--repo", str(tmp_path)]) == 2
    assert os.listdir(tmp_path) == []
