"""PettingZoo AEC envs through the loop by import path (``game.name: pettingzoo:<module>:<factory>``).

Checks: the adapter passes PettingZoo's ``api_test`` and agrees with a plain ``agent_iter``
loop on every seat's return; params name the key of each refusal in one line (a factory that
does not import, a continuous action space, no mask, a pod size other than
``possible_agents``, a heuristic teacher); a mask given in ``infos`` works; the records carry
the game, the env version, observation and mask and round-trip through the dataset builder;
the user's scripted teacher plays as the ``teacher`` kind (the Elo anchor) and beats the
uniform player at its own game; every stage runs in process on two PettingZoo classic envs
(connect_four_v3, leduc_holdem_v4) and on a user's env written into a temporary folder, with
``teacher/env_version`` in the metrics; a tournament runs on the user's env and the
observation endpoint answers its decisions as the student's greedy choice; the manual's
example plays as written; the Ray runtime environment ships the user's module, and a local
Ray plays it to the local bits (expensive); ``loop.py`` runs one generation of the user's
env from ``PYTHONPATH`` (expensive).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import torch
from fastapi import FastAPI
from fastapi.exceptions import RequestValidationError
from fastapi.testclient import TestClient
from pettingzoo.test import api_test

from ml.api.app import validation_error
from ml.api.observation_policy import add_observation_routes  # imports GitPython, which runs git once: not in a test
from ml.config.params import ParamsError, load_params, params_from_dict
from ml.data.batch_files import BatchWriter, read_records, scan_batches
from ml.data.dataset import load_teacher
from ml.game.pettingzoo.spec import pettingzoo
from ml.game.record import OpenSpielRecord
from ml.game.registry import make_game
from ml.model.serving import MicroBatcher
from ml.play.controller import Controller
from ml.play.runner import Keep, Pods, play_games
from ml.play.seating import game_seeds
from tests.conftest import ROOT, attempt_commits, make_project_copy, run_loop, run_pipeline, tiny_params

pytest.importorskip("pettingzoo.classic", reason="the classic envs need pettingzoo[classic] (pip install -e '.[classic]')")

CONNECT_FOUR = "pettingzoo:pettingzoo.classic.connect_four_v3:env"
LEDUC = "pettingzoo:pettingzoo.classic.leduc_holdem_v4:env"
NIM = "pettingzoo:tiny_nim:env"

NIM_SOURCE = '''
"""Nim: 2 players take 1-3 stones in turn from a pile; whoever takes the last stone wins."""
import numpy as np
from gymnasium import spaces
from pettingzoo import AECEnv


class Nim(AECEnv):
    metadata = {"name": "tiny_nim_v1", "is_parallelizable": False, "render_modes": []}

    def __init__(self, stones=9, mask_in_info=False, continuous=False):
        super().__init__()
        self.stones, self.mask_in_info, self.continuous = stones, mask_in_info, continuous
        self.possible_agents = ["first", "second"]
        pile = spaces.Box(0, 1, shape=(stones + 1,), dtype=np.float32)
        mask = spaces.Box(0, 1, shape=(3,), dtype=np.int8)
        self._obs_space = pile if mask_in_info else spaces.Dict({"observation": pile, "action_mask": mask})
        self._act_space = spaces.Box(0.0, 3.0, shape=(1,)) if continuous else spaces.Discrete(3)

    def observation_space(self, agent):
        return self._obs_space

    def action_space(self, agent):
        return self._act_space

    def _mask(self):
        return np.array([self.left >= k for k in (1, 2, 3)], dtype=np.int8)

    def observe(self, agent):
        pile = np.zeros(self.stones + 1, np.float32)
        pile[self.left] = 1.0
        return pile if self.mask_in_info else {"observation": pile, "action_mask": self._mask()}

    def reset(self, seed=None, options=None):
        self.left = self.stones
        self.agents = self.possible_agents[:]
        self.rewards = {a: 0.0 for a in self.agents}
        self._cumulative_rewards = {a: 0.0 for a in self.agents}
        self.terminations = {a: False for a in self.agents}
        self.truncations = {a: False for a in self.agents}
        self.infos = {a: {} for a in self.agents}
        self.agent_selection = "first"
        self._info_mask()

    def _info_mask(self):
        if self.mask_in_info:
            self.infos[self.agent_selection] = {"action_mask": self._mask()}

    def step(self, action):
        agent = self.agent_selection
        if self.terminations[agent] or self.truncations[agent]:
            return self._was_dead_step(action)
        self._cumulative_rewards[agent] = 0.0
        self.rewards = {a: 0.0 for a in self.agents}
        self.left -= int(action) + 1
        other = "second" if agent == "first" else "first"
        if self.left == 0:
            self.rewards = {agent: 1.0, other: -1.0}
            self.terminations = {a: True for a in self.agents}
        self.agent_selection = other
        self._info_mask()
        self._accumulate_rewards()


def env(**kwargs):
    return Nim(**kwargs)


def continuous_env():
    return Nim(continuous=True)


def maskless_env():
    class NoMask(Nim):
        def observe(self, agent):
            return super().observe(agent)["observation"]

    return NoMask()


def teacher(observation, mask):
    """The winning strategy: leave a multiple of 4 (else take one)."""
    left = int(np.argmax(observation))
    take = left % 4
    return take - 1 if take and mask[take - 1] else 0
'''


@pytest.fixture
def nim(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """The user's module ``tiny_nim`` written into a folder of its own, on ``sys.path``."""
    folder = tmp_path / "user"
    folder.mkdir()
    (folder / "tiny_nim.py").write_text(textwrap.dedent(NIM_SOURCE))
    monkeypatch.syspath_prepend(str(folder))
    _forget_user_modules()
    yield folder
    _forget_user_modules()


