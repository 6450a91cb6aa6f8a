"""The batched Commander core's rows of ``bench/bench_selfplay.py``: rules-only, as an env, as self-play plays it.

Each row plays ``CORE_GAMES`` games of the core (``ml.game.commander.core``, numba) with four
heuristic seats, in decisions per second on one core (dealing included): rules only (scripted seats
play inside ``step``); as an env (an observation and a legal mask written for every decision, the
heuristic's choice fed back; no forward pass); as self-play plays it (one external seat whose every
decision gets an observation and a mask, three heuristic seats inside ``step``), with and without
its ``encode`` call (the row's ceiling); and numba's compile time of the core. ``bench_selfplay.py``
prints them beside the PPO rows and the OpenSpiel reference (``--core-only``: these alone).
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time

import numpy as np

from ml.game.commander import core
from ml.game.commander.actions import MAX_POD
from ml.game.commander.encoding import OBS_DIM

CORE_GAMES = 256
"""Games in flight in the core rows."""


def _core_reset(st: core.CoreState, tables: core.CoreTables, batch: int, kind: int) -> None:
    n = st.seed.shape[0]
    seeds = np.arange(batch * n, (batch + 1) * n, dtype=np.int64)
    kinds = np.full((n, MAX_POD), kind, np.int8)
    core.reset(st, tables, seeds, 4, 30, seat_kind=kinds, player_seeds=seeds[:, None] * 4 + np.arange(MAX_POD))


def bench_core_rules(seconds: float) -> float:
    """Core, 4 heuristic seats playing inside ``step``: decisions/s (dealing included)."""
    tables, st = core.load_tables(), core.new_state(CORE_GAMES)
    actions, rewards = np.full(CORE_GAMES, -1), np.zeros((CORE_GAMES, MAX_POD), np.float32)
    decisions, started, batch = 0, time.perf_counter(), 0
    while time.perf_counter() - started < seconds:
        _core_reset(st, tables, batch, core.SEAT_HEURISTIC)
        decisions += core.step(st, tables, actions, rewards)
        batch += 1
    return decisions / (time.perf_counter() - started)


def bench_core_env(seconds: float) -> tuple[float, float]:
    """Core as an env: per decision step, obs + mask of every game to act, then the heuristic's choice
    applied; a finished game is dealt again at once (the games in flight stay CORE_GAMES).

    Returns (decisions/s, nanoseconds of ``core.encode`` per observation)."""
    tables, st = core.load_tables(), core.new_state(CORE_GAMES)
    obs = np.zeros((CORE_GAMES, OBS_DIM), np.float32)
    mask = np.zeros((CORE_GAMES, core.kernels.NUM_ACTIONS), bool)
    actions, rewards = np.zeros(CORE_GAMES, np.int64), np.zeros((CORE_GAMES, MAX_POD), np.float32)
    kinds = np.full((CORE_GAMES, MAX_POD), core.SEAT_HEURISTIC, np.int8)
    _core_reset(st, tables, 0, core.SEAT_HEURISTIC)
    decisions, started, dealt, encoding = 0, time.perf_counter(), CORE_GAMES, 0.0
    while time.perf_counter() - started < seconds:
        seats = st.active.astype(np.int64)
        t = time.perf_counter()
        core.encode(st, tables, seats, obs)
        encoding += time.perf_counter() - t
        np.copyto(mask, st.legal)
        core.choose_scripted(st, tables, actions)
        core.apply_actions(st, tables, actions, rewards)
        decisions += CORE_GAMES
        if st.done.any():
            seeds = np.arange(dealt, dealt + CORE_GAMES, dtype=np.int64)
            core.reset(
                st, tables, seeds, 4, 30, seat_kind=kinds, player_seeds=seeds[:, None] * 4 + np.arange(MAX_POD), games=st.done
            )
            dealt += CORE_GAMES
    return decisions / (time.perf_counter() - started), encoding / decisions * 1e9


def bench_core_pods(seconds: float, observe: bool = True) -> tuple[float, float]:
    """Core as self-play plays it, no forward pass: one external seat (rotated, game ``g`` puts it in
    seat ``g % 4``) and three heuristic seats playing inside ``step``; at every external decision an
    observation and a legal mask are written and the heuristic's choice (drawn from that seat's own
    generator) is fed back as the external action. Finished games are dealt again at once.

    ``observe=False`` leaves out the ``encode`` call only (the same games, decisions and masks): the
    row's ceiling, what it would reach with an encoder that cost nothing.

    Returns (decisions/s of all seats, share of the decisions that were external)."""
    n = CORE_GAMES
    tables, st = core.load_tables(), core.new_state(n)
    obs = np.zeros((n, OBS_DIM), np.float32)
    mask = np.zeros((n, core.kernels.NUM_ACTIONS), bool)
    actions, rewards = np.full(n, -1, np.int64), np.zeros((n, MAX_POD), np.float32)
    seats, games = np.zeros(n, np.int64), np.arange(n)
    kinds = np.full((n, MAX_POD), core.SEAT_HEURISTIC, np.int8)  # every seat's generator seeded at the deal

    def deal(seeds: np.ndarray, which: np.ndarray) -> None:
        core.reset(
            st, tables, seeds, 4, 30, seat_kind=kinds, player_seeds=seeds[:, None] * 4 + np.arange(MAX_POD), games=which
        )
        external[which] = seeds[which] % 4
        st.seat_kind[games[which], external[which]] = core.SEAT_EXTERNAL

    external = np.zeros(n, np.int64)
    deal(np.arange(n, dtype=np.int64), np.ones(n, bool))
    actions[:] = -1
    decisions, observed, started, dealt = core.step(st, tables, actions, rewards), 0, time.perf_counter(), n
    while time.perf_counter() - started < seconds:
        np.copyto(seats, st.active)
        seats[st.done] = -1  # every game in play waits on its external seat
        if observe:
            core.encode(st, tables, seats, obs)
        np.copyto(mask, st.legal)
        st.seat_kind[games, external] = core.SEAT_HEURISTIC  # the heuristic answers for the network
        core.choose_scripted(st, tables, actions)  # -1 in the games over
        st.seat_kind[games, external] = core.SEAT_EXTERNAL
        observed += int((seats >= 0).sum())
        decisions += core.step(st, tables, actions, rewards)
        if st.done.any():
            deal(np.arange(dealt, dealt + n, dtype=np.int64), st.done.copy())
            dealt += n
            actions[:] = -1  # the new games' scripted seats play to their first external decision
            decisions += core.step(st, tables, actions, rewards)
    return decisions / (time.perf_counter() - started), observed / decisions


_WARM_UP = "import time; t = time.perf_counter(); from ml.game.commander.core.warmup import run_kernels; run_kernels(); print(time.perf_counter() - t)"
_ONE_PROCESS = (
    "import time; t = time.perf_counter(); from ml.game.commander.core import warmup; warmup.compile_rules_side(); "
    "warmup.compile_observation_side(); print(time.perf_counter() - t)"
)  # the same kernels compiled in one process, one after the other (the reference of the two-process compile)


def bench_core_compile() -> tuple[float, float, float]:
    """Seconds to import and warm the core in a fresh process: with an empty numba cache in one process (the
    kernels one after the other), with an empty cache as a stage does it (``run_kernels``: two processes),
    then from that cache."""
    times = []
    with tempfile.TemporaryDirectory() as one, tempfile.TemporaryDirectory() as two:
        for code, cache in ((_ONE_PROCESS, one), (_WARM_UP, two), (_WARM_UP, two)):
            env = {**os.environ, "NUMBA_CACHE_DIR": cache, "PYTHONPATH": os.getcwd()}
            out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
            times.append(float(out.stdout.split()[-1]))
    return times[0], times[1], times[2]


def encode_budget_ns(rules: float, bare: float, external_share: float, target: float = 0.8) -> float:
    """Nanoseconds an observation may cost for the pods row to reach ``target`` x the rules-only row.

    ``rules`` and ``bare`` are decisions/s of rules-only and of the pods row without the encode call;
    an observation is written for ``external_share`` of the decisions. Per decision the pods row may
    take ``1 / (target * rules)`` seconds; without the encoder it takes ``1 / bare``; the difference
    is the encoder's, spread over the observed decisions. Negative: out of reach at any encoder cost.
    """
    return (1.0 / (target * rules) - 1.0 / bare) / external_share * 1e9


def core_ratios(rules: float, every: float, pods: float, bare: float, external_share: float, encode_ns: float) -> None:
    print(f"core env + encoder / core rules-only: {every:.0f} / {rules:.0f} = {every / rules:.2f}x (every decision observed)")
    print(
        f"core env + encoder, 1 external + 3 heuristic seats / core rules-only: {pods / rules:.2f}x "
        f"({external_share:.0%} of the decisions observed: the self-play pods' network seat); "
        f"without the encode call {bare / rules:.2f}x"
    )
    budget = encode_budget_ns(rules, bare, external_share)
    allows = (
        f"allows {budget:,.0f} ns"
        if budget >= 0
        else f"is out of reach at any encoder cost (without the encode call the row reaches {bare / rules:.2f}x)"
    )
    print(f"core encode in the env loop: {encode_ns:,.0f} ns an observation; the pods row at 0.80x rules-only {allows}")
