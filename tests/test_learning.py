"""Learning components against oracles and invariants.

Checks: GAE against hand-computed values (one terminal reward, constant value); the PPO
loss equals the plain policy-gradient loss at ratio 1 and clips outside the band; the
policy puts zero probability on masked actions and sums to 1; checkpoints round-trip and
unknown formats are rejected; params errors name the file, section and key; the
attempt seed changes with the attempt; PPO learns a one-decision game where one action
always wins within 10 seeded updates.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from ml.config.params import ParamsError, attempt_seed, load_params, params_from_dict
from ml.config.sections import SelfplayParams
from ml.game.commander.actions import NUM_ACTIONS
from ml.game.commander.spec import commander
from ml.learn.ppo import Minibatch, compute_gae, ppo_loss
from ml.model.policy import CheckpointError, PolicyNet, load_policy, save_policy


def test_gae_one_terminal_reward_zero_values():
    rewards = np.array([0.0, 0.0, 1.0], np.float32)
    values = np.zeros(3, np.float32)
    dones = np.array([False, False, True])
    adv, ret = compute_gae(rewards, values, dones, gamma=0.9, gae_lambda=1.0)
    np.testing.assert_allclose(adv, [0.81, 0.9, 1.0], rtol=1e-6)
    np.testing.assert_allclose(ret, adv)


def test_gae_constant_value_lambda_zero_is_td_error():
    rewards = np.array([0.0, 0.0, -1.0], np.float32)
    values = np.full(3, 0.5, np.float32)
    dones = np.array([False, False, True])
    adv, ret = compute_gae(rewards, values, dones, gamma=1.0, gae_lambda=0.0)
    np.testing.assert_allclose(adv, [0.0, 0.0, -1.5], rtol=1e-6)  # delta_t = r + V' - V; terminal: r - V
    np.testing.assert_allclose(ret, [0.5, 0.5, -1.0], rtol=1e-6)


def test_gae_does_not_bootstrap_across_episodes():
    rewards = np.array([1.0, 0.0, 1.0], np.float32)
    values = np.array([0.0, 5.0, 0.0], np.float32)
    dones = np.array([True, False, True])
    adv, _ = compute_gae(rewards, values, dones, gamma=1.0, gae_lambda=1.0)
    assert adv[0] == pytest.approx(1.0)  # the 5.0 of the next episode never leaks in


def test_gae_rejects_unfinished_episode():
    with pytest.raises(ValueError, match="finished episodes"):
        compute_gae(np.zeros(2, np.float32), np.zeros(2, np.float32), np.array([False, False]), 0.99, 0.95)


def _batch(net, n=8, seed=0):
    g = torch.Generator().manual_seed(seed)
    obs = torch.randn(n, net.obs_dim, generator=g)
    mask = torch.ones(n, NUM_ACTIONS, dtype=torch.bool)
    mask[:, 5:] = False
    with torch.no_grad():
        logits, _ = net(obs, mask)
    actions = torch.zeros(n, dtype=torch.int64)
    logp = torch.log_softmax(logits, -1)[:, 0]
    return obs, mask, actions, logp


def test_ppo_loss_at_ratio_one_is_policy_gradient():
    torch.manual_seed(0)
    net = PolicyNet(10, (16,))
    obs, mask, actions, logp = _batch(net)
    adv = torch.linspace(-1, 1, 8)
    ret = torch.zeros(8)
    _loss, stats = ppo_loss(
        net, Minibatch(obs, mask, actions, logp, adv, ret), SelfplayParams(clip_coef=0.2, ent_coef=0.0, vf_coef=0.0)
    )
    assert stats["pg_loss"] == pytest.approx(-adv.mean().item(), abs=1e-6)
    assert stats["clipfrac"] == 0.0
    assert abs(stats["approx_kl"]) < 1e-6


def test_ppo_loss_clips_large_ratios():
    torch.manual_seed(0)
    net = PolicyNet(10, (16,))
    obs, mask, actions, logp = _batch(net)
    adv = torch.ones(8)
    # behaviour log-probs far lower than the current ones -> ratio >> 1+clip: objective capped at (1+clip)*A
    _loss, stats = ppo_loss(
        net,
        Minibatch(obs, mask, actions, logp - 2.0, adv, torch.zeros(8)),
        SelfplayParams(clip_coef=0.2, ent_coef=0.0, vf_coef=0.0),
    )
    assert stats["pg_loss"] == pytest.approx(-1.2, abs=1e-5)
    assert stats["clipfrac"] == 1.0


def test_policy_masks_and_normalises():
    torch.manual_seed(1)
    net = PolicyNet(10, (16,))
    obs = np.random.default_rng(0).normal(size=(32, 10)).astype(np.float32)
    mask = np.zeros((32, NUM_ACTIONS), bool)
    mask[:, [2, 7]] = True
    logits, _ = net(torch.from_numpy(obs), torch.from_numpy(mask))
    p = torch.softmax(logits, -1).detach().numpy()
    np.testing.assert_allclose(p.sum(-1), 1.0, rtol=1e-6)
    assert (p[:, ~mask[0]] == 0).all()
    actions, _, _, _ = net.act(obs, mask, torch.Generator().manual_seed(0))
    assert set(actions.tolist()) <= {2, 7}


def test_act_draws_what_torch_multinomial_draws():
    """``PolicyNet.act`` samples with multinomial's own algorithm: the same actions and generator state,
    batch after batch, at batch sizes 1 to 40 and with rows of one legal action."""
    torch.manual_seed(3)
    net = PolicyNet(12, (16,))
    rng = np.random.default_rng(5)
    mine, theirs = torch.Generator().manual_seed(11), torch.Generator().manual_seed(11)
    for b in (1, 2, 7, 16, 40, 16, 3):
        obs = rng.normal(size=(b, 12)).astype(np.float32) * 3
        mask = rng.random((b, NUM_ACTIONS)) < 0.5
        mask[:, 0] = True
        mask[0, 1:] = False  # one legal action
        actions, _, _, probs = net.act(obs, mask, mine)
        want = torch.multinomial(torch.from_numpy(probs), 1, generator=theirs).squeeze(-1).numpy()
        np.testing.assert_array_equal(actions, want)
        assert actions[0] == 0 and mask[np.arange(b), actions].all()
    assert torch.equal(mine.get_state(), theirs.get_state())


def test_checkpoint_round_trip_and_bad_format(tmp_path):
    net = PolicyNet(10, (16, 8))
    save_policy(net, tmp_path / "a.pt", {"generation": 3})
    loaded, meta = load_policy(tmp_path / "a.pt")
    assert meta == {"generation": 3}
    for a, b in zip(net.state_dict().values(), loaded.state_dict().values(), strict=True):
        assert torch.equal(a, b)
    (tmp_path / "bad.pt").write_bytes(b"not a zip")
    with pytest.raises(CheckpointError, match=r"bad\.pt"):
        load_policy(tmp_path / "bad.pt")
    torch.save({"format": 99}, tmp_path / "future.pt")
    with pytest.raises(CheckpointError, match="unsupported checkpoint format 99"):
        load_policy(tmp_path / "future.pt")
    with pytest.raises(CheckpointError, match="not found"):
        load_policy(tmp_path / "missing.pt")


def test_params_errors_name_file_section_key(tmp_path):
    p = tmp_path / "params.yaml"
    p.write_text("train:\n  epochs: 0\n  bogus: 1\n")
    with pytest.raises(ParamsError) as e:
        load_params(p)
    assert f"{p}:2: train.epochs" in str(e.value) and f"{p}:3: train.bogus" in str(e.value)
    with pytest.raises(ParamsError, match="not found"):
        load_params(tmp_path / "nope.yaml")
    p.write_text("train:\n  epochs: 2\n  source_weights:\n    sim: 0.0\n")
    with pytest.raises(ParamsError, match=f"^{p}:3: train: source_weights needs at least one weight > 0"):
        load_params(p)  # the line of the field, not of its section
    with pytest.raises(ParamsError, match=r"train\.source_weights\.ppo: Input should be greater than or equal to 0"):
        params_from_dict({"train": {"source_weights": {"sim": 1.0, "ppo": -0.5}}})
    p.write_text("train:\n  source_weights:\n    sim: 1.0\n    PPO: 2.0\n")  # a misspelt source would train without it
    with pytest.raises(ParamsError) as e:
        load_params(p)
    assert str(e.value).endswith(f"{p}:4: train.source_weights: unknown source 'PPO' (records name forge, sim, ppo)")


def test_repo_params_load_and_seeds_differ():
    params = load_params("params.yaml")
    assert params.gate.target_win_rate == 0.35 and params.gate.gated
    assert attempt_seed(1, 0, 1) != attempt_seed(1, 0, 2) != attempt_seed(1, 1, 1)
    assert attempt_seed(1, 0, 1) == attempt_seed(1, 0, 1)
    assert len({params.stage_seed(s) for s in ("teacher", "train", "selfplay", "export", "gate")}) == 5


@pytest.mark.expensive
@pytest.mark.parametrize("league", [0, 2], ids=["teachers", "league_bank"])
def test_ppo_result_does_not_depend_on_worker_count(league):
    from ml.game.commander.encoding import OBS_DIM
    from ml.learn.ppo import train_ppo
    from ml.learn.settings import RunSettings

    mix = {"teacher": 0.5, "league": 0.5} if league else {"teacher": 1.0}
    cfg = dict(learner_decisions=400, num_envs=4, rollout_steps=200, lr=3e-4, gamma=0.99, gae_lambda=0.95, clip_coef=0.2, ent_coef=0.01,
               vf_coef=0.5, max_grad_norm=0.5, update_epochs=2, minibatch_size=64, opponent_mix=mix, rollout_chunks=4)  # fmt: skip
    torch.manual_seed(0)
    student = PolicyNet(OBS_DIM, (32,))
    frozen = {f"frozen:gen{i:03d}": PolicyNet(OBS_DIM, (32,)) for i in range(league)}  # two or more: one PolicyBank
    one, m1 = train_ppo(student, frozen, SelfplayParams(**cfg, workers=1), commander(4, 30), RunSettings(5))
    two, m2 = train_ppo(student, frozen, SelfplayParams(**cfg, workers=2), commander(4, 30), RunSettings(5))
    assert m1["selfplay/workers"] == 1 and m2["selfplay/workers"] == 2
    assert m1["selfplay/decisions"] == m2["selfplay/decisions"] and m1["selfplay/episodes"] == m2["selfplay/episodes"]
    for a, b in zip(one.state_dict().values(), two.state_dict().values(), strict=True):
        assert torch.equal(a, b)


def test_checkpoint_of_another_encoder_size_fails_clearly():
    from ml.game.commander.encoding import OBS_DIM
    from ml.play.controller import Controller
    from ml.play.runner import Pods, play_games

    old = PolicyNet(OBS_DIM - 48, (8,))  # an observation size this encoder does not produce
    games = play_games(Pods([["agent", "h", "h", "h"]], [1]), {"agent": Controller("net", old), "h": Controller("teacher")},
                       game=commander(4, 30), num_envs=1, generator=torch.Generator())  # fmt: skip
    with pytest.raises(CheckpointError, match=rf"expects {OBS_DIM - 48} observation features .* gives {OBS_DIM}"):
        next(games)


def test_ppo_learns_a_one_decision_game():
    """Each episode is one decision among 3 legal actions (a 4th masked): action 1 always wins
    (+1), the others always lose (-1), whatever the observation. From a uniform start (1/3),
    10 seeded PPO updates of 64 episodes each must put more than 0.9 on the winning action
    for every fresh observation, and never anything on the masked one."""
    from ml.learn.ppo import ppo_update
    from ml.play.buffer import Rollout

    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # a 16-unit net: threads only add overhead on a busy machine
    try:
        torch.manual_seed(0)
        net = PolicyNet(4, (16,), num_actions=4)
        cfg = SelfplayParams(learner_decisions=640, num_envs=1, rollout_steps=64, lr=1e-2, gamma=0.99, gae_lambda=0.95, clip_coef=0.2,
                             ent_coef=0.0, vf_coef=0.5, max_grad_norm=0.5, update_epochs=4, minibatch_size=32)  # fmt: skip
        opt = torch.optim.Adam(net.parameters(), lr=cfg.lr, eps=1e-5)
        gen, rng = torch.Generator().manual_seed(0), np.random.default_rng(0)
        mask = np.tile([True, True, False, True], (64, 1))
        for _ in range(10):
            obs = rng.normal(size=(64, 4)).astype(np.float32)
            actions, log_probs, values, _ = net.act(obs, mask, gen)
            assert not (actions == 2).any(), "a masked action was taken"
            rewards = np.where(actions == 1, 1.0, -1.0).astype(np.float32)
            ppo_update(net, opt, Rollout(obs, mask, actions, log_probs, values, rewards, np.ones(64, bool)), cfg, gen)
        with torch.no_grad():
            fresh = torch.from_numpy(rng.normal(size=(256, 4)).astype(np.float32))
            logits, _ = net(fresh, torch.from_numpy(np.tile(mask[0], (256, 1))))
            p = torch.softmax(logits, -1)
    finally:
        torch.set_num_threads(threads)
    assert p[:, 1].min().item() > 0.9, p[:, 1].min().item()
    assert (p[:, 2] == 0).all()
