"""PPO self-play started from the supervised student.

* Collection: ``ml.play.runner.play_games`` with the learner in one seat per pod (rotated
  through the seats), the other seats drawn from the opponent pool: the heuristic
  teacher, frozen earlier generations, the current policy, the league by PFSP weights
  updated every round from the learner's results (``opponent_mix``, ``ml.play.league``).
* Start: a copy of the student, or of a given policy with its optimizer state (the previous
  accepted agent, ``selfplay.start``), so PPO's progress carries across generations.
* Advantages: GAE(gamma, lambda) per finished episode of the learning seat (Schulman et
  al. 2016, "High-Dimensional Continuous Control Using GAE", eq. 16).
* Update: clipped surrogate objective, value loss and entropy bonus with global gradient
  clipping and per-minibatch advantage normalisation (Schulman et al. 2017; the CleanRL
  ``ppo.py`` layout: ``b_`` flattened batch, ``mb_`` minibatch); with ``magnet_kl`` > 0, plus
  ``magnet_kl * KL(pi_theta || pi_student)`` over each decision's legal moves, the pull toward
  the frozen starting student of magnetic mirror descent (Sokota et al. 2023, "A Unified
  Approach to Reinforcement Learning, Quantal Response Equilibria, and Two-Player Zero-Sum
  Games", ICLR: the magnet term, here with the student as the magnet).

Each round collects finished games only (``ml.play.collect``), with the policy of that round,
so every return is exact, no value bootstrap crosses a rollout boundary, and the data of
an update is on-policy.
"""

from __future__ import annotations

import copy
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypedDict, cast

import numpy as np
import torch
from torch import nn
from typing_extensions import NotRequired  # typing's from Python 3.11

from ml.base.progress import ProgressBar
from ml.game.protocol import GameSpec
from ml.learn.settings import Resume, RunSettings
from ml.model.policy import PolicyNet
from ml.play.buffer import Rollout
from ml.play.collect import STUDENT, Collector, CollectSettings, check_drawable
from ml.play.league import Tally, league_probabilities
from ml.runtime.executor import Executor

if TYPE_CHECKING:
    from ml.config.curriculum import AbortIf
    from ml.config.sections import SelfplayParams

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Minibatch:
    """One PPO minibatch, B decisions (tensors on the update's device).

    Attributes:
        obs: float32[B, obs_dim]; mask: bool[B, A]; actions: int64[B];
        logprobs: float32[B] behaviour log-probabilities; advantages: float32[B] (already
        normalised); returns: float32[B];
        magnet_logp: float32[B, A] the magnet's log-probabilities (masked log-softmax), or None.
    """

    obs: torch.Tensor
    mask: torch.Tensor
    actions: torch.Tensor
    logprobs: torch.Tensor
    advantages: torch.Tensor
    returns: torch.Tensor
    magnet_logp: torch.Tensor | None = None


SelfplayMetrics = TypedDict(
    "SelfplayMetrics",
    {
        "selfplay/decisions": int,
        "selfplay/episodes": int,
        "selfplay/train_win_rate": float,
        "selfplay/workers": int,
        "selfplay/decisions_per_s": float,
        "selfplay/all_seat_decisions_per_s": float,
        "selfplay/update_samples_per_s": float,
        "selfplay/aborted": "str | None",
        "selfplay/pg_loss": float,
        "selfplay/v_loss": float,
        "selfplay/entropy": float,
        "selfplay/approx_kl": float,
        "selfplay/clipfrac": float,
        "selfplay/magnet_kl": NotRequired[float],
        "selfplay/update_s": float,
        "selfplay/collect_s": float,
        "selfplay/start": str,
        "selfplay/opponents": dict[str, float],
        "selfplay/league": dict[str, dict[str, float]],
    },
)
"""``train_ppo``'s metrics: learner decisions, episodes (games), the learner's win rate (share of
its games), workers, decisions/s of the learner and of all seats and update samples/s, the abort
reason (None: none), the last update's losses (``ppo_loss``; ``magnet_kl`` with a magnet), the
seconds spent updating and collecting, what PPO started from, the mix actually played (share of
opponent seats per controller key) and, per league member, the seats it held, the learner's
score against it and its last draw probability."""


