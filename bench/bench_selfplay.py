"""Benchmark: simulator and self-play throughput, against OpenSpiel in the same run.

Prints, in decisions per second on one core:
  * the Commander pod simulator with four heuristic players (rules API, no encoding),
  * the same pods through the PettingZoo env with the observation encoder (what self-play pays),
  * PPO self-play collection (``ml.ppo.train_ppo``, fresh student) with 1 and 2 worker
    processes, their ratio (scaling), and the PPO update's samples/s,
  * OpenSpiel ``crazy_eights`` with 4 players and uniform-random play (the reference),
and each figure's ratio to the OpenSpiel reference.

Usage: python bench/bench_selfplay.py [--seconds 5]
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import pyspiel
import torch

from ml.game.commander.encoding import OBS_DIM, RecordEncoder
from ml.game.commander.players import HeuristicPlayer
from ml.game.commander.rules import apply_action, new_game
from ml.policy import PolicyNet
from ml.ppo import PPOConfig, train_ppo
from ml.rollout import Controller, game_seeds, play_games, rotated_seatings


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
    controllers = {"agent": Controller("net", net), "heuristic": Controller("heuristic")}
    n = 400
    seatings = rotated_seatings(n, 4, "agent", lambda g: ["heuristic"] * 3)
    started, decisions = time.perf_counter(), 0
    runner = play_games(seatings, game_seeds(0, n), controllers, pod_size=4, max_turns=30, num_envs=16, encoder=encoder,
                        generator=torch.Generator().manual_seed(0))  # fmt: skip
    for result in runner:
        decisions += result.decisions
        if time.perf_counter() - started > seconds:
            break
    runner.close()
    return decisions / (time.perf_counter() - started)


def bench_ppo(seconds: float, workers: int) -> tuple[float, float]:
    """PPO self-play with ``workers`` processes: (all-seat decisions/s while collecting, update samples/s)."""
    steps = int(1500 * seconds * workers)
    cfg = PPOConfig(total_steps=steps, num_envs=16, rollout_steps=max(steps // 2, 512), lr=3e-4, gamma=0.995, gae_lambda=0.95, clip_coef=0.2,
                    ent_coef=0.01, vf_coef=0.5, max_grad_norm=0.5, update_epochs=4, minibatch_size=512, opponent_mix={"heuristic": 1.0},
                    workers=workers, rollout_chunks=8)  # fmt: skip
    torch.manual_seed(0)
    _, m = train_ppo(PolicyNet(OBS_DIM, (256, 256)), {}, cfg, pod_size=4, max_turns=30, seed=0, progress=False)
    return m["selfplay/all_seat_decisions_per_s"], m["selfplay/update_samples_per_s"]


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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=5.0, help="time per measurement (default: %(default)s)")
    args = parser.parse_args()
    torch.set_num_threads(1)
    reference = bench_openspiel(args.seconds)
    one, update_one = bench_ppo(args.seconds, 1)
    two, _ = bench_ppo(args.seconds, 2)
    rows = [
        ("simulator, 4 heuristic players (rules API)", bench_rules(args.seconds)),
        ("env + encoder, 1 net + 3 heuristic seats, 16 games batched", bench_env(args.seconds)),
        ("PPO self-play collection, 1 worker, all seats", one),
        ("PPO self-play collection, 2 workers, all seats", two),
        ("OpenSpiel crazy_eights 4p, uniform random (reference)", reference),
    ]
    print(f"{'benchmark':62s} {'decisions/s':>12s} {'vs OpenSpiel':>12s}")
    for name, rate in rows:
        print(f"{name:62s} {rate:12,.0f} {rate / reference:11.2f}x")
    print(f"self-play scaling, 2 workers / 1 worker: {two / one:.2f}x (ideal 2.00x on 2 free cores)")
    print(f"PPO update: {update_one:,.0f} samples/s (minibatch 512, MLP 256x256, CPU, 1 thread)")


if __name__ == "__main__":
    main()
