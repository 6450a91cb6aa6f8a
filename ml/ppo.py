"""PPO self-play started from the supervised student.

* Collection: ``ml.rollout.play_games`` with the learner in one seat per pod (rotated
  through the seats), the other seats drawn from the opponent pool: the heuristic
  teacher, frozen earlier generations, the current policy (``opponent_mix``).
* Advantages: GAE(gamma, lambda) per finished episode of the learning seat (Schulman et
  al. 2016, "High-Dimensional Continuous Control Using GAE", eq. 16).
* Update: clipped surrogate objective, value loss and entropy bonus with global gradient
  clipping and per-minibatch advantage normalisation (Schulman et al. 2017; the CleanRL
  ``ppo.py`` layout: ``b_`` flattened batch, ``mb_`` minibatch).

Only finished episodes are used for an update, so every return is exact and no value
bootstrap crosses a rollout boundary.
"""

from __future__ import annotations

import copy
import logging
import time
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from ml.encoding import RecordEncoder
from ml.policy import PolicyNet
from ml.rollout import Controller, Transition, game_seeds, play_games
from ml.progress import ProgressBar

logger = logging.getLogger(__name__)


@dataclass
class PPOConfig:
    """PPO knobs (``params.yaml`` section ``selfplay``; see ``ml.params.SelfplayParams``)."""

    total_steps: int
    num_envs: int
    rollout_steps: int
    lr: float
    gamma: float
    gae_lambda: float
    clip_coef: float
    ent_coef: float
    vf_coef: float
    max_grad_norm: float
    update_epochs: int
    minibatch_size: int
    opponent_mix: dict[str, float]


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


def ppo_loss(
    net: PolicyNet,
    mb_obs: torch.Tensor,
    mb_mask: torch.Tensor,
    mb_actions: torch.Tensor,
    mb_logprobs: torch.Tensor,
    mb_advantages: torch.Tensor,
    mb_returns: torch.Tensor,
    clip_coef: float,
    ent_coef: float,
    vf_coef: float,
) -> tuple[torch.Tensor, dict[str, float]]:
    """Clipped PPO loss of one minibatch.

    Args:
        net: the policy.
        mb_obs: float32[B, obs_dim]; mb_mask: bool[B, A]; mb_actions: int64[B];
        mb_logprobs: float32[B] behaviour log-probabilities; mb_advantages: float32[B]
        (already normalised); mb_returns: float32[B].
        clip_coef, ent_coef, vf_coef: PPO coefficients.

    Returns:
        ``(loss, stats)`` with pg_loss, v_loss, entropy, approx_kl, clipfrac.

    References:
        Schulman et al. 2017, eq. 7 (L^CLIP); approx_kl as in CleanRL (Schulman's blog,
        http://joschu.net/blog/kl-approx.html, estimator k3).
    """
    logits, value = net(mb_obs, mb_mask)
    log_p = torch.log_softmax(logits, dim=-1)
    new_logprob = log_p.gather(1, mb_actions[:, None]).squeeze(-1)
    p = log_p.exp()
    entropy = -(p * torch.where(mb_mask, log_p, torch.zeros_like(log_p))).sum(-1)
    logratio = new_logprob - mb_logprobs
    ratio = logratio.exp()
    pg_loss = torch.max(-mb_advantages * ratio, -mb_advantages * torch.clamp(ratio, 1 - clip_coef, 1 + clip_coef)).mean()
    v_loss = 0.5 * ((value - mb_returns) ** 2).mean()
    ent = entropy.mean()
    loss = pg_loss - ent_coef * ent + vf_coef * v_loss
    with torch.no_grad():
        approx_kl = ((ratio - 1) - logratio).mean().item()
        clipfrac = ((ratio - 1.0).abs() > clip_coef).float().mean().item()
    return loss, {
        "pg_loss": pg_loss.item(),
        "v_loss": v_loss.item(),
        "entropy": ent.item(),
        "approx_kl": approx_kl,
        "clipfrac": clipfrac,
    }


def ppo_update(
    net: PolicyNet, opt: torch.optim.Optimizer, episodes: list[list[Transition]], cfg: PPOConfig, generator: torch.Generator
) -> dict[str, float]:
    """One PPO update over finished episodes of the learning seat. Returns mean stats."""
    flat = [t for ep in episodes for t in ep]
    rewards = np.asarray([t.reward for t in flat], np.float32)
    values = np.asarray([t.value for t in flat], np.float32)
    dones = np.asarray([t.done for t in flat], bool)
    advantages, returns = compute_gae(rewards, values, dones, cfg.gamma, cfg.gae_lambda)
    b_obs = torch.from_numpy(np.stack([t.obs for t in flat]))
    b_mask = torch.from_numpy(np.stack([t.action_mask for t in flat]))
    b_actions = torch.as_tensor([t.action for t in flat], dtype=torch.int64)
    b_logprobs = torch.as_tensor([t.log_prob for t in flat], dtype=torch.float32)
    b_advantages, b_returns = torch.from_numpy(advantages), torch.from_numpy(returns)
    stats: dict[str, list[float]] = {}
    net.train()
    for _ in range(cfg.update_epochs):
        order = torch.randperm(len(flat), generator=generator)
        for start in range(0, len(flat), cfg.minibatch_size):
            mb = order[start : start + cfg.minibatch_size]
            mb_adv = b_advantages[mb]
            mb_adv = (mb_adv - mb_adv.mean()) / (mb_adv.std(unbiased=False) + 1e-8)
            loss, s = ppo_loss(
                net,
                b_obs[mb],
                b_mask[mb],
                b_actions[mb],
                b_logprobs[mb],
                mb_adv,
                b_returns[mb],
                cfg.clip_coef,
                cfg.ent_coef,
                cfg.vf_coef,
            )
            opt.zero_grad()
            loss.backward()
            nn.utils.clip_grad_norm_(net.parameters(), cfg.max_grad_norm)
            opt.step()
            for k, v in s.items():
                stats.setdefault(k, []).append(v)
    net.eval()
    return {k: float(np.mean(v)) for k, v in stats.items()}