def _forget_user_modules() -> None:
    """A fresh start for the module of another test's folder: not imported, not cached, not shipped."""
    from ml.game.pettingzoo import load as pettingzoo_env

    sys.modules.pop("tiny_nim", None)
    pettingzoo_env.inspect_env.cache_clear()
    pettingzoo_env._ship.cache_clear()
    pettingzoo_env._SHIPPED.clear()


def _params(name: str, pod_size: int = 2, **sections: dict) -> dict:
    return {
        "game": {"name": name, "pod_size": pod_size},
        "gate": {"target_win_rate": 0.6},
        "teacher": {"policy": "random"},
        **sections,
    }


@pytest.mark.parametrize("name", [CONNECT_FOUR, LEDUC])
def test_api_and_returns_agree_with_the_env(name: str) -> None:
    spec = pettingzoo(name)
    api_test(spec.make_env(), num_cycles=100)
    adapter = spec.make_env()
    from ml.game.pettingzoo.load import import_object

    plain = import_object(name.removeprefix("pettingzoo:"), "name")()
    for seed in range(6):
        adapter.reset(seed=seed)
        plain.reset(seed=seed)
        totals = dict.fromkeys(plain.possible_agents, 0.0)
        rng = np.random.default_rng(seed)
        for agent in plain.agent_iter():
            obs, reward, term, trunc, _ = plain.last()
            totals[agent] += reward
            action = None if term or trunc else int(rng.choice(np.flatnonzero(obs["action_mask"])))
            plain.step(action)
            adapter.step(action)
        returns = [totals[a] for a in plain.possible_agents]
        assert adapter.returns.tolist() == returns and not adapter.agents
        _, outcome, winner, ranking = adapter.game_result()
        assert outcome == ("draw" if returns[0] == returns[1] else f"win_seat_{int(np.argmax(returns))}")
        assert ranking == sorted(range(2), key=lambda s: (-returns[s], s)) and winner in (None, ranking[0])


