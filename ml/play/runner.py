"""Play many pods concurrently with batched policy inference.

One ``play_games`` runner serves every stage that plays: the teacher (all heuristic
seats, every decision logged), PPO self-play (one learning seat, transitions kept), the
exporter (the agent's decisions logged) and the gate's evaluation pods. Every game plays
through the typed batched ``ml.game.protocol.Game`` of its ``GameSpec.batched``: the
Commander's compiled core (scripted seats play inside its ``step``), or rows of AEC envs
(``ml.game.env_game.EnvGame``: OpenSpiel states, PettingZoo envs). The tests play the same
games through the Commander's object engine (``ml.game.commander.reference``) and check the
results, transitions and records against the core's (``tests/test_runner.py``).
All network-controlled decisions pending across the concurrent
games are answered by one forward pass per network, or per ``PolicyBank`` for the networks
banked together (self-play's league), and scripted seats act at once, so the games wait on
networks only. The controller kind
``teacher`` is the game's teacher (the commander's heuristic, MCTS for OpenSpiel games).

Seats are named by *controller*: a key into a mapping of ``Controller`` objects, e.g.
``["agent", "teacher", "teacher", "teacher"]``.

The tracked seats' decisions (PPO transitions) are arrays from where they are taken to the
update (``ml.play.buffer``): no Python object per decision.
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
import torch

from ml.base.io import JSONObject
from ml.game.protocol import Game, GameSpec
from ml.game.record import POLICY_DECIMALS
from ml.game.spec import Encoder
from ml.model.policy import check_shape, sample
from ml.play.buffer import Rollout, Tracker
from ml.play.controller import Controller, check_banks
from ml.runtime.executor import LOCAL, Executor

SeatPicker = Callable[[list[str]], list[int]]
"""``seating -> seats``: picks seats of a game from its seating (controller key per seat)."""


@dataclass(frozen=True)
class Pods:
    """The games of a ``play_games`` run.

    Attributes:
        seatings: per game, the controller key of each seat (length: the game's players).
        seeds: per game, the simulator seed (scripted players derive theirs from it).
        indices: play only these games (a chunk of a stage, ``ml.runtime.compute``); None: all.
    """

    seatings: Sequence[list[str]]
    seeds: Sequence[int]
    indices: Sequence[int] | None = None


@dataclass(frozen=True)
class Keep:
    """What ``play_games`` keeps of each game besides its result.

    Attributes:
        log_seats: seats whose decisions are logged as records (given the seating); None: none.
        track_seats: seats whose decisions are kept as PPO transitions; None: none.
        budget: tracked-seat decisions after which no new game starts (the games in flight
            are played to their end, so no decision is wasted); None plays every game.
    """

    log_seats: SeatPicker | None = None
    track_seats: SeatPicker | None = None
    budget: int | None = None


@dataclass(frozen=True)
class StagePlay:
    """How a stage plays its games, beside its params section and its game.

    Attributes:
        seed: seeds the game seeds and the players (a stage's ``Params.stage_seed``).
        progress: show a progress bar.
        executor: where the chunks are played (``ml.runtime.compute.open_executor``; the result is the same).
        chunk_games: games per chunk (``compute.chunk_games``; 0: the stage's default).
    """

    seed: int
    progress: bool = False
    executor: Executor = LOCAL
    chunk_games: int = 0


@dataclass
class GameResult:
    """A finished game.

    Attributes:
        index: game index within the run.
        game_id: the simulator's game id.
        outcome: ``win_seat_<k>`` or ``draw``.
        winner: winning seat or None.
        seats: controller key per seat.
        returns: float[pod_size] each seat's return (sum of its rewards).
        records: decision records (dicts, action filled in) of the logged seats, in
            decision order.
        transitions: seat -> the tracked seat's decisions (one episode, ``Rollout``).
        decisions: decisions made in the game by all seats.
        ranking: seats from first place to last (``GameState.ranking``).
    """

    index: int
    game_id: str
    outcome: str
    winner: int | None
    seats: list[str]
    returns: np.ndarray
    records: list[JSONObject] = field(default_factory=list)
    transitions: dict[int, Rollout] = field(default_factory=dict)
    decisions: int = 0
    ranking: list[int] = field(default_factory=list)


def play_games(
    pods: Pods,
    controllers: Mapping[str, Controller],
    *,
    game: GameSpec,
    num_envs: int,
    generator: torch.Generator,
    encoder: Encoder | None = None,
    keep: Keep = Keep(),
) -> Generator[GameResult, None, None]:
    """Play the games of ``pods``, ``num_envs`` at a time, yielding each as it ends.

    Scripted seats (``teacher``, ``random``) act at once; the games then wait on a network,
    and each network answers all the decisions waiting on it with one forward pass, so a batch
    holds up to ``num_envs`` decisions.

    Args:
        pods: the seatings and simulator seeds of the games, and which of them to play.
        controllers: controller key -> Controller.
        game: the game (``ml.game.protocol.GameSpec``): its ``num_players`` seats per game,
            the commander's ``max_turns`` cap.
        num_envs: games in flight at once (batched inference across them).
        generator: torch RNG for sampling network actions.
        encoder: the observation encoder of a game whose envs encode records (``GameSpec.batched``); None: the game's own.
        keep: the records, transitions and decision budget to keep (none by default).

    Yields:
        GameResult, in order of completion (deterministic for fixed inputs).

    Raises:
        ValueError: a ``net`` controller without a net; an ``encoder`` the game cannot play with (``GameSpec.batched``).
        ml.model.policy.CheckpointError: a network's input or output size does not fit the game.
    """
    for key, ctrl in controllers.items():
        if ctrl.kind == "net":
            if ctrl.net is None:
                raise ValueError(f"controller {key!r} is a net controller without a net")
            check_shape(ctrl.net, game.obs_dim, game.num_actions, f"the policy of {key!r}")
    check_banks(controllers)
    pending = list(range(len(pods.seatings)) if pods.indices is None else pods.indices)[::-1]
    yield from _play(game.batched(num_envs, encoder), pods, controllers, pending, generator, keep)


@dataclass
class _Row:
    """A game in a row of a batched ``Game`` (per game, not per decision)."""

    row: int
    index: int
    seats: list[str]
    surfaced: bool
    log_seats: frozenset[int]
    records: list[JSONObject]


@dataclass
class _Seats:
    """Per row of the batch (``[rows, seats]`` arrays): whose decisions are tracked and logged,
    the start number of the row's game (-1 for a free row), its game, and the tracked decisions."""

    tracked: np.ndarray
    logged: np.ndarray
    started_as: np.ndarray
    by_row: list[_Row | None]
    tracker: Tracker


def _play(
    batch: Game,
    pods: Pods,
    controllers: Mapping[str, Controller],
    pending: list[int],
    generator: torch.Generator,
    keep: Keep,
) -> Generator[GameResult, None, None]:
    """``play_games`` through ``batch``: one batched ``step`` per round of network decisions; per
    decision, only array operations (a record, where one is written, is the exception). Games
    whose scripted seats are logged are *surfaced*: their scripted decisions come back one at a
    time so their records can be written. The games in flight are answered in the order they
    started (a forward pass's rows, and so its sampled actions, in that order).
    """
    n_rows, n_seats = batch.num_games, batch.num_players
    keys = sorted(controllers)  # controller ids in name order: the order the groups are answered in
    net_ids = [i for i, k in enumerate(keys) if controllers[k].kind == "net"]
    ctrl = np.full((n_rows, n_seats), -1, np.int64)  # controller id of each seat of each row
    tracked = np.zeros((n_rows, n_seats), bool)
    logged = np.zeros((n_rows, n_seats), bool)
    returns = np.zeros((n_rows, n_seats), np.float64)
    started_as = np.full(n_rows, -1, np.int64)  # the start number of the row's game, -1 for a free row
    tracker = Tracker(n_rows, n_seats, batch.obs_dim, batch.num_actions)
    free = list(range(n_rows))[::-1]
    actions = np.full(n_rows, -1, np.int64)
    rows: list[_Row] = []  # in start order
    by_row: list[_Row | None] = [None] * n_rows
    seats_of = _Seats(tracked, logged, started_as, by_row, tracker)
    seatings, budget, track_seats = pods.seatings, keep.budget, keep.track_seats
    surfaced_rows = 0
    n_tracked = started_total = 0
    while pending or rows:
        if budget is not None and n_tracked >= budget:
            pending.clear()  # no new game; the games in flight play on
        started = False
        while pending and len(rows) < n_rows:
            r = _start_row(batch, free.pop(), pending.pop(), pods, controllers, keep.log_seats)
            seats = seatings[r.index]
            ctrl[r.row] = [keys.index(k) for k in seats]
            tracked[r.row] = False
            tracked[r.row, list(track_seats(seats) if track_seats else [])] = True
            logged[r.row] = False
            logged[r.row, list(r.log_seats)] = True
            returns[r.row] = 0.0
            started_as[r.row] = started_total
            started_total += 1
            surfaced_rows += r.surfaced
            rows.append(r)
            by_row[r.row] = r
            started = True
        if started:  # the new games' scripted seats play up to their first answered decision
            actions[:] = -1
            batch.step(actions)
            _collect_rewards_rows(batch, np.asarray([r.row for r in rows], np.int64), returns, tracker)
        if surfaced_rows:
            _play_surfaced(batch, rows, actions, returns, tracker)
        in_play = np.asarray([r.row for r in rows], np.int64)
        over = batch.done[in_play]
        if over.any():
            for i in np.flatnonzero(over).tolist():
                r = rows[i]
                free.append(r.row)
                surfaced_rows -= r.surfaced
                yield _finish_row(batch, r, returns, tracker, started_as, np.flatnonzero(tracked[r.row]).tolist())
                started_as[r.row] = -1
            rows = [r for r, o in zip(rows, over.tolist(), strict=True) if not o]
            in_play = in_play[~over]
        if len(in_play) == 0:
            continue
        waiting = ctrl[in_play, batch.to_act[in_play].astype(np.int64)]
        actions[:] = -1
        groups: dict[object, list[tuple[Controller, np.ndarray]]] = {}  # a bank's controllers: one group
        for c in net_ids:
            group = in_play[waiting == c]
            if len(group):
                who = controllers[keys[c]]
                groups.setdefault(("net", c) if who.bank is None else ("bank", id(who.bank)), []).append((who, group))
        if groups:
            batch.observe(in_play[np.isin(waiting, net_ids)])
        for members in groups.values():
            who, group = members[0]
            passed = None
            if who.bank is not None:
                group = np.concatenate([g for _, g in members])
                member = np.concatenate([np.full(len(g), m.member, np.int64) for m, g in members])
                passed = who.bank.forward(batch.obs[group], batch.mask[group], member)
            n_tracked += _decide_rows(batch, who, group, generator, actions, seats_of, passed)
        batch.step(actions)
        _collect_rewards_rows(batch, in_play, returns, tracker)


def _start_row(
    batch: Game, row: int, index: int, pods: Pods, controllers: Mapping[str, Controller], log_seats: SeatPicker | None
) -> _Row:
    seats = pods.seatings[index]
    scripted = {s: controllers[key].kind for s, key in enumerate(seats) if controllers[key].kind in ("teacher", "random")}
    logged = frozenset(log_seats(seats) if log_seats else ())
    surfaced = bool(logged & scripted.keys())
    batch.reset(row, int(pods.seeds[index]), scripted, surfaced, index=index)
    return _Row(row, index, seats, surfaced, logged, [])


def _collect_rewards_rows(batch: Game, rows: np.ndarray, returns: np.ndarray, tracker: Tracker) -> None:
    """Add the last ``step``'s rewards of ``rows`` (int64[k]) to the games' returns and to their
    seats' last tracked decisions (rewards come at eliminations and game ends only)."""
    hit = rows[batch.rewards[rows].any(axis=1)]
    if len(hit):
        got = batch.rewards[hit]
        returns[hit] += got
        tracker.reward_last(hit, got)


def _play_surfaced(batch: Game, rows: list[_Row], actions: np.ndarray, returns: np.ndarray, tracker: Tracker) -> None:
    """Play the surfaced games' scripted seats (logging their records) until a network is to
    act or the game ends."""
    while True:
        waiting = [r for r in rows if r.surfaced and not batch.done[r.row] and batch.is_scripted(r.row)]
        if not waiting:
            return
        at = np.array([r.row for r in waiting], np.int64)
        chosen = batch.scripted_actions(at)
        actions[:] = -1
        for r, action in zip(waiting, chosen.tolist(), strict=True):
            if int(batch.to_act[r.row]) in r.log_seats:
                r.records.append(batch.record(r.row, action))
            actions[r.row] = action
        batch.step(actions)
        _collect_rewards_rows(batch, at, returns, tracker)


def _decide_rows(
    batch: Game,
    ctrl: Controller,
    group: np.ndarray,
    generator: torch.Generator,
    actions: np.ndarray,
    seats_of: _Seats,
    passed: tuple[torch.Tensor, torch.Tensor] | None = None,
) -> int:
    """``_decide`` for the games in ``group`` (int64[k] rows, in start order, observed): one forward
    pass, or ``passed`` (their logits and values from a bank's pass); their actions go into
    ``actions`` (applied by the caller's ``step``). Returns the tracked-seat decisions."""
    assert ctrl.net is not None, "play_games checked that every net controller has a net"
    obs, mask = batch.obs[group], batch.mask[group]
    if passed is None:
        chosen, log_probs, values, probs = ctrl.net.act(obs, mask, generator, greedy=ctrl.greedy)
    else:
        chosen, log_probs, values, probs = sample(*passed, generator, greedy=ctrl.greedy)
    seats = batch.to_act[group].astype(np.int64)
    kept = seats_of.tracked[group, seats]
    n_kept = int(kept.sum())
    if ctrl.explore > 0:
        if n_kept:
            raise ValueError("an exploring controller plays a tracked seat: its log-probabilities would not be the moves'")
        chosen = _explore(chosen, mask, ctrl.explore, generator)
    if n_kept:
        at, s = group[kept], seats[kept]
        seats_of.tracker.add(
            seats_of.started_as[at], at, s, obs[kept], mask[kept], (chosen[kept], log_probs[kept], values[kept])
        )
    for i in np.flatnonzero(seats_of.logged[group, seats]).tolist():
        row = int(group[i])
        rec = batch.record(row, int(chosen[i]))
        target = batch.teacher_policy(row) if ctrl.targets == "teacher" else probs[i]
        rec["policy"] = [round(float(p), POLICY_DECIMALS) for p in target]
        owner = seats_of.by_row[row]
        assert owner is not None, "a row in play has its game"
        owner.records.append(rec)
    actions[group] = chosen
    return n_kept


def _explore(chosen: np.ndarray, mask: np.ndarray, share: float, generator: torch.Generator) -> np.ndarray:
    """``chosen`` (int64[B]) with each move replaced, with probability ``share``, by a uniform legal one
    (``mask``: bool[B, A]); both draws come from ``generator`` (uniform: the arg-max of ``mask / Exp(1)``)."""
    b = len(chosen)
    swap = torch.rand(b, generator=generator).numpy() < share
    q = torch.empty(mask.shape, dtype=torch.float64).exponential_(1, generator=generator).numpy()
    uniform = np.argmax(np.where(mask, 1.0 / q, -1.0), axis=1)
    return np.where(swap, uniform, chosen)


def _finish_row(
    batch: Game, r: _Row, returns: np.ndarray, tracker: Tracker, started_as: np.ndarray, tracked_seats: list[int]
) -> GameResult:
    game_id, result, winner, ranking = batch.result(r.row)
    episodes = tracker.take(int(started_as[r.row]), r.row, tracked_seats)
    return GameResult(r.index, game_id, result, winner, r.seats, returns[r.row].copy(), r.records, episodes,
                      int(batch.decisions[r.row]), ranking)  # fmt: skip
