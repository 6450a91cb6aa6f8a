"""Research: how much strength the commander's macro actions hold above a policy (flat Monte Carlo search).

A searcher plays one seat of each 4-pod against three teachers (the core's heuristic). At each of its
decisions every legal macro action is tried in ``--rollouts`` copies of the game in which what the
seat cannot see is drawn again: the other seats' hands and libraries pooled and shuffled, its own
library shuffled, every random generator of the game and of the scripted seats re-seeded. After the
action, the copy is played to its end by the heuristic in every seat (``--continuation heuristic``)
or by the heuristic in the others and the policy, greedy, in the searcher's (``--continuation
policy``). The searcher plays the action with the most first places (ties: the policy's greedy
choice, or the heuristic's without ``--policy``). This is one step of policy improvement
(Tesauro and Galperin 1996, "On-line policy improvement using Monte-Carlo search"), over a
determinized game (Long et al. 2010, "Understanding the success of perfect information Monte
Carlo sampling in game tree search").

Every deal is played four times, the searcher in each seat (duplicate deals, the unit of the
interval: ``ml.judge.stats.DealTally``), and the same deals by the policy alone (greedy) when
``--policy`` is given: the printed JSON holds both first-place rates, their 95% intervals by deal,
and the paired difference with its 95% t interval over deals.

``--distill-games N`` then labels the searcher's improvement on the policy's own states (N games of
the policy, sampled, against three teachers; at each decision every legal action's share of first
places over ``--rollouts`` continuations of ``--continuation``, Q) and fine-tunes the policy by
cross-entropy on one of three targets: the search's best action where its Q exceeds the policy's
greedy choice's by more than ``--gap``, the policy's own distribution elsewhere; else
``pi(a) exp(beta (Q(a) - mean Q))`` (``--beta`` > 0); else one-hot on the best action. With
``--searcher-plays`` the searcher plays the label games and the targets are the actions it played.
The fine-tuned policy plays greedily on the same deals.

Usage: python bench/flat_search.py [--policy CKPT] [--continuation heuristic|policy] [--rollouts 32]
       [--deals 100] [--distill-games 400 [--beta 3 | --gap 0.1]]
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable

import numpy as np
import torch
from numba import njit

from ml.game.commander import core
from ml.game.commander.core.kernels import CoreState
from ml.judge.mean_return import ReturnTally
from ml.judge.stats import DealTally
from ml.model.policy import PolicyNet, load_policy

Choose = Callable[[CoreState, np.ndarray], np.ndarray]
"""Answers the searcher's decisions: ``(state, rows) -> int64[len(rows)]`` actions."""

POD = 4
TABLES = core.load_tables()


@njit(cache=False)
def _redraw_hidden(lib, lib_n, hand, hand_n, active, pod, eliminated, seed):  # type: ignore[no-untyped-def]  # compiled
    """Shuffle, in every row, each living seat's unseen cards: another seat's hand and library pooled,
    the acting seat's library alone (its hand is known to it)."""
    np.random.seed(seed)
    buf = np.empty(lib.shape[2] + hand.shape[2], np.int16)
    for r in range(lib.shape[0]):
        for s in range(pod[r]):
            if eliminated[r, s]:
                continue
            hn = 0 if s == active[r] else hand_n[r, s]
            ln = lib_n[r, s]
            buf[:hn] = hand[r, s, :hn]
            buf[hn : hn + ln] = lib[r, s, :ln]
            for i in range(hn + ln - 1, 0, -1):
                j = np.random.randint(0, i + 1)
                buf[i], buf[j] = buf[j], buf[i]
            hand[r, s, :hn] = buf[:hn]
            lib[r, s, :ln] = buf[hn : hn + ln]


def _rows(st: CoreState, rows: np.ndarray) -> CoreState:
    return CoreState(*(a[rows] for a in st))


