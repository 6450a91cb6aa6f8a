"""Self-play collection across worker processes, with batched inference inside each.

A PPO round collects ``rollout_steps`` learner decisions of *finished* games. The round is
cut into ``chunks`` fixed pieces, each with its own seed and quota, played by a pool of
``workers`` processes (one per core by default); each chunk runs ``num_envs`` games at once
and answers all their network decisions with one forward pass per network. The chunks'
results are concatenated in chunk order, so the outcome depends on the seeds and the
chunk count, never on the number of workers or on timing: 1 and 2 workers give the same
episodes, bit for bit.

Workers get the policy weights each round (a CPU ``state_dict``, a few hundred kB) and the
frozen opponents once, at start-up. The pool uses the ``fork`` start method where the
platform has it (Linux), else ``spawn``. With a Ray executor (``ml.runtime.compute``, ``compute.backend:
ray``) the chunks are Ray tasks instead: the set-up goes to the object store once per stage,
the weights once per round, and the results are the same bits as here.
"""

from __future__ import annotations

import bisect
import multiprocessing as mp
import os
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from ml.config.sections import OPPONENT_KINDS
from ml.game.protocol import GameSpec
from ml.model.policy import PolicyBank, PolicyNet
from ml.play.buffer import Rollout
from ml.play.controller import Controller
from ml.play.league import Tally, learner_points
from ml.play.runner import Keep, Pods, play_games
from ml.play.seating import game_seeds, rotated_seatings
from ml.runtime.executor import Executor


@dataclass(frozen=True)
class CollectSettings:
    """What every chunk of every round plays.

    Attributes:
        game: the game; its ``num_players`` seat each pod, its ``min_learner_decisions``
            (a lower bound of the learner's decisions per game) sizes the list of games a
            chunk may play (a chunk stops as soon as its quota is met).
        num_envs: games in flight at once in a chunk (batched inference across them).
        opponent_mix: opponent kind -> weight for the seats other than the learner's
            (``teacher``, ``random``, ``self``, ``frozen``: one of the frozen agents, uniformly,
            ``student``: the frozen policy named :data:`STUDENT`, PPO's starting student,
            ``league``: one of ``league`` by the round's PFSP probabilities, ``ml.play.league``).
        league: the league's members, keys of the frozen policies, in the order of
            ``ChunkTask.league_probs``.
    """

    game: GameSpec
    num_envs: int
    opponent_mix: Mapping[str, float]
    league: tuple[str, ...] = ()


StateDict = dict[str, torch.Tensor]
"""A policy's weights (``PolicyNet.state_dict()``, CPU tensors)."""


@dataclass(frozen=True)
class WorkerSetup:
    """What a worker process (or Ray worker) builds its nets from, once per stage (picklable).

    Attributes:
        obs_dim, hidden_sizes, num_actions: the learner's architecture (``PolicyNet``).
        frozen: name -> weights of each frozen opponent (same architecture).
        settings: what every chunk plays.
    """

    obs_dim: int
    hidden_sizes: tuple[int, ...]
    num_actions: int
    frozen: Mapping[str, StateDict]
    settings: CollectSettings


@dataclass(frozen=True)
class ChunkTask:
    """One chunk of a round: start games until the learner has made ``quota`` decisions, then
    finish the games in flight (a chunk returns at least ``quota`` decisions, none wasted).
    ``league_probs``: the round's draw probability of each ``CollectSettings.league`` member."""

    seed: int
    quota: int
    league_probs: tuple[float, ...] = ()


@dataclass
class ChunkResult:
    """Finished learner episodes of a chunk and its counts.

    Attributes:
        rollout: the learner's decisions, episode after episode, in the order the games ended.
        games: episodes (games in which the learner decided at least once).
        wins: of those, the games the learner won.
        all_decisions: decisions of every seat in the chunk's games.
        tally: per opponent controller key, the seats it held and the learner's points against it.
    """

    rollout: Rollout
    games: int
    wins: int
    all_decisions: int
    tally: Tally = field(default_factory=Tally)


_WORKER: dict[str, Any] = {}


STUDENT = "student"
"""The opponent kind, and the key among the frozen opponents, of PPO's starting student (``ml.learn.ppo.train_ppo``).
Accepted generations' students in the league are keyed ``student:<name>``; neither is a ``frozen`` draw."""


def is_frozen_agent(key: str) -> bool:
    """Whether the frozen opponent ``key`` is a draw of kind ``frozen`` (any key but the students')."""
    return key.split(":", 1)[0] != STUDENT