def compute_gae(
    rewards: np.ndarray, values: np.ndarray, dones: np.ndarray, gamma: float, gae_lambda: float
) -> tuple[np.ndarray, np.ndarray]:
    """Generalised advantage estimation over one or more concatenated episodes.

    Args:
        rewards: float32[T] reward after each decision.
        values: float32[T] value estimate at each decision.
        dones: bool[T], True at the last decision of an episode (no bootstrap past it).
        gamma: discount per decision.
        gae_lambda: GAE lambda.

    Returns:
        ``(advantages float32[T], returns float32[T])`` with ``returns = advantages + values``.

    Raises:
        ValueError: when the last decision is not terminal (an unfinished episode).

    References:
        Schulman et al. 2016, eq. 16: A_t = sum_l (gamma lambda)^l delta_{t+l},
        delta_t = r_t + gamma V_{t+1} (1 - done_t) - V_t.
    """
    if len(rewards) and not dones[-1]:
        raise ValueError("compute_gae needs finished episodes: the last decision must be terminal")
    advantages = np.zeros(len(rewards), dtype=np.float32)
    last = 0.0
    for t in range(len(rewards) - 1, -1, -1):
        nonterminal = 0.0 if dones[t] else 1.0
        next_value = values[t + 1] if t + 1 < len(rewards) else 0.0
        delta = rewards[t] + gamma * next_value * nonterminal - values[t]
        last = delta + gamma * gae_lambda * nonterminal * last
        advantages[t] = last
    return advantages, advantages + values.astype(np.float32)


def ppo_loss(net: PolicyNet, mb: Minibatch, cfg: SelfplayParams) -> tuple[torch.Tensor, dict[str, float]]:
    """Clipped PPO loss of one minibatch.

    Args:
        net: the policy.
        mb: the minibatch.
        cfg: the coefficients ``clip_coef``, ``ent_coef``, ``vf_coef`` and ``magnet_kl``, the
            weight of ``KL(pi_theta || magnet)`` (summed over legal moves, mean over B; used
            when ``mb.magnet_logp`` is given).

    Returns:
        ``(loss, stats)`` with pg_loss, v_loss, entropy, approx_kl, clipfrac, and magnet_kl
        when a magnet is given.

    References:
        Schulman et al. 2017, eq. 7 (L^CLIP); approx_kl as in CleanRL (Schulman's blog,
        http://joschu.net/blog/kl-approx.html, estimator k3).
    """
    logits, value = net(mb.obs, mb.mask)
    log_p = torch.log_softmax(logits, dim=-1)
    new_logprob = log_p.gather(1, mb.actions[:, None]).squeeze(-1)
    p = log_p.exp()
    entropy = -(p * torch.where(mb.mask, log_p, torch.zeros_like(log_p))).sum(-1)
    logratio = new_logprob - mb.logprobs
    ratio = logratio.exp()
    pg_loss = torch.max(
        -mb.advantages * ratio, -mb.advantages * torch.clamp(ratio, 1 - cfg.clip_coef, 1 + cfg.clip_coef)
    ).mean()
    v_loss = 0.5 * ((value - mb.returns) ** 2).mean()
    ent = entropy.mean()
    loss = pg_loss - cfg.ent_coef * ent + cfg.vf_coef * v_loss
    extra: dict[str, float] = {}
    if mb.magnet_logp is not None:
        zero = torch.zeros_like(log_p)
        magnet = (p * torch.where(mb.mask, log_p - mb.magnet_logp, zero)).sum(-1).mean()
        loss = loss + cfg.magnet_kl * magnet
        extra["magnet_kl"] = magnet.item()
    with torch.no_grad():
        approx_kl = ((ratio - 1) - logratio).mean().item()
        clipfrac = ((ratio - 1.0).abs() > cfg.clip_coef).float().mean().item()
    return loss, {
        "pg_loss": pg_loss.item(),
        "v_loss": v_loss.item(),
        "entropy": ent.item(),
        "approx_kl": approx_kl,
        "clipfrac": clipfrac,
        **extra,
    }