def greedy(net: PolicyNet, st: CoreState, rows: np.ndarray) -> np.ndarray:
    """int64[len(rows)]: the policy's arg-max at the decision of each row."""
    sub = _rows(st, rows)
    obs = np.zeros((len(rows), core.OBS_DIM), np.float32)
    core.encode(sub, TABLES, sub.active.astype(np.int64), obs)
    return net.act(obs, sub.legal.copy(), greedy=True)[0]


def _play_out(st: CoreState, net: PolicyNet | None) -> None:
    """Every game of ``st`` to its end: external seats by ``net`` (greedy), the others scripted."""
    rewards = np.zeros((len(st.done), 6), np.float32)
    if net is None:
        st.seat_kind[:] = core.SEAT_HEURISTIC
    core.step(st, TABLES, np.full(len(st.done), -1, np.int64), rewards)
    while not st.done.all():
        live = np.flatnonzero(~st.done)
        actions = np.full(len(st.done), -1, np.int64)
        actions[live] = greedy(net, st, live)  # type: ignore[arg-type]
        core.step(st, TABLES, actions, rewards)


def action_values(
    st: CoreState, games: np.ndarray, rollouts: int, rng: np.random.Generator, net: PolicyNet | None
) -> np.ndarray:
    """float64[len(games), NUM_ACTIONS]: each legal action's share of first places for the seat to act in
    ``rollouts`` redrawn copies played out (``net`` None: by the heuristic); NaN on illegal actions."""
    legal = st.legal[games]
    owner, action = np.nonzero(legal)
    owner, action = np.repeat(owner, rollouts), np.repeat(action, rollouts)
    copies = _rows(st, games[owner])
    donors = core.new_state(len(owner))  # fresh generator states, dealt from new seeds
    seeds = rng.integers(1, 2**31 - 1, size=len(owner))
    core.reset(donors, TABLES, seeds, POD, 30, player_seeds=seeds[:, None] * 7 + np.arange(6)[None, :])
    copies.rng[:], copies.prng[:] = donors.rng, donors.prng
    _redraw_hidden(copies.lib, copies.lib_n, copies.hand, copies.hand_n, copies.active.astype(np.int64),
                   copies.pod.astype(np.int64), copies.eliminated, int(rng.integers(1, 2**31 - 1)))  # fmt: skip
    seat = copies.active.copy()
    core.apply_actions(copies, TABLES, action, np.zeros((len(owner), 6), np.float32))
    _play_out(copies, net)
    firsts = np.zeros(legal.shape)
    np.add.at(firsts, (owner, action), copies.winner == seat)
    return np.where(legal, firsts / rollouts, np.nan)


def play(deals: int, choose: Choose, seed: int, in_flight: int = 64) -> list[list[bool]]:
    """Per deal, the searcher's first place in each of its ``POD`` seatings; ``choose(st, rows)`` answers its decisions."""
    deal_seeds = np.random.default_rng(seed).integers(1, 2**31 - 1, size=deals)
    seeds, seat = np.repeat(deal_seeds, POD), np.tile(np.arange(POD), deals)
    firsts = []
    for start in range(0, len(seeds), in_flight):
        idx = np.arange(start, min(len(seeds), start + in_flight))
        st = core.new_state(len(idx))
        kinds = np.full((len(idx), 6), core.SEAT_HEURISTIC, np.int8)
        kinds[np.arange(len(idx)), seat[idx]] = core.SEAT_EXTERNAL
        core.reset(st, TABLES, seeds[idx], POD, 30, seat_kind=kinds, player_seeds=seeds[idx, None] * 7 + np.arange(6)[None, :])
        rewards = np.zeros((len(idx), 6), np.float32)
        actions = np.full(len(idx), -1, np.int64)
        core.step(st, TABLES, actions, rewards)
        while not st.done.all():
            live = np.flatnonzero(~st.done)
            actions = np.full(len(idx), -1, np.int64)
            actions[live] = choose(st, live)
            core.step(st, TABLES, actions, rewards)
        firsts += list(st.winner == seat[idx])
    return [firsts[d * POD : (d + 1) * POD] for d in range(deals)]


