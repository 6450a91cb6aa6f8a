"""Policy distillation (``train.distill``): PPO rows fit the agent's distribution by KL, or the
chosen action only (``hard``); teacher rows keep their (partial-label) cross-entropy."""

from __future__ import annotations

import numpy as np
import torch

from ml.config.sections import TrainParams
from ml.data.decisions import DecisionSet
from ml.learn.settings import RunSettings
from ml.learn.supervised import imitation_loss, train_student
from ml.model.policy import MASKED_LOGIT


def test_imitation_loss_is_kl_with_a_policy_and_cross_entropy_without():
    gen = torch.Generator().manual_seed(0)
    logits = torch.randn(3, 5, generator=gen)
    logits[:, 4] = MASKED_LOGIT  # an illegal action
    targets = torch.zeros(3, 5, dtype=torch.bool)
    targets[0, 1] = True  # full label
    targets[1, [2, 3]] = True  # partial label
    targets[2, 0] = True
    policy = torch.zeros(3, 5)
    policy[2, :4] = torch.tensor([0.5, 0.25, 0.125, 0.125])  # row 2: the agent's distribution
    loss = imitation_loss(logits, targets, policy).numpy()
    p = torch.softmax(logits, -1).numpy().astype(np.float64)
    assert np.isclose(loss[0], -np.log(p[0, 1]), atol=1e-5)
    assert np.isclose(loss[1], -np.log(p[1, 2] + p[1, 3]), atol=1e-5)
    pi = policy[2, :4].numpy().astype(np.float64)
    assert np.isclose(loss[2], float(np.sum(pi * (np.log(pi) - np.log(p[2, :4])))), atol=1e-5)
    # scaled rows (rounding in a file) are renormalised: the same loss
    assert np.isclose(imitation_loss(logits, targets, policy * 0.999).numpy()[2], loss[2], atol=1e-5)


def _ppo_set(n: int = 400) -> DecisionSet:
    """One observation; the agent plays action 0 with 0.7 and action 1 with 0.3; labels are its samples."""
    rng = np.random.default_rng(0)
    labels = (rng.random(n) < 0.3).astype(np.int64)
    policy = np.zeros((n, 4), np.float32)
    policy[:, :2] = [0.7, 0.3]
    return DecisionSet(
        np.ones((n, 3), np.float32), np.ones((n, 4), bool), labels, np.zeros(n, np.float32),
        np.asarray(["ppo"] * n, dtype=object), np.asarray(["g"] * n, dtype=object), policy=policy,
    )  # fmt: skip


def _probs(distill: str) -> np.ndarray:
    cfg = TrainParams(epochs=30, batch_size=64, lr=0.01, hidden_sizes=(8,), samples_per_epoch=400,
                      source_weights={"ppo": 1.0}, value_coef=0.0, distill=distill)  # fmt: skip
    net, _ = train_student(_ppo_set(), _ppo_set(0), cfg, RunSettings(1))
    with torch.no_grad():
        logits, _ = net(torch.ones(1, 3), torch.ones(1, 4, dtype=torch.bool))
    return torch.softmax(logits, -1).numpy()[0]


def test_distill_kl_learns_the_agents_distribution_and_hard_its_samples():
    kl, hard = _probs("kl"), _probs("hard")
    assert abs(kl[0] - 0.7) < 0.03 and abs(kl[1] - 0.3) < 0.03 and kl[2:].sum() < 0.02
    # hard labels see the sampled actions only: the empirical share of action 1 (about 0.3 here,
    # with sampling noise), not the distribution; the two fits differ
    assert not np.allclose(kl, hard, atol=1e-3)
    assert hard[:2].sum() > 0.97


def test_ppo_rows_without_a_policy_are_counted_and_fitted_as_hard_labels(caplog):
    data = _ppo_set()
    data.policy[:150] = 0.0  # records that left `policy` out (a writer of schema 2, or version 1)
    cfg = TrainParams(epochs=2, batch_size=64, lr=0.01, hidden_sizes=(8,), samples_per_epoch=200,
                      source_weights={"ppo": 1.0}, value_coef=0.0, distill="kl")  # fmt: skip
    with caplog.at_level("WARNING", logger="ml.learn.supervised"):
        _, metrics = train_student(data, _ppo_set(0), cfg, RunSettings(1))
    assert metrics["train/ppo_decisions_without_policy"] == 150
    assert "150 PPO decisions carry no `policy`" in caplog.text
    caplog.clear()
    _, metrics = train_student(_ppo_set(), _ppo_set(0), cfg, RunSettings(1))
    assert metrics["train/ppo_decisions_without_policy"] == 0 and "carry no" not in caplog.text
