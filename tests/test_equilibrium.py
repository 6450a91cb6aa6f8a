"""The options that make the loop an equilibrium learner in two-player zero-sum OpenSpiel games.

Checks: the default MCTS teacher's batches are byte-identical to the ones before these options
(digests recorded at 9a449df); the ``uniform``, ``ismcts`` and ``cfr`` teachers write the
distribution they played from into every record's ``policy`` (``cfr``: CFR+'s average policy
at the record's information state); ``teacher.explore`` reaches more information states and
keeps the teacher's distribution as the target; a student trained on the CFR teacher's
records of kuhn_poker is near an equilibrium (NashConv below 0.05, the MCTS student's is
about 1); ``game.observation: information_state`` tells leduc_poker's 936 information states
apart (its observation tensor merges them into 576); the params refuse a non-MCTS teacher for
the commander, ``explore`` without a distribution and a ``cfr`` teacher on a game above the
size limit, each in one line; the PPO magnet (``selfplay.magnet_kl``) leaves the agent's
bits unchanged at 0 and, above 0, keeps the agent nearer the starting student; the opponent
kind ``student`` plays the starting student; the selfplay stage of generation G trains with the
entropy bonus ``ent_coef * ent_decay**G`` and records it with the agent's NashConv.
"""

from __future__ import annotations

import copy
import hashlib
import json
from pathlib import Path

import numpy as np
import pytest
import torch

from ml.config.params import ParamsError, params_from_dict
from ml.config.sections import SelfplayParams, TeacherParams
from ml.config.yaml_file import safe_yaml
from ml.data.batch_files import read_records, scan_batches
from ml.game.openspiel.env import observation_of
from ml.game.openspiel.players import _decision_states, cfr_average_policy
from ml.game.openspiel.spec import openspiel
from ml.judge.nashconv import nash_conv_metrics
from ml.learn.ppo import SelfplayMetrics, train_ppo
from ml.learn.reuse import TrainingData
from ml.learn.settings import RunSettings
from ml.learn.supervised import build_and_train
from ml.model.policy import PolicyNet
from ml.play.runner import StagePlay
from ml.play.teacher import write_teacher_batch
from stages import selfplay
from tests.conftest import KUHN_TINY, ROOT, Pipeline, tiny_params, yaml_text

KUHN = {"game": {"name": "openspiel:kuhn_poker", "pod_size": 2}, "gate": {"target_win_rate": 0.6}}

MCTS_DIGESTS = {  # sha256 of write_teacher_batch(games=30, seed=7, MCTS(20)) at 9a449df, before teacher.policy
    "kuhn_poker": "9cf08138340711802478ebbb3b93e0311d7d0088069254e00811dcec00f089cc",
    "leduc_poker": "bed7c8bc0a5220fdd4d4c0c684046f84dae451b258d21e72ca851d61c5ed48ba",
}


def _batch(tmp: Path, name: str, games: int = 30, explore: float = 0.0, **knobs) -> list:
    cfg = TeacherParams(games=games, explore=explore, policy=knobs.get("teacher_policy", "heuristic"))
    write_teacher_batch(tmp, openspiel(name, **knobs), cfg, "teacher-s1", StagePlay(7))
    (path,) = scan_batches(tmp, sources=("sim",))
    return list(read_records(path))


@pytest.mark.parametrize("name", sorted(MCTS_DIGESTS))
def test_mcts_teacher_batches_unchanged(tmp_path: Path, name: str) -> None:
    write_teacher_batch(tmp_path, openspiel(name, mcts_simulations=20), TeacherParams(games=30), "teacher-s1", StagePlay(7))
    (path,) = scan_batches(tmp_path, sources=("sim",))
    assert hashlib.sha256(path.read_bytes()).hexdigest() == MCTS_DIGESTS[name]
    assert all("policy" not in json.loads(line) for line in path.read_text().splitlines())