def test_refusals_name_the_param(nim: Path) -> None:
    from ml.game.checks import check_params

    cases = [
        (_params("pettingzoo:no_such_module_xyz:env"), r"game\.name: cannot import 'no_such_module_xyz'"),
        (_params("pettingzoo:tiny_nim:nope"), r"game\.name: module 'tiny_nim' has no 'nope'"),
        (_params("pettingzoo:tiny_nim"), r"game\.name: 'tiny_nim' is not '<module>:<callable>'"),
        (_params("pettingzoo:tiny_nim:continuous_env"), r"game\.name: tiny_nim:continuous_env: action space of first is Box"),
        (_params("pettingzoo:tiny_nim:maskless_env"), r"game\.name: tiny_nim:maskless_env: no action_mask for first"),
        (
            _params(NIM, 3, teacher={"policy": "random"}),
            r"game\.pod_size: 3, but pettingzoo:tiny_nim:env has 2 possible_agents",
        ),
        (
            {**_params(NIM), "game": {"name": NIM, "pod_size": 2, "env_kwargs": {"colour": 1}}},
            r"game\.env_kwargs: tiny_nim:env",
        ),
        (
            _params(NIM, teacher={"policy": "heuristic"}),
            r"teacher\.policy: 'heuristic': pettingzoo:tiny_nim:env has no built-in teacher",
        ),
        (_params(NIM, teacher={"policy": "tiny_nim:nope"}), r"teacher\.policy: module 'tiny_nim' has no 'nope'"),
        ({"teacher": {"policy": "tiny_nim:teacher"}}, r"teacher\.policy: a <module>:<callable> teacher is for pettingzoo"),
    ]
    for params, message in cases:
        with pytest.raises(ParamsError, match=message) as err:
            params_from_dict(params, check=check_params)
        assert len(str(err.value).splitlines()) == 1, str(err.value)
    path = nim / "params.yaml"  # from a file, the line names file and line
    path.write_text(
        "game:\n  name: pettingzoo:tiny_nim:continuous_env\n  pod_size: 2\nteacher:\n  policy: random\ngate:\n  target_win_rate: 0.6\n"
    )
    with pytest.raises(ParamsError) as err:
        load_params(path, check=check_params)
    assert str(err.value).startswith(f"{path}:2: game.name: tiny_nim:continuous_env: action space of first is Box")


@pytest.mark.parametrize(
    ("answer", "said"),
    [("one", "answered 'one' (str), not an action index"), (0.5, "answered 0.5 (float)"),
     (True, "answered True (bool)"), (7, "answered action 7, not legal")],
)  # fmt: skip
def test_a_teacher_answering_no_action_is_one_line_naming_teacher_policy(answer, said, capsys) -> None:
    from ml.game.pettingzoo.env import Decision
    from ml.game.pettingzoo.load import PettingZooError
    from ml.game.pettingzoo.players import CallablePlayer
    from ml.runtime.cli import stage_main

    player = CallablePlayer(lambda observation, mask: answer, 0, "my_nim:teacher")
    state = Decision(np.zeros(3, np.float32), np.array([1, 1, 0], np.int8))
    with pytest.raises(PettingZooError, match=re.escape(f"teacher.policy my_nim:teacher: {said}")):
        player.act(state)
    assert stage_main(lambda: player.act(state))() == 2  # a stage says it in one line, no traceback
    err = capsys.readouterr().err
    assert err.startswith("error: teacher.policy my_nim:teacher:") and len(err.strip().splitlines()) == 1


def _nim_teacher_batch(tmp: Path, spec_kwargs: dict | None = None, n: int = 20) -> Path:
    game = pettingzoo(NIM, spec_kwargs, "tiny_nim:teacher")
    with BatchWriter(tmp, "sim", "t") as writer:
        for r in play_games(
            Pods([["teacher", "random"]] * n, game_seeds(1, n)), {"teacher": Controller("teacher"), "random": Controller("random")},
            num_envs=4, generator=torch.Generator().manual_seed(0), keep=Keep(log_seats=lambda s: [0, 1]), game=game,
        ):  # fmt: skip
            writer.write_game(r.records, r.outcome)
    return writer.path