def ppo_update(
    net: PolicyNet,
    opt: torch.optim.Optimizer,
    batch: Rollout,
    cfg: SelfplayParams,
    generator: torch.Generator,
    device: str = "cpu",
    magnet: PolicyNet | None = None,
) -> dict[str, float]:
    """One PPO update over finished episodes of the learning seat, on ``device``.

    Args:
        net: the policy (trained in place).
        opt: its optimiser.
        batch: the round's decisions (``ml.play.runner.Rollout``, T of them, episodes whole),
            handed to torch as tensors without a copy on the CPU.
        cfg: PPO knobs (``gamma``, ``gae_lambda``, ``update_epochs``, ``minibatch_size``, coefficients).
        generator: torch RNG of the minibatch order.
        device: where the update runs.
        magnet: the frozen policy of the ``cfg.magnet_kl`` term (on ``device``), or None (no term).

    Returns:
        Mean stats over the minibatches (``ppo_loss``'s keys).
    """
    advantages, returns = compute_gae(batch.reward, batch.value, batch.done, cfg.gamma, cfg.gae_lambda)
    b_obs = torch.from_numpy(batch.obs).to(device)
    b_mask = torch.from_numpy(batch.action_mask).to(device)
    b_actions = torch.from_numpy(batch.action).to(device)
    b_logprobs = torch.from_numpy(batch.log_prob).to(device)
    b_advantages, b_returns = torch.from_numpy(advantages).to(device), torch.from_numpy(returns).to(device)
    b_magnet = None
    if magnet is not None:
        with torch.no_grad():
            b_magnet = torch.log_softmax(magnet(b_obs, b_mask)[0], dim=-1)
    stats: dict[str, list[float]] = {}
    net.train()
    n = len(batch)
    for _ in range(cfg.update_epochs):
        order = torch.randperm(n, generator=generator).to(device)
        for start in range(0, n, cfg.minibatch_size):
            mb = order[start : start + cfg.minibatch_size]
            mb_adv = b_advantages[mb]
            mb_adv = (mb_adv - mb_adv.mean()) / (mb_adv.std(unbiased=False) + 1e-8)
            minibatch = Minibatch(b_obs[mb], b_mask[mb], b_actions[mb], b_logprobs[mb], mb_adv, b_returns[mb],
                                  None if b_magnet is None else b_magnet[mb])  # fmt: skip
            loss, s = ppo_loss(net, minibatch, cfg)
            opt.zero_grad()
            loss.backward()
            nn.utils.clip_grad_norm_(net.parameters(), cfg.max_grad_norm)
            opt.step()
            for k, v in s.items():
                stats.setdefault(k, []).append(v)
    net.eval()
    return {k: float(np.mean(v)) for k, v in stats.items()}


def _check_abort(rule: AbortIf | None, steps: int, values: dict[str, float]) -> str | None:
    """The abort reason when ``rule`` applies (``steps >= at_steps`` and the metric is below the bar)."""
    if rule is None or steps < rule.at_steps:
        return None
    value = values.get(rule.metric)
    if value is None or value >= rule.below:
        return None
    return (
        f"abort_if: selfplay/{rule.metric} = {value:.4f} < {rule.below} after {steps} PPO decisions (at_steps {rule.at_steps})"
    )