@pytest.mark.parametrize("policy", ["uniform", "ismcts", "cfr"])
def test_distribution_teachers_write_their_policy(tmp_path: Path, policy: str) -> None:
    records = _batch(tmp_path, "kuhn_poker", teacher_policy=policy, cfr_iterations=50, mcts_simulations=20)
    assert records and all(r.policy is not None and abs(sum(r.policy) - 1) < 1e-5 for r in records)
    if policy == "uniform":
        assert all(r.policy == [0.5, 0.5] for r in records)
    if policy == "cfr":  # the record's policy is CFR+'s average policy at its information state
        game = openspiel("kuhn_poker").openspiel_game()
        table = cfr_average_policy(game, 50)
        by_obs = {tuple(observation_of(s, s.current_player())): table[s.information_state_string()]
                  for s in _decision_states(game)}  # fmt: skip
        for r in records:
            want = by_obs[tuple(r.observation)]
            assert r.policy == pytest.approx([want.get(a, 0.0) for a in range(2)], abs=1e-6)
        assert len({tuple(r.policy) for r in records}) > 2  # not uniform: it is the solver's


def test_explore_reaches_more_information_states(tmp_path: Path) -> None:
    knobs = {"teacher_policy": "cfr", "cfr_iterations": 100, "observation": "information_state"}
    plain = _batch(tmp_path / "a", "leduc_poker", games=300, **knobs)
    explored = _batch(tmp_path / "b", "leduc_poker", games=300, explore=0.4, **knobs)
    seen = [len({tuple(r.observation) for r in recs}) for recs in (plain, explored)]
    assert seen[1] > seen[0] + 50  # measured 245 and 459 of 936
    game = openspiel("leduc_poker", observation="information_state").openspiel_game()
    table = cfr_average_policy(game, 100)
    by_obs = {tuple(s.information_state_tensor(s.current_player())): table[s.information_state_string()]
              for s in _decision_states(game)}  # fmt: skip
    for r in explored:  # exploring moves keep the teacher's distribution as the target
        want = by_obs[tuple(r.observation)]
        assert r.policy == pytest.approx([want.get(a, 0.0) for a in range(3)], abs=1e-6)


def test_teacher_nash_conv_reads_the_recorded_distribution_not_the_explored_moves(tmp_path: Path) -> None:
    """``train/nash_conv_teacher_empirical`` of an exploring CFR teacher is CFR's (what its records teach),
    not that of its explored moves; a teacher whose records carry no distribution counts its moves."""
    from open_spiel.python.algorithms import exploitability

    from ml.judge.nashconv import EmpiricalPolicy, _tree, teacher_decisions

    game = openspiel("kuhn_poker", teacher_policy="cfr", cfr_iterations=100)
    write_teacher_batch(tmp_path, game, TeacherParams(games=1000, explore=0.4, policy="cfr"), "teacher-s1", StagePlay(3))
    no_student = PolicyNet(game.obs_dim, (8,), num_actions=game.num_actions)
    taught = nash_conv_metrics(no_student, game, tmp_path)["train/nash_conv_teacher_empirical"]
    tree = _tree(game)
    moves = EmpiricalPolicy(tree, [(o, legal, a, None) for o, legal, a, _ in teacher_decisions(tmp_path)])
    explored = exploitability.nash_conv(tree.game, moves)
    assert taught < 0.02 < 0.2 < explored  # measured 0.0024 (CFR+ 100 in kuhn) and 0.271