@pytest.mark.parametrize("mask_in_info", [False, True])
def test_records_round_trip_and_the_scripted_teacher_wins(nim: Path, tmp_path: Path, mask_in_info: bool) -> None:
    path = _nim_teacher_batch(tmp_path, {"mask_in_info": mask_in_info})
    records = list(read_records(path))
    assert all(isinstance(r, OpenSpielRecord) and r.game == NIM and r.env_version == "tiny_nim_v1 unpackaged" for r in records)
    # 9 stones: the first player (the teacher, seat 0) wins every game by leaving multiples of 4
    assert {r.game_outcome for r in records} == {"win_seat_0"}
    teacher_moves = [(int(np.argmax(r.observation)), r.action.action_idx) for r in records if r.active_seat == 0]
    assert teacher_moves and all((left - 1 - idx) % 4 == 0 for left, idx in teacher_moves)  # it leaves a multiple of 4
    line = json.loads(path.read_text().splitlines()[0])
    assert list(line)[:8] == ["game_id", "turn", "phase", "active_seat", "game_outcome", "game", "env_version", "num_players"]
    p = params_from_dict(_params(NIM, teacher={"policy": "tiny_nim:teacher"}))
    train_set, holdout, stats = load_teacher([tmp_path], 0.12, make_game(p.game, p.teacher).encoder())
    assert stats["teacher_decisions"] == len(records) == len(train_set) + len(holdout)
    by_obs = {tuple(r.observation): (r.action.action_idx, tuple(r.action_mask or ())) for r in records if r.active_seat == 0}
    for obs, label, mask in zip(train_set.obs, train_set.label, train_set.action_mask, strict=True):
        if tuple(float(x) for x in obs) in by_obs:
            assert by_obs[tuple(float(x) for x in obs)] == (label, tuple(int(m) for m in mask))


SELFPLAY_TINY = {"learner_decisions": 300, "num_envs": 4, "rollout_steps": 150, "minibatch_size": 64, "update_epochs": 2}
GATE_TINY = {
    "gated": False,
    "target_win_rate": 0.6,
    "min_games": 8,
    "max_games": 24,
    "student_games": 16,
    "student_min_games": 8,
}