def train_ppo(
    student: PolicyNet,
    frozen: Mapping[str, PolicyNet],
    cfg: SelfplayParams,
    game: GameSpec,
    run: RunSettings,
    *,
    on_update: Callable[[int, dict[str, float]], None] | None = None,
    executor: Executor | None = None,
    resume: Resume | None = None,
) -> tuple[PolicyNet, SelfplayMetrics]:
    """PPO self-play from a copy of ``student`` or of ``resume.net`` (the student is also the opponent
    kind ``student`` and, with ``cfg.magnet_kl`` > 0, the magnet; both frozen).

    Each round collects ``rollout_steps`` learner decisions of finished games
    (``ml.play.collect.Collector``: worker processes, batched inference) with the current
    policy, then runs one PPO update on ``device``.

    Args:
        student: the supervised student (left unchanged).
        frozen: name -> frozen policy of an earlier generation (opponents): ``student:<name>``
            keys are accepted students (league members only), the others agents (``frozen``
            draws and league members).
        cfg: the ``selfplay`` params (``frozen_names`` and ``start`` are the caller's: ``frozen``
            and ``resume`` are already chosen).
        game: the game (``ml.game.protocol.GameSpec``): ``num_players`` seats per game, the
            commander's ``max_turns`` cap.
        run: ``seed`` seeds opponent draws, game seeds, sampling and minibatch order;
            ``device``: torch device of the update (``cpu`` or ``cuda``), rollouts run on the CPU;
            ``progress``: progress bar over learner decisions, its total, ``learner_decisions``, a floor
            (``ml.base.progress.ProgressBar(total_is_floor=True)``); an abort is said on its last line.
        on_update: called after each update with its number (1-based) and its ``pg_loss``,
            ``v_loss``, ``entropy``, ``approx_kl``, ``clipfrac`` (means over minibatches),
            the learner's ``win_rate`` in the round's games and the round's learner
            ``decisions_per_s`` (collection only); reads only, changes no result.
        executor: where the chunks run (``ml.runtime.compute``; None: ``cfg.workers`` local processes).
        resume: where PPO starts instead of a copy of the student, with Adam's state; its
            ``optimizer_state`` is replaced by the final one (None: from the student, a new optimizer).

    Returns:
        ``(net, metrics)`` with ``selfplay/…`` keys (win rate of the learner during
        training, episodes, learner decisions and decisions/s, decisions/s of all seats
        together, update samples/s, the last update's losses, ``aborted``: the reason
        when ``cfg.abort_if`` stopped the training, else None, and the keys of
        ``SelfplayMetrics``' docstring). ``net`` is on the CPU.

    Raises:
        ValueError: no opponent kind of ``cfg.opponent_mix`` can be drawn (``frozen`` or
            ``league`` alone with no frozen policy); an ``optimizer_state`` of another network.
    """
    device = run.device
    start = resume.net if resume is not None else None
    net = copy.deepcopy(start if start is not None else student).to(device)
    magnet = copy.deepcopy(student).to(device).eval() if cfg.magnet_kl > 0 else None
    opt = torch.optim.Adam(net.parameters(), lr=cfg.lr, eps=1e-5)
    if resume is not None and resume.optimizer_state:
        opt.load_state_dict(resume.optimizer_state)
        for group in opt.param_groups:
            group["lr"] = cfg.lr
    gen = torch.Generator().manual_seed(run.seed)
    rng = np.random.default_rng(run.seed)
    league = tuple(sorted(k for k in frozen if k != STUDENT)) if cfg.opponent_mix.get("league", 0) > 0 else ()
    check_drawable(cfg.opponent_mix, frozen, league)
    settings = CollectSettings(game, cfg.num_envs, cfg.opponent_mix, league)
    opponents = {**frozen, STUDENT: student} if cfg.opponent_mix.get(STUDENT, 0) > 0 else frozen
    tally = Tally()
    probs: tuple[float, ...] = ()
    collector = Collector(net, opponents, settings, cfg.workers, cfg.rollout_chunks, executor)
    steps = wins = games = all_decisions = 0
    update_stats: dict[str, float] = {}
    collect_s = update_s = 0.0
    updated_samples = 0
    # learner_decisions is a floor: each round's chunks finish the games in flight past their quota
    bar = ProgressBar(total=cfg.learner_decisions, desc="selfplay", unit="dec", disable=not run.progress, total_is_floor=True)
    aborted = None
    updates = 0
    try:
        while steps < cfg.learner_decisions and aborted is None:
            t0 = time.perf_counter()
            probs = league_probabilities(list(league), tally, cfg.pfsp_k, cfg.league_floor) if league else ()
            chunks = collector.round(
                net,
                int(rng.integers(2**31 - 1)),
                min(cfg.rollout_steps, cfg.learner_decisions - steps),
                on_chunk=lambda c: bar.update(len(c.rollout)),  # finished decisions, every node
                league_probs=probs,
            )
            tally.merge(c.tally for c in chunks)
            t1 = time.perf_counter()
            batch = Rollout.concat([c.rollout for c in chunks], settings.game.obs_dim, settings.game.num_actions)
            n = len(batch)
            update_stats = ppo_update(net, opt, batch, cfg, gen, device, magnet)
            update_s += time.perf_counter() - t1
            collect_s += t1 - t0
            updated_samples += n * cfg.update_epochs
            steps += n
            games += sum(c.games for c in chunks)
            wins += sum(c.wins for c in chunks)
            all_decisions += sum(c.all_decisions for c in chunks)
            bar.set_postfix(win=f"{wins / max(games, 1):.2f}", kl=f"{update_stats['approx_kl']:.4f}")
            updates += 1
            if on_update is not None:
                round_games, round_wins = sum(c.games for c in chunks), sum(c.wins for c in chunks)
                round_stats = {"win_rate": round_wins / max(round_games, 1), "decisions_per_s": n / max(t1 - t0, 1e-9)}
                on_update(updates, {**update_stats, **round_stats})
            aborted = _check_abort(cfg.abort_if, steps, {"train_win_rate": wins / max(games, 1), **update_stats})
    finally:
        collector.close()
        if aborted is not None:
            bar.finish(f"stopped early: {aborted}")
        bar.close()
    metrics = {
        "selfplay/decisions": steps,
        "selfplay/episodes": games,
        "selfplay/train_win_rate": wins / max(games, 1),
        "selfplay/workers": collector.workers,
        "selfplay/decisions_per_s": steps / collect_s if collect_s > 0 else 0.0,
        "selfplay/all_seat_decisions_per_s": all_decisions / collect_s if collect_s > 0 else 0.0,
        "selfplay/update_samples_per_s": updated_samples / update_s if update_s > 0 else 0.0,
        "selfplay/aborted": aborted,
        **{f"selfplay/{k}": v for k, v in update_stats.items()},
        "selfplay/update_s": update_s,
        "selfplay/collect_s": collect_s,
        "selfplay/start": resume.name if resume is not None else STUDENT,
        "selfplay/opponents": tally.shares(),
        "selfplay/league": {
            m: {"games": tally.games.get(m, 0), "win_rate": tally.win_rate(m), "prob": p}
            for m, p in zip(league, probs, strict=True)
        },
    }
    if resume is not None:
        resume.optimizer_state = opt.state_dict()
    return net.cpu(), cast(SelfplayMetrics, metrics)  # the last update's keys: ppo_loss's
