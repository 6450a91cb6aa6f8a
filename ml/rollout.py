"""Play many pods concurrently with batched policy inference.

One ``play_games`` runner serves every stage that plays: the teacher (all heuristic
seats, every decision logged), PPO self-play (one learning seat, transitions kept), the
exporter (the agent's decisions logged) and the gate's evaluation pods. Games go through
the run's batched game where it has one (``ml.game.registry.GameSpec.batched``: the
Commander's compiled core, ``ml.game.protocol.Game``; scripted seats play inside its
``step``), else through its PettingZoo AEC env (``GameSpec.make_env``: ``OpenSpielEnv``). Both
paths give the same results, transitions and records for the same inputs
(``tests/test_rollout.py``). All network-controlled decisions pending across the concurrent
games are answered by one forward pass per network (scripted seats act at once, so the games
wait on networks only). The controller kind
``heuristic`` is the game's teacher (the commander's heuristic, MCTS for OpenSpiel games).

Seats are named by *controller*: a key into a mapping of ``Controller`` objects, e.g.
``["agent", "heuristic", "heuristic", "heuristic"]``.
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np
import torch

from ml.game.protocol import PLAYER_SEED_STRIDE, Game
from ml.game.registry import GameSpec, commander
from ml.game.spec import Encoder, ScriptedPlayer
from ml.policy import PolicyNet, check_shape

Engine = Literal["core", "objects"]
"""How ``play_games`` plays: ``core`` through the game's batched ``Game`` where it has one (else
as ``objects``), ``objects`` through the game's AEC env and scripted player objects."""

ControllerKind = Literal["heuristic", "random", "net"]
"""Who plays a seat: a scripted player (``heuristic``, ``random``) or a network (``net``)."""


@dataclass
class Controller:
    """Who plays a seat: a scripted player kind (``heuristic``/``random``) or a network.

    Attributes:
        kind: ``heuristic`` (the game's teacher), ``random`` or ``net``.
        net: the policy for ``net`` controllers.
        greedy: arg-max instead of sampling for ``net`` controllers.
    """

    kind: ControllerKind
    net: PolicyNet | None = None
    greedy: bool = False


