"""Benchmark: simulator and self-play throughput, against OpenSpiel in the same run.

Prints, in decisions per second on one core:
  * the Commander pod's object engine (the tests' oracle of the core, ``ml.game.commander.reference``)
    with four heuristic players (rules API, no encoding),
  * the same pods through ``play_games`` (the core) with the observation encoder, one net seat
    (what self-play pays),
  * PPO self-play collection (``ml.learn.ppo.train_ppo``, fresh student) with 1 and 2 worker
    processes on the same rounds (the product's: 4,096 learner decisions in 8 chunks), run
    alternately ``--pairs`` times (the medians, and each pair's ratio: the scaling), and the PPO
    update's samples/s; on 1 worker with more games in flight (``--in-flight``: 16, 64, 128, 256
    games, the round in fewer chunks) and the share of each collection spent in the forward
    passes; and in a process without the reproducible CPU cap (``DISTILL_NATIVE_CPU=1``),
  * the policy's forward pass per decision at batches of 16 and 256 (what bounds collection),
  * the batched core (``ml.game.commander.core``, numba) with four heuristic seats: rules only
    (scripted seats play inside ``step``), and as an env (an observation and a legal mask
    written for every decision, the heuristic's choice fed back; no forward pass), and as
    self-play plays it (one external seat whose every decision gets an observation and a mask,
    the heuristic's choice fed back, three heuristic seats inside ``step``; no forward pass), and
    that row without the ``encode`` call (its ceiling), with each env row's ratio to rules-only,
    the time of ``encode`` per observation and what it may cost for the pods row to reach 0.8x,
  * OpenSpiel ``crazy_eights`` with 4 players and uniform-random play (the reference),
and each figure's ratio to the OpenSpiel reference, and numba's compile time of the core
(cold, in a fresh cache directory, in two processes as a stage compiles it and in one) and its
load time from the cache.

Usage (repository root): PYTHONPATH=. python bench/bench_selfplay.py [--seconds 5] [--core-only]
(without ``PYTHONPATH=.`` a run in another checkout imports the ``ml`` the virtual environment installed).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from typing import Any

import numpy as np
import pyspiel
import torch

from bench.bench_core import CORE_GAMES, bench_core_compile, bench_core_env, bench_core_pods, bench_core_rules, core_ratios
from ml.base.determinism import cpu_env
from ml.config.sections import SelfplayParams
from ml.game.commander import core
from ml.game.commander.core.warmup import run_kernels, warm_up
from ml.game.commander.encoding import OBS_DIM, RecordEncoder
from ml.game.commander.reference.players import HeuristicPlayer
from ml.game.commander.reference.rules import apply_action, new_game
from ml.game.commander.spec import commander
from ml.learn.ppo import train_ppo
from ml.learn.settings import RunSettings
from ml.model.policy import PolicyNet
from ml.play.controller import Controller
from ml.play.runner import Pods, play_games
from ml.play.seating import game_seeds, rotated_seatings


def bench_rules(seconds: float) -> float:
    decisions, started, g = 0, time.perf_counter(), 0
    while time.perf_counter() - started < seconds:
        state = new_game(g, 4, 30, g)
        players = [HeuristicPlayer(g * 4 + s) for s in range(4)]
        while not state.done:
            apply_action(state, players[state.current_seat].act(state))
            decisions += 1
        g += 1
    return decisions / (time.perf_counter() - started)


def bench_env(seconds: float) -> float:
    encoder = RecordEncoder()
    net = PolicyNet(OBS_DIM, (256, 256))
    controllers = {"agent": Controller("net", net), "teacher": Controller("teacher")}
    n = 400
    seatings = rotated_seatings(n, 4, "agent", lambda g: ["teacher"] * 3)
    started, decisions = time.perf_counter(), 0
    runner = play_games(Pods(seatings, game_seeds(0, n)), controllers, game=commander(4, 30), num_envs=16, encoder=encoder,
                        generator=torch.Generator().manual_seed(0))  # fmt: skip
    for result in runner:
        decisions += result.decisions
        if time.perf_counter() - started > seconds:
            break
    runner.close()
    return decisions / (time.perf_counter() - started)


PPO_ROLLOUT = 4096
"""Learner decisions a PPO round collects in the bench (``params.yaml``'s ``selfplay.rollout_steps``)."""


def bench_ppo(seconds: float, workers: int, num_envs: int = 16, chunks: int = 8) -> tuple[float, float]:
    """PPO self-play with ``workers`` processes: (all-seat decisions/s while collecting, update samples/s).

    The same work whatever ``workers`` is: ``max(2, round(seconds))`` rounds of ``PPO_ROLLOUT``
    learner decisions in ``chunks`` pieces (the product's round), so the 2-worker / 1-worker
    ratio compares one collection played two ways."""
    return _train_ppo(seconds, workers, num_envs, chunks)[:2]


def _train_ppo(seconds: float, workers: int, num_envs: int, chunks: int) -> tuple[float, float, float]:
    """``bench_ppo``'s run: (all-seat decisions/s while collecting, update samples/s, seconds of collection)."""
    steps = max(2, round(seconds)) * PPO_ROLLOUT
    cfg = SelfplayParams(learner_decisions=steps, num_envs=num_envs, rollout_steps=PPO_ROLLOUT, lr=3e-4, gamma=0.995,
                         gae_lambda=0.95, clip_coef=0.2, ent_coef=0.01, vf_coef=0.5, max_grad_norm=0.5, update_epochs=4,
                         minibatch_size=512, opponent_mix={"teacher": 1.0}, workers=workers, rollout_chunks=chunks)  # fmt: skip
    torch.manual_seed(0)
    _, m = train_ppo(PolicyNet(OBS_DIM, (256, 256)), {}, cfg, commander(4, 30), RunSettings(0))
    rate = m["selfplay/all_seat_decisions_per_s"]
    learner = m["selfplay/decisions_per_s"]
    return rate, m["selfplay/update_samples_per_s"], m["selfplay/decisions"] / learner if learner else 0.0


def in_flight_sweep(seconds: float, widths: list[int]) -> list[tuple[int, int, float, float]]:
    """PPO collection on 1 worker with ``n`` games in flight for each ``n`` of ``widths``, the round
    (``PPO_ROLLOUT`` learner decisions) in ``max(1, round(128 / n))`` chunks (16 games: the product's 8),
    and the forward passes' share of the collection time (``PolicyNet.act`` timed in this process,
    where a 1-worker collection plays).

    Returns (games in flight, chunks, all-seat decisions/s, share of collection in ``PolicyNet.act``) per width.
    """
    act, spent = PolicyNet.act, [0.0]

    def timed(self: PolicyNet, *args: Any, **kwargs: Any) -> Any:
        t = time.perf_counter()
        try:
            return act(self, *args, **kwargs)
        finally:
            spent[0] += time.perf_counter() - t

    rows = []
    PolicyNet.act = timed  # type: ignore[method-assign]
    try:
        for n in widths:
            chunks = max(1, round(128 / n))
            spent[0] = 0.0
            rate, _, collect_s = _train_ppo(seconds, 1, n, chunks)
            rows.append((n, chunks, rate, spent[0] / collect_s if collect_s else 0.0))
    finally:
        PolicyNet.act = act  # type: ignore[method-assign]
    return rows


def ppo_scaling(seconds: float, pairs: int) -> tuple[float, float, float, list[float]]:
    """``bench_ppo(seconds, 1)`` and ``bench_ppo(seconds, 2)`` run alternately ``pairs`` times (a drift of the
    machine's speed then reaches both alike): (1-worker decisions/s, its update samples/s, 2-worker
    decisions/s, each the median over the pairs; the pairs' 2-worker / 1-worker ratios in run order)."""
    runs = [(bench_ppo(seconds, 1), bench_ppo(seconds, 2)) for _ in range(pairs)]
    one = float(np.median([a[0] for a, _ in runs]))
    update = float(np.median([a[1] for a, _ in runs]))
    two = float(np.median([b[0] for _, b in runs]))
    return one, update, two, [b[0] / a[0] for a, b in runs]


def forward_cost(batch: int, repeats: int = 200) -> float:
    """Microseconds per decision of ``PolicyNet.act`` (MLP 256x256, one thread) on a batch of ``batch`` decisions."""
    net = PolicyNet(OBS_DIM, (256, 256))
    obs = np.random.default_rng(0).random((batch, OBS_DIM), np.float32)
    mask = np.ones((batch, core.kernels.NUM_ACTIONS), bool)
    gen = torch.Generator().manual_seed(0)
    for _ in range(10):
        net.act(obs, mask, gen)
    started = time.perf_counter()
    for _ in range(repeats):
        net.act(obs, mask, gen)
    return (time.perf_counter() - started) / repeats / batch * 1e6


_NATIVE = (
    "from bench.bench_selfplay import bench_ppo; from ml.game.commander.core.warmup import warm_up; import torch; "
    "torch.set_num_threads(1); warm_up(); print(bench_ppo({seconds}, 1)[0])"
)  # the kernels loaded before the timed rounds, as in the parent process


def bench_ppo_native(seconds: float) -> float:
    """``bench_ppo(seconds, 1)`` in a process with ``DISTILL_NATIVE_CPU=1`` (MKL's and ATen's own
    code paths for this CPU instead of the reproducible cap, ``ml.base.determinism``)."""
    capped = set(cpu_env({}, flags={"avx2", "fma"}))  # the variables this process's cap set: not inherited
    env = {k: v for k, v in os.environ.items() if k not in capped} | {"DISTILL_NATIVE_CPU": "1", "PYTHONPATH": os.getcwd()}
    out = subprocess.run(
        [sys.executable, "-c", _NATIVE.format(seconds=seconds)], env=env, capture_output=True, text=True, check=True
    )
    return float(out.stdout.split()[-1])


def bench_openspiel(seconds: float) -> float:
    game = pyspiel.load_game("crazy_eights", {"players": 4})
    rng = np.random.default_rng(0)
    decisions, started = 0, time.perf_counter()
    while time.perf_counter() - started < seconds:
        state = game.new_initial_state()
        while not state.is_terminal():
            if state.is_chance_node():
                outcomes, probs = zip(*state.chance_outcomes(), strict=True)
                state.apply_action(outcomes[rng.choice(len(outcomes), p=probs)])
            else:
                state.apply_action(int(rng.choice(state.legal_actions())))
                decisions += 1
    return decisions / (time.perf_counter() - started)


def _widths(text: str) -> list[int]:
    """``--in-flight``'s value: comma-separated positive game counts (an empty value: no sweep)."""
    try:
        widths = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected whole numbers separated by commas, got {text!r}") from None
    if any(n < 1 for n in widths):
        raise argparse.ArgumentTypeError(f"games in flight must be at least 1, got {text!r}")
    return widths


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=5.0, help="time per measurement (default: %(default)s)")
    parser.add_argument("--core-only", action="store_true", help="only the core rows, the compile time and the reference")
    parser.add_argument("--skip-compile", action="store_true",
                        help="leave out the compile-time row (a cold compile in a fresh cache: 1-3 min)")  # fmt: skip
    parser.add_argument("--pairs", type=int, default=3,
                        help="alternating 1-worker / 2-worker PPO runs; the rows show the medians (default: %(default)s)")  # fmt: skip
    parser.add_argument("--in-flight", type=_widths, default=[16, 64, 128, 256], metavar="N,N,...",
                        help="games in flight of the 1-worker PPO sweep, one run each (forward passes' share of "
                             "collection; default: 16,64,128,256; an empty value: no sweep)")  # fmt: skip
    args = parser.parse_args()
    if args.pairs < 1:
        parser.error(f"--pairs must be at least 1, got {args.pairs}")
    torch.set_num_threads(1)
    if not args.skip_compile:
        serial, cold, cached = bench_core_compile()
        print(
            f"core compile: {cold:.1f} s cold (empty numba cache, two processes; one process: {serial:.1f} s, "
            f"{serial / cold:.2f}x), {cached:.1f} s from the cache (import + warm-up, fresh process)"
        )
    run_kernels()
    reference = bench_openspiel(args.seconds)
    core_rules = bench_core_rules(args.seconds)
    core_env, encode_ns = bench_core_env(args.seconds)
    core_pods, external_share = bench_core_pods(args.seconds)
    core_pods_bare, _ = bench_core_pods(args.seconds, observe=False)
    warm_up()  # what a stage pays once per process (its first CoreGame), outside the timed rows
    core_rows = [
        (f"core rules-only, 4 heuristic seats, {CORE_GAMES} games batched", core_rules),
        ("core env + encoder (obs + mask every decision, no forward pass)", core_env),
        ("core env + encoder, 1 external + 3 heuristic seats (no forward pass)", core_pods),
        ("  the same without the encode call (the row's ceiling)", core_pods_bare),
    ]
    if args.core_only:
        rows = [*core_rows, ("OpenSpiel crazy_eights 4p, uniform random (reference)", reference)]
        print(f"{'benchmark':66s} {'decisions/s':>12s} {'vs OpenSpiel':>12s}")
        for name, rate in rows:
            print(f"{name:66s} {rate:12,.0f} {rate / reference:11.2f}x")
        core_ratios(core_rules, core_env, core_pods, core_pods_bare, external_share, encode_ns)
        return
    bench_ppo(1, 1)  # untimed: the first rounds in a process run slower; the 2-worker run forks from a warm process
    one, update_one, two, scaling = ppo_scaling(args.seconds, args.pairs)
    sweep = in_flight_sweep(args.seconds, args.in_flight)
    native = bench_ppo_native(args.seconds)
    rows = [
        *core_rows,
        ("simulator, 4 heuristic players (rules API)", bench_rules(args.seconds)),
        ("env + encoder, 1 net + 3 heuristic seats, 16 games batched", bench_env(args.seconds)),
        ("PPO self-play collection, 1 worker, all seats (median)", one),
        ("PPO self-play collection, 2 workers, all seats (median)", two),
        *(
            (f"  the same, 1 worker, {n} games in flight ({c} chunk{'s' if c > 1 else ''} a round, one run)", r)
            for n, c, r, _ in sweep
        ),
        ("  the same, 1 worker, DISTILL_NATIVE_CPU=1 (not reproducible)", native),
        ("OpenSpiel crazy_eights 4p, uniform random (reference)", reference),
    ]
    print(f"{'benchmark':66s} {'decisions/s':>12s} {'vs OpenSpiel':>12s}")
    for name, rate in rows:
        print(f"{name:66s} {rate:12,.0f} {rate / reference:11.2f}x")
    core_ratios(core_rules, core_env, core_pods, core_pods_bare, external_share, encode_ns)
    print(
        f"self-play scaling, 2 workers / 1 worker: {np.median(scaling):.2f}x, the median of {len(scaling)} alternating "
        f"pairs ({', '.join(f'{r:.2f}' for r in scaling)}; ideal 2.00x on 2 free cores)"
    )
    for n, _, _, share in sweep:
        print(f"PPO collection, 1 worker, {n} games in flight: {share:.0%} of the collection time in PolicyNet.act")
    print(f"PPO update: {update_one:,.0f} samples/s (minibatch 512, MLP 256x256, CPU, 1 thread)")
    print(
        f"policy forward pass + sampling (PolicyNet.act, MLP 256x256, 1 thread): {forward_cost(16):.1f} us per decision "
        f"at a batch of 16, {forward_cost(256):.1f} us at 256"
    )


if __name__ == "__main__":
    main()