def searcher(net: PolicyNet | None, rollouts: int, continuation: str, seed: int) -> Choose:
    """The flat Monte Carlo searcher of the module docstring."""
    rng = np.random.default_rng(seed)

    def choose(st: CoreState, live: np.ndarray) -> np.ndarray:
        q = action_values(st, live, rollouts, rng, net if continuation == "policy" else None)
        if net is not None:
            tie = greedy(net, st, live)
        else:
            sub = _rows(st, live)
            sub.seat_kind[np.arange(len(live)), sub.active] = core.SEAT_HEURISTIC
            tie = core.choose_scripted(sub, TABLES, np.zeros(len(live), np.int64))
        return best_action(q, tie)

    return choose


def best_action(q: np.ndarray, tie: np.ndarray) -> np.ndarray:
    """int64[B]: the action of most first places in each row of ``q`` (float64[B, A], NaN on illegal
    actions); ``tie[b]`` where it is among the best."""
    keep = q[np.arange(len(q)), tie] >= np.nanmax(q, axis=1)
    out: np.ndarray = np.where(keep, tie, np.nanargmax(q, axis=1))
    return out


def summary(deals: list[list[bool]]) -> dict[str, float]:
    tally = DealTally()
    for d in deals:
        tally.add(sum(d), len(d))
    low, high = tally.interval()
    return {"win_rate": round(tally.rate, 4), "low": round(low, 4), "high": round(high, 4), "games": tally.trials}


def paired(a: list[list[bool]], b: list[list[bool]]) -> dict[str, float]:
    """The mean over deals of ``a``'s first-place share minus ``b``'s, with its 95% t interval by deal."""
    tally = ReturnTally()
    for x, y in zip(a, b, strict=True):
        tally.add(float(np.mean(x) - np.mean(y)))
    low, high = tally.interval()
    return {"difference": round(tally.mean, 4), "low": round(low, 4), "high": round(high, 4)}