def test_readme_example_plays(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The manual's "Your own game" module and params (docs/pettingzoo.md), as a user copies them."""
    import re

    from ml.config.yaml_file import safe_yaml

    page = (Path(__file__).resolve().parents[1] / "docs" / "pettingzoo.md").read_text()
    section = page.split("## Your own game", 1)[1].split("\n## ", 1)[0]
    code, params = (
        re.search(r"```python\n(.*?)```", section, re.S).group(1),
        re.search(r"```yaml\n(.*?)```", section, re.S).group(1),
    )
    (tmp_path / "my_nim.py").write_text(code)
    monkeypatch.syspath_prepend(str(tmp_path))
    p = params_from_dict(safe_yaml().load(params))
    game = make_game(p.game, p.teacher)
    api_test(game.make_env(), num_cycles=50)
    seatings = [["teacher", "random"]] * 10 + [["random", "teacher"]] * 10
    results = list(play_games(
        Pods(seatings, game_seeds(2, 20)), {"teacher": Controller("teacher"), "random": Controller("random")},
        num_envs=4, generator=torch.Generator().manual_seed(0), game=game,
    ))  # fmt: skip
    wins = sum(r.seats[r.winner] == "teacher" for r in results if r.winner is not None)
    assert wins >= 14, wins  # the half-perfect teacher beats uniform play in most of 20 games
    sys.modules.pop("my_nim", None)


def _pipeline_overrides(name: str, policy: str, teacher_games: int = 24) -> dict:
    return {
        "profiles": None,  # the repo's profiles switch to its own games, which a callable teacher does not fit
        "game": {"name": name, "pod_size": 2},
        "teacher": {"games": teacher_games, "policy": policy},
        "selfplay": {**SELFPLAY_TINY, "workers": 1},
        "gate": {**GATE_TINY},
    }


@pytest.mark.parametrize(("name", "version"), [(CONNECT_FOUR, "connect_four_v3"), (LEDUC, "leduc_holdem_v4")])
def test_classic_env_stages_end_to_end(tmp_path: Path, name: str, version: str) -> None:
    pipe = run_pipeline(tmp_path, _pipeline_overrides(name, "random"))
    teacher = pipe.metrics("teacher")
    assert teacher["teacher/game"] == name and teacher["teacher/env_version"].startswith(f"{version} pettingzoo==")
    assert teacher["teacher/kind"] == "teacher.policy random" and teacher["teacher/games"] == 24
    assert pipe.metrics("selfplay")["selfplay/decisions"] >= 300 and pipe.metrics("gate")["gate/eval_games"] % 2 == 0
    assert pipe.metrics("export")["export/env_version"] == teacher["teacher/env_version"]
    (batch,) = scan_batches(pipe.dirs["candidate"], sources=("ppo",))
    recs = list(read_records(batch))
    assert recs and all(r.game == name and r.env_version == teacher["teacher/env_version"] and r.source == "ppo" for r in recs)
    assert [p.name for p in (pipe.dirs["merged"] / "pool").iterdir()] == [batch.name]


def test_user_env_stages_tournament_and_ray_runtime_env(nim: Path, tmp_path: Path) -> None:
    pipe = run_pipeline(tmp_path, _pipeline_overrides(NIM, "tiny_nim:teacher"))
    teacher = pipe.metrics("teacher")
    assert (
        teacher["teacher/env_version"] == "tiny_nim_v1 unpackaged"
        and teacher["teacher/kind"] == "teacher.policy tiny_nim:teacher"
    )
    assert pipe.metrics("train")["train/holdout_accuracy"] > 0.5  # the teacher always takes one stone from 9, 5 (and 1)
    from ml.judge.plackett_luce import fit_plackett_luce
    from ml.judge.tournament import TournamentPlay, play_tournament
    from ml.model.policy import load_policy

    student, _ = load_policy(tmp_path / "student.pt")
    game = pettingzoo(NIM, None, "tiny_nim:teacher")
    games = play_tournament({"gen000": student}, "gen000", TournamentPlay(games=24, num_envs=4, seed=5), game)
    assert all("returns" not in g for g in games)  # Nim is no OpenSpiel game: judged by first place
    fit = fit_plackett_luce([g["ranking"] for g in games], anchor="teacher", prior_chain=["gen000"])
    table = {r["player"]: r for r in fit.table()}
    assert set(table) == {"teacher", "random", "gen000"} and table["teacher"]["elo"] == 1500
    from ml.runtime.ray_cluster import runtime_env

    assert str(nim / "tiny_nim.py") in runtime_env()["py_modules"]
    _check_observation_endpoint(tmp_path, student, next((tmp_path / "teacher").glob("*.jsonl")))


def _check_observation_endpoint(tmp: Path, student: torch.nn.Module, batch: Path) -> None:
    """``POST /api/ml/policy/act/observation`` answers the records' decisions as the student's greedy
    choice; a wrong observation length is a 422 naming the field."""
    repo = tmp / "served"
    (repo / "data/merged/students").mkdir(parents=True)
    shutil.copy(tmp / "student.pt", repo / "data/merged/students/gen000.pt")
    app = FastAPI()
    app.add_exception_handler(RequestValidationError, validation_error)  # as ml.api.app.create_app does
    add_observation_routes(app, repo, lambda _: None, MicroBatcher(), 1 << 20)
    recs = list(read_records(batch))[:40]
    obs = np.asarray([r.observation for r in recs], np.float32)
    mask = np.asarray([r.action_mask for r in recs], bool)
    actions, _, values, _ = student.act(obs, mask, greedy=True)
    body = {"decisions": [{"observation": r.observation, "action_mask": r.action_mask} for r in recs]}
    with TestClient(app) as client:
        got = client.post("/api/ml/policy/act/observation", json=body)
        assert got.status_code == 200, got.text
        answers = got.json()["answers"]
        assert [a["action_idx"] for a in answers] == actions.tolist() and got.json()["model"]["name"] == "gen000"
        assert all(set(a["probs"]) == {str(i) for i in np.flatnonzero(m)} for a, m in zip(answers, mask, strict=True))
        np.testing.assert_allclose([a["value"] for a in answers], values, atol=1e-6)
        bad = client.post(
            "/api/ml/policy/act/observation", json={"decisions": [{"observation": [0.0], "action_mask": [1, 1, 1]}]}
        )
        assert bad.status_code == 422 and bad.json()["detail"][0]["loc"] == ["body", "decisions", 0, "observation"]
        first = recs[0]
        for value in ("NaN", "Infinity", "1e308"):  # not a float32 value: a 422, not a 500 or a made-up answer
            values = ", ".join([value] + ["0.0"] * (len(first.observation) - 1))
            text = '{"decisions": [{"observation": [' + values + '], "action_mask": ' + json.dumps(first.action_mask) + "}]}"
            got = client.post("/api/ml/policy/act/observation", content=text, headers={"content-type": "application/json"})
            assert got.status_code == 422, (value, got.status_code, got.text)
            assert got.json()["detail"][0]["loc"][:4] == ["body", "decisions", 0, "observation"]


@pytest.mark.expensive
def test_loop_one_generation_eval_and_dashboard_of_a_user_env_from_pythonpath(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    user = tmp_path / "user"
    user.mkdir()
    (user / "tiny_nim.py").write_text(textwrap.dedent(NIM_SOURCE))
    overrides = _pipeline_overrides(NIM, "tiny_nim:teacher")
    overrides["selfplay"]["workers"] = 2  # worker processes import the user's module too
    params = tiny_params({**overrides, "loop": {"max_generations": 1, "max_retries": 0}})
    repo = make_project_copy(tmp_path / "repo", params)
    env = {"PYTHONPATH": os.pathsep.join([str(user), os.environ.get("PYTHONPATH", "")])}
    res = run_loop(repo, env=env)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    assert len(attempt_commits(repo)) == 1
    metrics = json.loads((repo / "metrics/teacher.json").read_text())
    assert metrics["teacher/env_version"] == "tiny_nim_v1 unpackaged"
    ev = run_loop(repo, "eval", "--games", "8", env=env)
    assert ev.returncode == 0 and "teacher.policy tiny_nim:teacher" in ev.stdout, ev.stdout[-2000:] + ev.stderr[-2000:]
    assert any(line.startswith("gen000") for line in ev.stdout.splitlines()), ev.stdout
    from ml.api.app import create_app

    monkeypatch.syspath_prepend(str(user))  # as `PYTHONPATH=... python -m ml.api` would
    _forget_user_modules()
    with TestClient(create_app(repo)) as client:  # the dashboard and its status on the user's game
        page = client.get("/")
        assert page.status_code == 200 and "winrate" in page.text
        assert client.get("/api/ml/distill/status").json()["state"] == "done"
    _forget_user_modules()


@pytest.mark.expensive
@pytest.mark.xdist_group("ray")  # with tests/test_ray.py's cluster: one worker runs every Ray test
def test_ray_workers_get_the_user_module_and_the_local_bits(nim: Path, tmp_path: Path) -> None:
    """A one-node Ray started for the test plays the user's env from the module shipped in the runtime
    environment (its folder is on the driver's ``sys.path`` only) and writes the local batch bit for bit."""
    pytest.importorskip("ray", reason='Ray is not installed: pip install -e ".[ray]"')
    # in a child process: a Ray started in the pytest worker leaves it state (an auth token) that
    # tests/test_ray.py's cluster, in the same worker, then refuses (UNAUTHENTICATED)
    script = textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {str(nim)!r})  # the driver's sys.path only: not PYTHONPATH, so workers need the shipping
        from pathlib import Path
        from ml.runtime.compute import make_executor
        from ml.game.pettingzoo.spec import pettingzoo
        from ml.config.sections import ComputeParams, TeacherParams
        from ml.play.runner import StagePlay
        from ml.play.teacher import write_teacher_batch
        out = Path({str(tmp_path)!r})
        game = pettingzoo({NIM!r}, None, "tiny_nim:teacher")  # imports the module: the executor ships it
        write_teacher_batch(out / "local", game, TeacherParams(games=12), "t", StagePlay(3, chunk_games=4))
        executor = make_executor(ComputeParams(backend="ray", address="local", cpus_per_chunk=1.0))
        try:
            write_teacher_batch(out / "ray", game, TeacherParams(games=12), "t", StagePlay(3, executor=executor, chunk_games=4))
        finally:
            executor.close()
    """)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"} | {"PYTHONPATH": str(ROOT)}
    res = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stderr[-3000:]
    (local,) = (tmp_path / "local").iterdir()
    assert local.read_bytes() == (tmp_path / "ray" / local.name).read_bytes()