def _opponent_picker(mix: dict[str, float], frozen: list[str], rng: np.random.Generator):
    kinds = [k for k, w in sorted(mix.items()) if w > 0 and (k != "frozen" or frozen)]
    weights = np.asarray([mix[k] for k in kinds], np.float64)

    def pick(_game: int, _seat: int) -> str:
        kind = kinds[rng.choice(len(kinds), p=weights / weights.sum())]
        if kind == "frozen":
            return frozen[rng.integers(len(frozen))]
        return "self" if kind == "self" else kind

    return pick


def train_ppo(
    student: PolicyNet,
    frozen: dict[str, PolicyNet],
    cfg: PPOConfig,
    *,
    pod_size: int,
    max_turns: int,
    seed: int,
    encoder: RecordEncoder,
    progress: bool = True,
) -> tuple[PolicyNet, dict]:
    """PPO self-play from a copy of ``student``.

    Args:
        student: the supervised student (left unchanged).
        frozen: name -> frozen policy of an earlier generation (opponents).
        cfg: PPO knobs.
        pod_size, max_turns: game settings.
        seed: seeds opponent draws, game seeds, sampling and minibatch order.
        encoder: observation encoder.
        progress: tqdm bar over decisions.

    Returns:
        ``(net, metrics)`` with ``selfplay/…`` keys (win rate of the learner during
        training, episodes, learner decisions and decisions/s, decisions/s of all seats
        together, and the last update's losses).
    """
    net = copy.deepcopy(student)
    opt = torch.optim.Adam(net.parameters(), lr=cfg.lr, eps=1e-5)
    gen = torch.Generator().manual_seed(seed)
    rng = np.random.default_rng(seed)
    controllers = {
        "agent": Controller("net", net),
        "self": Controller("net", net),
        "heuristic": Controller("heuristic"),
        "random": Controller("random"),
    }
    controllers.update({name: Controller("net", f) for name, f in frozen.items()})
    pick = _opponent_picker(cfg.opponent_mix, sorted(frozen), rng)
    # Enough games for the step budget: a learner makes ~100 decisions a game; the runner
    # stops early once the budget is spent, so over-provisioning costs nothing.
    n_games = max(cfg.num_envs, cfg.total_steps // 20)
    seatings = [[("agent" if s == g % pod_size else pick(g, s)) for s in range(pod_size)] for g in range(n_games)]
    seeds = game_seeds(seed, n_games)
    episodes: list[list[Transition]] = []
    steps = wins = games = all_decisions = 0
    update_stats: dict[str, float] = {}
    started = time.perf_counter()
    bar = ProgressBar(total=cfg.total_steps, desc="selfplay", unit="dec", disable=not progress)
    runner = play_games(
        seatings, seeds, controllers, pod_size=pod_size, max_turns=max_turns, num_envs=cfg.num_envs,
        encoder=encoder, generator=gen, track_seats=lambda seats: [seats.index("agent")],
    )  # fmt: skip
    for result in runner:
        seat = result.seats.index("agent")
        all_decisions += result.decisions
        ep = result.transitions[seat]
        if not ep:
            continue
        episodes.append(ep)
        games += 1
        wins += int(result.winner == seat)
        steps += len(ep)
        bar.update(len(ep))
        if sum(len(e) for e in episodes) >= cfg.rollout_steps or steps >= cfg.total_steps:
            update_stats = ppo_update(net, opt, episodes, cfg, gen)
            bar.set_postfix(win=f"{wins / games:.2f}", kl=f"{update_stats['approx_kl']:.4f}")
            episodes = []
        if steps >= cfg.total_steps:
            break
    runner.close()
    bar.close()
    elapsed = time.perf_counter() - started
    metrics = {
        "selfplay/decisions": steps,
        "selfplay/episodes": games,
        "selfplay/train_win_rate": wins / max(games, 1),
        "selfplay/decisions_per_s": steps / elapsed if elapsed > 0 else 0.0,
        "selfplay/all_seat_decisions_per_s": all_decisions / elapsed if elapsed > 0 else 0.0,
        **{f"selfplay/{k}": v for k, v in update_stats.items()},
    }
    return net, metrics