def _init(setup: WorkerSetup) -> None:
    """Per-process set-up: nets for the learner and the frozen opponents, and the frozen opponents' ``PolicyBank``
    when there are two or more (one forward pass of the learner's to warm torch)."""
    torch.set_num_threads(1)
    settings = setup.settings
    _WORKER["net"] = PolicyNet(setup.obs_dim, setup.hidden_sizes, setup.num_actions)
    nets = {}
    for name, state in setup.frozen.items():
        nets[name] = PolicyNet(setup.obs_dim, setup.hidden_sizes, setup.num_actions)
        nets[name].load_state_dict(state)
        nets[name].eval()
    _WORKER["frozen"] = nets
    _WORKER["bank"] = PolicyBank(list(nets.values())) if len(nets) > 1 else None  # their decisions: one pass a round
    with torch.no_grad():  # torch's first-call set-up (tens of ms) here, not in the first chunk; draws nothing
        _WORKER["net"](torch.zeros(1, setup.obs_dim), torch.ones(1, setup.num_actions, dtype=torch.bool))
    _WORKER["settings"] = settings


def _opponent_picker(
    mix: Mapping[str, float],
    frozen: list[str],
    rng: np.random.Generator,
    league: tuple[str, ...] = (),
    league_probs: tuple[float, ...] = (),
) -> Callable[[], str]:
    """``pick() -> controller key`` of one opponent seat: a kind of ``mix`` drawn by weight (then,
    for ``frozen``, one of ``frozen`` uniformly; for ``league``, one of ``league`` by ``league_probs``);
    the kinds' weights in ``OPPONENT_KINDS`` order.

    Draws what ``rng.choice(len(kinds), p=weights / weights.sum())`` draws, one ``rng.random()``
    against the normalised cumulative weights (numpy's own method for ``p``), without its
    per-call checks of ``p`` (13 us of 14 per call, measured); ``tests/test_collect.py`` holds the
    two equal. A ``league`` draw takes one more ``rng.random()`` the same way.
    """
    kinds = [k for k in OPPONENT_KINDS if mix.get(k, 0) > 0 and (k != "frozen" or frozen) and (k != "league" or league)]
    bounds = _cdf([mix[k] for k in kinds])
    member_bounds = _cdf(list(league_probs)) if league else []

    def pick() -> str:
        kind = kinds[bisect.bisect_right(bounds, rng.random())]
        if kind == "frozen":
            return frozen[rng.integers(len(frozen))]
        if kind == "league":
            return league[bisect.bisect_right(member_bounds, rng.random())]
        return kind

    return pick


def _cdf(weights: list[float]) -> list[float]:
    """The normalised cumulative weights, the last exactly 1 (numpy's ``choice`` with ``p``)."""
    w = np.asarray(weights, np.float64)
    cdf = (w / w.sum()).cumsum()
    cdf /= cdf[-1]
    return cdf.tolist()  # type: ignore[no-any-return]


def _play_chunk(state_dict: StateDict, task: ChunkTask) -> ChunkResult:
    """Play one chunk in this process (a worker, or the learner when there is no pool)."""
    s: CollectSettings = _WORKER["settings"]
    net: PolicyNet = _WORKER["net"]
    net.load_state_dict(state_dict)
    net.eval()
    controllers = {
        "agent": Controller("net", net),
        "self": Controller("net", net),
        "teacher": Controller("teacher"),
        "random": Controller("random"),
    }
    bank = _WORKER["bank"]
    controllers.update(
        {name: Controller("net", f, bank=bank, member=i) for i, (name, f) in enumerate(_WORKER["frozen"].items())}
    )
    rng = np.random.default_rng(task.seed)
    frozen = sorted(k for k in _WORKER["frozen"] if is_frozen_agent(k))
    pick = _opponent_picker(s.opponent_mix, frozen, rng, s.league, task.league_probs)
    pod = s.game.num_players
    n_games = s.num_envs + task.quota // s.game.min_learner_decisions
    seatings = rotated_seatings(n_games, pod, "agent", lambda g: [pick() for _ in range(pod - 1)])
    runner = play_games(
        Pods(seatings, game_seeds(task.seed, n_games)), controllers, num_envs=s.num_envs,
        generator=torch.Generator().manual_seed(task.seed), game=s.game,
        keep=Keep(track_seats=lambda seats: [seats.index("agent")], budget=task.quota),
    )  # fmt: skip
    episodes, games, wins, all_decisions, tally = [], 0, 0, 0, Tally()
    for result in runner:  # no game starts once the quota is met; the games in flight finish and count
        seat = result.seats.index("agent")
        all_decisions += result.decisions
        episode = result.transitions[seat]
        if len(episode) == 0:
            continue
        episodes.append(episode)
        games += 1
        wins += int(result.winner == seat)
        for other, key in enumerate(result.seats):
            if other != seat:
                tally.add(key, learner_points(seat, other, result.ranking, result.returns, result.winner))
    rollout = Rollout.concat(episodes, s.game.obs_dim, s.game.num_actions)
    return ChunkResult(rollout, games, wins, all_decisions, tally)