def test_student_of_the_cfr_teacher_is_near_an_equilibrium(tmp_path: Path) -> None:
    p = params_from_dict({**KUHN, "teacher": {"policy": "cfr", "explore": 0.3}})
    game = openspiel("kuhn_poker", teacher_policy="cfr", cfr_iterations=100)
    write_teacher_batch(tmp_path / "t", game, p.teacher.model_copy(update={"games": 2000}), "teacher-s1", StagePlay(1))
    (tmp_path / "pool").mkdir()
    cfg = p.train.model_copy(
        update={"epochs": 15, "samples_per_epoch": 20000, "hidden_sizes": (128, 128), "source_weights": {"sim": 1.0}}
    )
    net, _, _ = build_and_train(cfg, game, TrainingData(tmp_path / "t", (tmp_path / "pool",)), RunSettings(1))
    metrics = nash_conv_metrics(net, game, tmp_path / "t")
    assert metrics["train/nash_conv"] < 0.05  # measured 0.007; the MCTS teacher's students: about 1 (test_openspiel)


def test_information_state_observation_tells_leduc_states_apart() -> None:
    for kind, dim, keys in (("observation", 16, 576), ("information_state", 30, 936)):
        spec = openspiel("leduc_poker", observation=kind)
        game = spec.openspiel_game()
        seen = {(tuple(observation_of(s, s.current_player(), kind)), tuple(s.legal_actions())) for s in _decision_states(game)}
        assert (spec.obs_dim, len(seen)) == (dim, keys)
        env = spec.make_env()
        env.reset(seed=1)
        assert env.observe(env.agent_selection)["observation"].shape == (dim,)


def test_params_refuse_what_does_not_apply() -> None:
    """Refused by the params (teacher.explore) or, where the game must be made to know, by ``check_params``."""
    from ml.game.checks import check_params

    with pytest.raises(ParamsError, match=r"teacher\.policy 'cfr' is for OpenSpiel games"):
        params_from_dict({"teacher": {"policy": "cfr"}}, check=check_params)
    with pytest.raises(ParamsError, match=r"teacher\.explore.*needs a teacher with a distribution"):
        params_from_dict({**KUHN, "teacher": {"policy": "uniform", "explore": 0.2}})
    with pytest.raises(ParamsError, match="more than 200000 histories"):
        params_from_dict({"game": {"name": "openspiel:liars_dice", "pod_size": 2}, "gate": {"target_win_rate": 0.6},
                          "teacher": {"policy": "cfr"}}, check=check_params)  # fmt: skip
    p = params_from_dict({**KUHN, "teacher": {"policy": "cfr"}, "selfplay": {"opponent_mix": {"student": 1.0}}})
    assert (p.teacher.policy, p.selfplay.opponent_mix) == ("cfr", {"student": 1.0})


def _kl_to(net: PolicyNet, magnet: PolicyNet, game) -> float:
    """Mean over kuhn's information states of KL(net || magnet) (nats)."""
    os_game = game.openspiel_game()
    kls = []
    for s in _decision_states(os_game):
        obs = torch.tensor([observation_of(s, s.current_player())], dtype=torch.float32)
        mask = torch.zeros((1, game.num_actions), dtype=torch.bool)
        mask[0, s.legal_actions()] = True
        with torch.no_grad():
            lp, lq = (torch.log_softmax(n(obs, mask)[0], -1) for n in (net, magnet))
        kls.append(float((lp.exp() * (lp - lq)).sum()))
    return float(np.mean(kls))


def _ppo(student: PolicyNet, game, **over) -> tuple[PolicyNet, SelfplayMetrics]:
    knobs = {"learner_decisions": 1200, "num_envs": 4, "rollout_steps": 400, "lr": 3e-3, "gamma": 1.0, "gae_lambda": 0.95,
             "clip_coef": 0.2, "ent_coef": 0.0, "vf_coef": 0.5, "max_grad_norm": 0.5, "update_epochs": 4,
             "minibatch_size": 128, "opponent_mix": {"random": 1.0}, "workers": 1, "rollout_chunks": 1}  # fmt: skip
    return train_ppo(student, {}, SelfplayParams(**{**knobs, **over}), game, RunSettings(3))