@dataclass
class Transition:
    """One decision of a tracked seat (``float32[obs_dim]`` obs, ``bool[A]`` mask)."""

    obs: np.ndarray
    action_mask: np.ndarray
    action: int
    log_prob: float
    value: float
    reward: float = 0.0
    done: bool = False


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
        transitions: seat -> Transitions for tracked seats.
        decisions: decisions made in the game by all seats.
        ranking: seats from first place to last (``GameState.ranking``).
    """

    index: int
    game_id: str
    outcome: str
    winner: int | None
    seats: list[str]
    returns: np.ndarray
    records: list[dict] = field(default_factory=list)
    transitions: dict[int, list[Transition]] = field(default_factory=dict)
    decisions: int = 0
    ranking: list[int] = field(default_factory=list)


@dataclass
class _Slot:
    env: Any  # the game's AEC env (CommanderPodEnv, OpenSpielEnv)
    index: int
    seats: list[str]
    scripted: dict[int, ScriptedPlayer]
    returns: np.ndarray
    log_seats: frozenset[int]
    records: list[dict]
    transitions: dict[int, list[Transition]]
    decisions: int = 0


def _skip_dead_steps(env: Any, slot: _Slot) -> None:
    """Step terminated agents out (the AEC dead-step convention) and collect rewards."""
    while env.agents and (env.terminations[env.agent_selection] or env.truncations[env.agent_selection]):
        env.step(None)
        _collect_rewards(env, slot)


def _collect_rewards(env: Any, slot: _Slot) -> None:
    for agent, r in env.rewards.items():
        if r:
            seat = int(agent.split("_")[1])
            slot.returns[seat] += r
            trans = slot.transitions.get(seat)
            if trans:
                trans[-1].reward += r


def play_games(
    seatings: list[list[str]],
    game_seeds: list[int],
    controllers: dict[str, Controller],
    *,
    pod_size: int | None = None,
    max_turns: int = 30,
    num_envs: int,
    encoder: Encoder | None = None,
    generator: torch.Generator,
    log_seats: Callable[[list[str]], list[int]] | None = None,
    track_seats: Callable[[list[str]], list[int]] | None = None,
    game: GameSpec | None = None,
    budget: int | None = None,
    indices: Sequence[int] | None = None,
    engine: Engine = "core",
) -> Generator[GameResult, None, None]:
    """Play ``len(seatings)`` games, ``num_envs`` at a time, yielding each as it ends.

    Scripted seats (``heuristic``, ``random``) act at once; the games then wait on a network,
    and each network answers all the decisions waiting on it with one forward pass, so a batch
    holds up to ``num_envs`` decisions.

    Args:
        seatings: per game, the controller key of each seat (length: the game's players).
        game_seeds: per game, the simulator seed (scripted players derive theirs from it).
        controllers: controller key -> Controller.
        pod_size: players per pod of the commander (when ``game`` is None).
        max_turns: the commander's turn cap in rounds (when ``game`` is None).
        num_envs: games in flight at once (batched inference across them).
        encoder: the commander's observation encoder shared with the envs (None: a new one).
        generator: torch RNG for sampling network actions.
        log_seats: seats whose decisions are logged as records (given the seating).
        track_seats: seats whose decisions are kept as PPO transitions.
        game: the game (``ml.game.registry``); None is the commander of ``pod_size`` and ``max_turns``.
        budget: tracked-seat decisions after which no new game starts (the games in flight
            are played to their end, so no decision is wasted); None plays every seating.
        indices: play only these games of ``seatings`` (a chunk of a stage, ``ml.compute``); None: all.
        engine: ``core`` (the game's batched ``Game`` where it has one) or ``objects`` (its AEC
            env); both give the same results.

    Yields:
        GameResult, in order of completion (deterministic for fixed inputs).

    Raises:
        ValueError: neither ``game`` nor ``pod_size`` given, or a ``net`` controller without a net.
        ml.policy.CheckpointError: a network's input or output size does not fit the game.
    """
    if game is None:
        if pod_size is None:
            raise ValueError("play_games needs game= or the commander's pod_size=")
        game = commander(pod_size, max_turns)
    if encoder is None and not game.is_openspiel:
        encoder = game.encoder()
    for key, ctrl in controllers.items():
        if ctrl.kind == "net":
            if ctrl.net is None:
                raise ValueError(f"controller {key!r} is a net controller without a net")
            check_shape(ctrl.net, game.obs_dim, game.num_actions, f"the policy of {key!r}")
    pending = list(range(len(seatings)) if indices is None else indices)[::-1]
    batch = game.batched(num_envs, encoder) if engine == "core" else None
    if batch is not None:
        yield from _play_batched(batch, seatings, game_seeds, controllers, pending, generator, log_seats, track_seats, budget)
        return
    slots: list[_Slot] = []
    tracked = 0
    while pending or slots:
        if budget is not None and tracked >= budget:
            pending.clear()  # no new game; the games in flight play on
        while pending and len(slots) < num_envs:
            slots.append(_start(pending.pop(), seatings, game_seeds, controllers, game, encoder, log_seats, track_seats))
        groups: dict[str, list[_Slot]] = {}
        still: list[_Slot] = []
        for slot in slots:
            _play_scripted(slot, controllers)
            if slot.env.agents:
                still.append(slot)
                groups.setdefault(slot.seats[_seat(slot.env.agent_selection)], []).append(slot)
            else:
                yield _finish(slot)
        slots = still
        for key in sorted(groups):
            tracked += _decide(controllers[key], groups[key], generator)


def _seat(agent: str) -> int:
    """The seat of an AEC agent name ``player_<k>``."""
    return int(agent.split("_")[1])


def _start(
    index: int,
    seatings: list[list[str]],
    game_seeds: list[int],
    controllers: dict[str, Controller],
    game: GameSpec,
    encoder: Encoder | None,
    log_seats: Callable[[list[str]], list[int]] | None,
    track_seats: Callable[[list[str]], list[int]] | None,
) -> _Slot:
    env = game.make_env(encoder)
    seed = int(game_seeds[index])
    env.reset(seed=seed, options={"game_index": index})
    seats = seatings[index]
    scripted: dict[int, ScriptedPlayer] = {}
    for s, key in enumerate(seats):
        kind = controllers[key].kind
        if kind in ("heuristic", "random"):
            scripted[s] = game.make_player(kind, seed * PLAYER_SEED_STRIDE + s)
    slot = _Slot(
        env,
        index,
        seats,
        scripted,
        np.zeros(game.num_players, np.float64),
        frozenset(log_seats(seats) if log_seats else ()),
        [],
        {s: [] for s in (track_seats(seats) if track_seats else [])},
    )
    _skip_dead_steps(env, slot)
    return slot


def _play_scripted(slot: _Slot, controllers: dict[str, Controller]) -> None:
    """Play the slot's scripted seats until a network is to act or the game ends."""
    env = slot.env
    while env.agents:
        seat = _seat(env.agent_selection)
        player = slot.scripted.get(seat)
        if player is None:
            return
        _apply(slot, seat, player.act(env.state))


def _decide(ctrl: Controller, slots: list[_Slot], generator: torch.Generator) -> int:
    """Answer the network decision waiting in each slot with one forward pass; returns how
    many of them were tracked-seat decisions (PPO transitions)."""
    assert ctrl.net is not None, "play_games checked that every net controller has a net"
    seats = [_seat(s.env.agent_selection) for s in slots]
    observed = [s.env.observe(s.env.agent_selection) for s in slots]
    obs = np.stack([o["observation"] for o in observed])
    mask = np.stack([o["action_mask"] for o in observed]).astype(bool)
    actions, log_probs, values, probs = ctrl.net.act(obs, mask, generator, greedy=ctrl.greedy)
    tracked = 0
    for i, (slot, seat) in enumerate(zip(slots, seats, strict=True)):
        if seat in slot.transitions:
            slot.transitions[seat].append(Transition(obs[i], mask[i], int(actions[i]), float(log_probs[i]), float(values[i])))
            tracked += 1
        _apply(slot, seat, int(actions[i]), probs[i])
    return tracked


POLICY_DECIMALS = 6
"""Decimals of the ``policy`` probabilities written into records (``ml.record_schema.POLICY_SUM_TOLERANCE``)."""


def _apply(slot: _Slot, seat: int, action: int, probs: np.ndarray | None = None) -> None:
    """Log the decision if the seat is logged (with the network's ``probs``, float32[num_actions],
    as the record's ``policy``), step the env, collect rewards, skip dead steps."""
    env = slot.env
    if seat in slot.log_seats:
        rec = env.decision_record()
        rec["action"] = env.describe_action(action)
        if probs is not None:
            rec["policy"] = [round(float(p), POLICY_DECIMALS) for p in probs]
        slot.records.append(rec)
    env.step(action)
    slot.decisions += 1
    _collect_rewards(env, slot)
    _skip_dead_steps(env, slot)


def _finish(slot: _Slot) -> GameResult:
    for trans in slot.transitions.values():
        if trans:
            trans[-1].done = True
    game_id, result, winner, ranking = slot.env.game_result()
    return GameResult(
        slot.index, game_id, result, winner, slot.seats, slot.returns, slot.records, slot.transitions, slot.decisions, ranking
    )


@dataclass
class _Row:
    """A game in a row of a batched ``Game``."""

    row: int
    index: int
    seats: list[str]
    surfaced: bool
    returns: np.ndarray
    log_seats: frozenset[int]
    records: list[dict]
    transitions: dict[int, list[Transition]]


def _play_batched(
    batch: Game,
    seatings: list[list[str]],
    game_seeds: list[int],
    controllers: dict[str, Controller],
    pending: list[int],
    generator: torch.Generator,
    log_seats: Callable[[list[str]], list[int]] | None,
    track_seats: Callable[[list[str]], list[int]] | None,
    budget: int | None,
) -> Generator[GameResult, None, None]:
    """``play_games`` through ``batch``: the same loop as the AEC path, one batched ``step`` per
    round of network decisions. Games whose scripted seats are logged are *surfaced*: their
    scripted decisions come back one at a time so their records can be written."""
    free = list(range(batch.num_games))[::-1]
    actions = np.full(batch.num_games, -1, np.int64)
    rows: list[_Row] = []
    tracked = 0
    while pending or rows:
        if budget is not None and tracked >= budget:
            pending.clear()  # no new game; the games in flight play on
        started = False
        while pending and len(rows) < batch.num_games:
            rows.append(
                _start_row(batch, free.pop(), pending.pop(), seatings, game_seeds, controllers, log_seats, track_seats)
            )
            started = True
        if started:  # the new games' scripted seats play up to their first answered decision
            actions[:] = -1
            batch.step(actions)
            _collect_row_rewards(batch, rows)
        _play_surfaced(batch, rows, actions)
        groups: dict[str, list[_Row]] = {}
        still: list[_Row] = []
        for r in rows:
            if batch.done[r.row]:
                free.append(r.row)
                yield _finish_row(batch, r)
            else:
                still.append(r)
                groups.setdefault(r.seats[int(batch.to_act[r.row])], []).append(r)
        rows = still
        if not groups:
            continue
        actions[:] = -1
        for key in sorted(groups):
            tracked += _decide_rows(batch, controllers[key], groups[key], generator, actions)
        batch.step(actions)
        _collect_row_rewards(batch, rows)


def _start_row(
    batch: Game,
    row: int,
    index: int,
    seatings: list[list[str]],
    game_seeds: list[int],
    controllers: dict[str, Controller],
    log_seats: Callable[[list[str]], list[int]] | None,
    track_seats: Callable[[list[str]], list[int]] | None,
) -> _Row:
    seats = seatings[index]
    scripted = {s: controllers[key].kind for s, key in enumerate(seats) if controllers[key].kind in ("heuristic", "random")}
    logged = frozenset(log_seats(seats) if log_seats else ())
    surfaced = bool(logged & scripted.keys())
    batch.reset(row, int(game_seeds[index]), scripted, surfaced)
    return _Row(
        row, index, seats, surfaced, np.zeros(batch.num_players, np.float64), logged, [],
        {s: [] for s in (track_seats(seats) if track_seats else [])},
    )  # fmt: skip


def _collect_row_rewards(batch: Game, rows: list[_Row]) -> None:
    """Add the last ``step``'s rewards to each game's returns and to its seats' last transitions."""
    hit = set(np.flatnonzero(batch.rewards.any(axis=1)).tolist())  # rewards come at eliminations and game ends only
    for r in rows:
        if r.row not in hit:
            continue
        for seat, reward in enumerate(batch.rewards[r.row].tolist()):
            if reward:
                r.returns[seat] += reward
                trans = r.transitions.get(seat)
                if trans:
                    trans[-1].reward += reward


def _play_surfaced(batch: Game, rows: list[_Row], actions: np.ndarray) -> None:
    """Play the surfaced games' scripted seats (logging their records) until a network is to
    act or the game ends."""
    while True:
        waiting = [r for r in rows if r.surfaced and not batch.done[r.row] and batch.is_scripted(r.row)]
        if not waiting:
            return
        chosen = batch.scripted_actions(np.array([r.row for r in waiting], np.int64))
        actions[:] = -1
        for r, action in zip(waiting, chosen.tolist(), strict=True):
            if int(batch.to_act[r.row]) in r.log_seats:
                r.records.append(batch.record(r.row, action))
            actions[r.row] = action
        batch.step(actions)
        _collect_row_rewards(batch, waiting)


def _decide_rows(batch: Game, ctrl: Controller, rows: list[_Row], generator: torch.Generator, actions: np.ndarray) -> int:
    """``_decide`` for games in a batch: one forward pass answers ``rows``; their actions go into
    ``actions`` (applied by the caller's ``step``). Returns the tracked-seat decisions."""
    assert ctrl.net is not None, "play_games checked that every net controller has a net"
    idx = np.array([r.row for r in rows], np.int64)
    batch.observe(idx)
    obs, mask = batch.obs[idx], batch.mask[idx]
    chosen, log_probs, values, probs = ctrl.net.act(obs, mask, generator, greedy=ctrl.greedy)
    tracked = 0
    for i, r in enumerate(rows):
        seat, action = int(batch.to_act[r.row]), int(chosen[i])
        if seat in r.transitions:
            r.transitions[seat].append(Transition(obs[i], mask[i], action, float(log_probs[i]), float(values[i])))
            tracked += 1
        if seat in r.log_seats:
            rec = batch.record(r.row, action)
            rec["policy"] = [round(float(p), POLICY_DECIMALS) for p in probs[i]]
            r.records.append(rec)
        actions[r.row] = action
    return tracked


def _finish_row(batch: Game, r: _Row) -> GameResult:
    for trans in r.transitions.values():
        if trans:
            trans[-1].done = True
    game_id, result, winner, ranking = batch.result(r.row)
    return GameResult(
        r.index, game_id, result, winner, r.seats, r.returns, r.records, r.transitions, int(batch.decisions[r.row]), ranking
    )


def rotated_seatings(n_games: int, pod_size: int, agent: str, others: Callable[[int], Sequence[str]]) -> list[list[str]]:
    """Seatings with ``agent`` rotated through the seats: game g puts it in seat ``g % pod_size``.

    The one way seats are rotated (self-play, export, gate deals, rating tournaments): over any
    ``pod_size`` consecutive games the agent sits in every seat once, so no seat's advantage
    (the first turn) favours or hurts it.

    Args:
        n_games: games.
        pod_size: players per pod.
        agent: controller key of the agent.
        others: ``game -> controller keys`` of the other ``pod_size - 1`` seats, in seat order;
            called once per game, in game order (so a caller's RNG draws happen in that order).

    Raises:
        ValueError: ``others`` gave another number of seats.
    """
    out = []
    for g in range(n_games):
        seats = list(others(g))
        if len(seats) != pod_size - 1:
            raise ValueError(f"game {g}: {len(seats)} other seats in a pod of {pod_size}")
        seats.insert(g % pod_size, agent)
        out.append(seats)
    return out


def game_seeds(seed: int, n_games: int) -> list[int]:
    """``n_games`` distinct simulator seeds drawn from ``seed`` (numpy Generator)."""
    rng = np.random.default_rng(seed)
    return [int(x) for x in rng.choice(2**31 - 1, size=n_games, replace=False)]