def distill(
    net: PolicyNet,
    games: int,
    rollouts: int,
    continuation: str,
    targets: tuple[float, float],
    seed: int,
    epochs: int,
    lr: float,
    searcher_plays: bool = False,
) -> PolicyNet:
    """``net`` fine-tuned on the search's targets at the decisions of its own sampled play (module docstring);
    ``searcher_plays``: the label games are the searcher's, the targets one-hot on the actions it played."""
    rng, gen = np.random.default_rng(seed), torch.Generator().manual_seed(seed)
    obs_all, mask_all, q_all, played = [], [], [], []

    def choose(st: CoreState, live: np.ndarray) -> np.ndarray:
        sub = _rows(st, live)
        obs = np.zeros((len(live), core.OBS_DIM), np.float32)
        core.encode(sub, TABLES, sub.active.astype(np.int64), obs)
        obs_all.append(obs)
        mask_all.append(sub.legal.copy())
        q = action_values(st, live, rollouts, rng, net if continuation == "policy" else None)
        q_all.append(q)
        with torch.no_grad():
            logits, _ = net(torch.from_numpy(obs), torch.from_numpy(sub.legal.copy()))
        if searcher_plays:  # the searcher's choice, ties to the policy's greedy choice
            played.append(best_action(q, logits.argmax(1).numpy()))
            return played[-1]
        # torch.multinomial's draw (the recorded figures'), not PolicyNet.act's
        sampled: np.ndarray = torch.multinomial(torch.softmax(logits, 1), 1, generator=gen).squeeze(1).numpy()
        return sampled

    play(games // POD, choose, seed + 1)
    obs, mask, q = (torch.from_numpy(np.concatenate(x)) for x in (obs_all, mask_all, q_all))
    with torch.no_grad():
        probs = torch.softmax(net(obs, mask)[0], 1)
    q = torch.nan_to_num(q, nan=-1.0)
    beta, gap = targets
    rows, best, mine = torch.arange(len(q)), q.argmax(1), probs.argmax(1)
    if searcher_plays:
        target = torch.nn.functional.one_hot(torch.from_numpy(np.concatenate(played)), q.shape[1]).float()
    elif gap > 0:  # the search's best where it beats the policy's greedy choice by more than gap, else the policy's own
        sure = q[rows, best] - q[rows, mine] > gap
        target = torch.where(sure[:, None], torch.nn.functional.one_hot(best, q.shape[1]).float(), probs)
        print(f"distill: {sure.float().mean().item():.3f} of the decisions relabelled", flush=True)
    elif beta > 0:
        q = torch.where(mask, q, 0.0)
        centred = q - (q.sum(1, keepdim=True) / mask.sum(1, keepdim=True))
        target = probs * torch.exp(beta * centred) * mask
    else:
        target = torch.nn.functional.one_hot(best, q.shape[1]).float()
    target = target / target.sum(1, keepdim=True)
    agree = (best == mine).float().mean().item()
    print(f"distill: {len(q)} decisions, the search's best is the policy's greedy choice on {agree:.3f}", flush=True)
    opt = torch.optim.Adam(net.parameters(), lr=lr)
    net.train()
    for _ in range(epochs):
        for b in torch.randperm(len(q)).split(256):
            logp = torch.log_softmax(net(obs[b], mask[b])[0], 1).clamp_min(-1e4)
            loss = -(target[b] * logp).sum(1).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
    net.eval()
    return net


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--policy", help="checkpoint: the baseline, the tie break and (--continuation policy) the roll-out policy")
    p.add_argument("--continuation", choices=["heuristic", "policy"], default="heuristic")
    p.add_argument("--rollouts", type=int, default=32, help="redrawn copies per legal action (default 32)")
    p.add_argument("--deals", type=int, default=100, help="duplicate deals, 4 games each (default 100)")
    p.add_argument("--seed", type=int, default=0, help="the deals' seed; the search's is seed + 1 (default 0)")
    p.add_argument("--no-search", action="store_true", help="only the policy (and --distill-games)")
    p.add_argument("--distill-games", type=int, default=0, help="games of the policy labelled by the search, then fine-tuned")
    p.add_argument("--beta", type=float, default=3.0, help="distill targets pi*exp(beta*(Q - mean Q)); 0: one-hot best")
    p.add_argument("--gap", type=float, default=0.0, help="distill: one-hot best only where Q(best) - Q(greedy) > gap")
    p.add_argument(
        "--searcher-plays", action="store_true", help="distill: the searcher plays the label games; targets its actions"
    )
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--lr", type=float, default=3e-4)
    args = p.parse_args()
    if args.continuation == "policy" and not args.policy:
        p.error("--continuation policy needs --policy")
    torch.set_num_threads(1)
    net = load_policy(args.policy)[0] if args.policy else None
    out: dict[str, object] = {"rollouts": args.rollouts, "continuation": args.continuation, "deals": args.deals}
    t0 = time.time()
    base = None
    if net is not None:
        base = play(args.deals, lambda st, live: greedy(net, st, live), args.seed)
        out["policy"] = summary(base)
    if not args.no_search:
        found = play(args.deals, searcher(net, args.rollouts, args.continuation, args.seed + 1), args.seed)
        out["search"] = summary(found)
        if base is not None:
            out["search_minus_policy"] = paired(found, base)
    if args.distill_games and net is not None:
        targets = (args.beta, args.gap)
        tuned = distill(
            net,
            args.distill_games,
            args.rollouts,
            args.continuation,
            targets,
            args.seed + 2,
            args.epochs,
            args.lr,
            args.searcher_plays,
        )
        after = play(args.deals, lambda st, live: greedy(tuned, st, live), args.seed)
        out["distilled"] = {
            **summary(after),
            "beta": args.beta,
            "gap": args.gap,
            "label_games": args.distill_games,
            "searcher_plays": args.searcher_plays,
        }
        out["distilled_minus_policy"] = paired(after, base)  # type: ignore[arg-type]
    out["wall_s"] = round(time.time() - t0, 1)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