def test_magnet_keeps_the_agent_near_the_student() -> None:
    game = openspiel("kuhn_poker")
    torch.manual_seed(0)
    student = PolicyNet(game.obs_dim, (32,), game.num_actions)
    plain, m0 = _ppo(student, game)
    zero, _ = _ppo(student, game, magnet_kl=0.0)
    pulled, m1 = _ppo(student, game, magnet_kl=2.0)
    assert all(torch.equal(a, b) for a, b in zip(plain.state_dict().values(), zero.state_dict().values(), strict=True))
    assert "selfplay/magnet_kl" not in m0 and m1["selfplay/magnet_kl"] >= 0
    assert _kl_to(pulled, student, game) < 0.5 * _kl_to(plain, student, game)


def test_student_opponent_is_the_starting_student() -> None:
    game = openspiel("kuhn_poker")
    torch.manual_seed(0)
    student = PolicyNet(game.obs_dim, (32,), game.num_actions)
    vs_student, _ = _ppo(student, game, opponent_mix={"student": 1.0})
    vs_self, _ = _ppo(student, game, opponent_mix={"self": 1.0})
    # the first round's opponent is the same policy either way; later rounds differ once the agent moved
    assert any(
        not torch.equal(a, b) for a, b in zip(vs_student.state_dict().values(), vs_self.state_dict().values(), strict=True)
    )
    nc = nash_conv_metrics(vs_student, game, None, prefix="ppo")
    assert set(nc) == {"ppo/nash_conv", "ppo/nash_conv_uniform"}


@pytest.mark.parametrize("pipeline", ["kuhn_poker"], indirect=True)
def test_entropy_bonus_decays_by_generation(pipeline: Pipeline, tmp_path: Path) -> None:
    def stage(name: str, generation: int, ent_coef: float, ent_decay: float) -> tuple[dict, dict]:
        over = {**KUHN_TINY, "run": {"generation": generation}}
        over["selfplay"] = {**KUHN_TINY["selfplay"], "ent_coef": ent_coef, "ent_decay": ent_decay}
        (tmp_path / f"{name}.yaml").write_text(yaml_text(tiny_params(over)))
        out, metrics = tmp_path / f"{name}.pt", tmp_path / f"{name}.json"
        args = ["--params", str(tmp_path / f"{name}.yaml"), "--no-progress", "--student", str(pipeline.root / "student.pt"),
                "--frozen", str(tmp_path / "none"), "--out", str(out), "--metrics", str(metrics)]  # fmt: skip
        assert selfplay.main(args) == 0
        return torch.load(out, weights_only=False)["state_dict"], json.loads(metrics.read_text())

    decayed, m = stage("decayed", 3, 0.4, 0.5)
    same, m_same = stage("same", 3, 0.05, 1.0)  # 0.4 * 0.5**3
    flat, m_flat = stage("flat", 3, 0.4, 1.0)
    assert m["selfplay/ent_coef"] == m_same["selfplay/ent_coef"] == 0.05 and m_flat["selfplay/ent_coef"] == 0.4
    assert m["selfplay/nash_conv"] == m_same["selfplay/nash_conv"] != m_flat["selfplay/nash_conv"]  # the agent's
    assert all(torch.equal(decayed[k], same[k]) for k in decayed)
    assert any(not torch.equal(decayed[k], flat[k]) for k in decayed)


def test_every_profile_validates_after_every_other() -> None:
    """``loop.py --profile A`` writes A into the sections; params.yaml must then still validate,
    its other profiles included (each names what it needs: game.observation, teacher.policy,
    export.targets), with the checks that make each game (``ml.game.checks.check_params``)."""
    from ml.game.checks import check_params

    raw = safe_yaml().load((ROOT / "params.yaml").read_text())
    for name, overrides in raw["profiles"].items():
        applied = copy.deepcopy(raw)
        for section, values in overrides.items():
            applied.setdefault(section, {}).update(values)
        params_from_dict(applied, source=f"params.yaml after --profile {name}", check=check_params)