def _started(_: int) -> int:
    """A task that only makes a pool start its processes (``Collector``); returns the worker's pid."""
    return os.getpid()


def _cluster_chunk(task: ChunkTask, setup: WorkerSetup, state_dict: StateDict) -> ChunkResult:
    """A chunk as a Ray task: the worker sets itself up once per stage (``setup`` is cached by ``ml.runtime.compute``)."""
    if _WORKER.get("setup") is not setup:
        _init(setup)
        _WORKER["setup"] = setup
    return _play_chunk(state_dict, task)


class Collector:
    """Collects rounds of self-play, in worker processes when ``workers > 1``.

    Args:
        net: the learner (its architecture is copied into the workers).
        frozen: name -> frozen opponent policy.
        settings: the game and what each chunk plays.
        workers: processes (0: one per core).
        chunks: pieces per round (fixes the result whatever ``workers`` is).
        executor: a Ray executor (``ml.runtime.compute``) plays the chunks on its cluster instead of
            ``workers`` local processes (``workers`` is then unused); None or ``local``: here.
    """

    def __init__(
        self,
        net: PolicyNet,
        frozen: Mapping[str, PolicyNet],
        settings: CollectSettings,
        workers: int,
        chunks: int,
        executor: Executor | None = None,
    ) -> None:
        self.chunks = chunks
        self.workers = min(workers or os.cpu_count() or 1, chunks)
        setup = WorkerSetup(
            net.obs_dim, net.hidden_sizes, net.num_actions, {k: v.state_dict() for k, v in frozen.items()}, settings
        )
        self.pool: ProcessPoolExecutor | None = None
        self.executor = executor if executor is not None and executor.backend != "local" else None
        if self.executor is not None:
            self.workers = min(self.executor.slots, chunks)
            self.setup = self.executor.share(setup)  # frozen opponents: once per stage
        elif self.workers > 1:
            settings.game.warm_up()  # compiled (or loaded from numba's cache) once, here: forked workers inherit it
            method = "fork" if "fork" in mp.get_all_start_methods() else "spawn"
            self.pool = ProcessPoolExecutor(
                self.workers, mp_context=mp.get_context(method), initializer=_init, initargs=(setup,)
            )
            list(self.pool.map(_started, range(self.workers)))  # the processes start (fork, _init) now, not in round 1
        else:
            _init(setup)

    def round(
        self,
        net: PolicyNet,
        seed: int,
        steps: int,
        on_chunk: Callable[[ChunkResult], object] | None = None,
        league_probs: tuple[float, ...] = (),
    ) -> list[ChunkResult]:
        """One round of ``steps`` learner decisions (split over the chunks), in chunk order.

        ``league_probs``: the draw probability of each ``CollectSettings.league`` member this round.

        ``on_chunk`` is called with each chunk's result, in chunk order, as it comes back (progress
        across workers and nodes: local workers send their share of a round as one message, a Ray
        cluster each chunk as it finishes); it reads only.
        """
        state = {k: v.detach().cpu() for k, v in net.state_dict().items()}
        quota = -(-steps // self.chunks)
        seeds = np.random.default_rng(seed).integers(0, 2**31 - 1, size=self.chunks)
        tasks = [ChunkTask(int(s), quota, league_probs) for s in seeds]
        if self.executor is not None:  # the weights: once per round in the object store
            done = None if on_chunk is None else (lambda _i, c: on_chunk(c))
            return self.executor.map(_cluster_chunk, tasks, self.setup, self.executor.share(state), on_result=done)
        results: Iterable[ChunkResult]
        if self.pool is None:
            results = (_play_chunk(state, t) for t in tasks)
        else:  # one message a worker (its share of the chunks, the weights pickled once): 5-10 ms a message saved
            results = self.pool.map(_play_chunk, [state] * len(tasks), tasks, chunksize=-(-len(tasks) // self.workers))
        out = []
        for chunk in results:
            out.append(chunk)
            if on_chunk is not None:
                on_chunk(chunk)
        return out

    def close(self) -> None:
        if self.pool is not None:
            self.pool.shutdown()


def check_drawable(mix: Mapping[str, float], frozen: Mapping[str, PolicyNet], league: tuple[str, ...]) -> None:
    """Raise ValueError when no kind of ``mix`` with a weight > 0 has a player to draw."""
    agents = [k for k in frozen if is_frozen_agent(k)]
    empty = {"frozen": not agents, "league": not league}
    if all(empty.get(k, False) for k, w in mix.items() if w > 0):
        raise ValueError(f"selfplay.opponent_mix {dict(mix)}: no frozen policy to draw from; add a kind such as self")
