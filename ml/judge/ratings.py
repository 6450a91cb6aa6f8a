"""Tournaments and Plackett-Luce Elo ratings with confidence intervals.

Every game of a tournament gives a full ranking of its seats (``GameState.ranking``: the
winner, then survivors of a turn-cap draw by life, then the eliminated, last out first).
Ratings are the maximum-likelihood Plackett-Luce log-strengths ``theta`` over the whole
history of games, refitted in one batch each time (so the result does not depend on the
order in which games were played), with

* the heuristic teacher anchored (``theta = 0``, Elo 1500);
* a weak Gaussian prior linking consecutive generations,
  ``theta_g - theta_{g-1} ~ N(0, prior_sigma^2)``, which keeps a generation with few
  games near its neighbours without deciding the fit;
* 95% intervals from the inverse Hessian of the negative log-posterior (the observed
  Fisher information) at the optimum.

Elo is ``1500 + 400 / ln(10) * theta``: with that scale a gap of 400 Elo means 10:1 odds in
a head-to-head choice, as in Elo's logistic model.

References:
    Plackett, R. L. (1975), "The Analysis of Permutations", JRSS C 24(2); Luce, R. D.
    (1959), "Individual Choice Behavior". Hunter, D. R. (2004), "MM algorithms for
    generalized Bradley-Terry models", Ann. Statist. 32(1), section 5 (the PL likelihood).
"""

from __future__ import annotations

import json
import math
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import numpy as np
import torch
from pydantic import BaseModel, ConfigDict, ValidationError
from scipy.optimize import minimize
from typing_extensions import NotRequired, TypedDict  # pydantic reads TypedDicts from typing_extensions before Python 3.12

from ml.base.faults import seam
from ml.base.io import DataFileError, atomic_write_json, atomic_write_text, iter_jsonl, read_json
from ml.base.progress import ProgressBar
from ml.game.registry import GameSpec
from ml.game.spec import Encoder
from ml.judge.stats import ReturnTally
from ml.model.policy import PolicyNet
from ml.play.rollout import Controller, Pods, game_seeds, play_games, rotated_seatings
from ml.runtime.compute import LOCAL, Executor, chunk_ranges, chunk_seed

ELO_BASE = 1500.0
ELO_SCALE = 400.0 / math.log(10.0)
"""Elo points per unit of log-strength (400 Elo = a factor 10 in strength)."""
Z95 = 1.959963984540054
"""Two-sided 95% normal quantile."""


class EloRow(TypedDict):
    """One player of a refit (``Ratings.table``): Elo with its 95% interval, rounded to 0.1."""

    player: str
    elo: float
    low: float
    high: float
    games: int


class GainRow(TypedDict):
    """Elo of the newest generation ``new`` minus the one before, ``old``, with its 95% interval."""

    new: str
    old: str
    elo: float
    low: float
    high: float


class ReturnRow(TypedDict):
    """A player's mean return in chips per game (``return_table``); ``low``/``high`` None with one game."""

    player: str
    mean_return: float
    low: float | None
    high: float | None
    games: int


class TournamentGame(TypedDict):
    """One tournament game: player names from first place to last and, in a two-player zero-sum
    game, each ranked player's return in chips (aligned with ``ranking``)."""

    ranking: list[str]
    returns: NotRequired[list[float]]


class RecordedGame(TypedDict):
    """A line of ``state/tournament.jsonl``: a :class:`TournamentGame` keyed by its attempt."""

    attempt_id: str
    ranking: list[str]
    returns: NotRequired[list[float]]


class EloEntry(TypedDict):
    """One refit of ``state/elo_history.json`` (:func:`record_tournament`).

    ``games``: all games so far; ``episodes``: the games of this attempt's tournament; ``gain``: vs
    the previous generation, or None; ``returns``: in a zero-sum game, :func:`return_table` over all games.
    """

    attempt_id: str
    generation: int
    games: int
    episodes: int
    table: list[EloRow]
    gain: GainRow | None
    returns: NotRequired[list[ReturnRow]]


@dataclass
class Ratings:
    """A Plackett-Luce fit.

    Attributes:
        players: player names, index-aligned with the arrays.
        theta: float64[P] log-strengths (anchor 0).
        cov: float64[P, P] covariance of ``theta`` (anchor row/column 0).
        games: int64[P] games each player took part in.
    """

    players: list[str]
    theta: np.ndarray
    cov: np.ndarray
    games: np.ndarray

    def elo(self, name: str) -> float:
        return ELO_BASE + ELO_SCALE * float(self.theta[self.players.index(name)])

    def elo_interval(self, name: str) -> tuple[float, float]:
        i = self.players.index(name)
        half = Z95 * ELO_SCALE * math.sqrt(max(self.cov[i, i], 0.0))
        return self.elo(name) - half, self.elo(name) + half

    def gain(self, new: str, old: str) -> tuple[float, float, float]:
        """Elo of ``new`` minus ``old`` with its 95% interval ``(gain, low, high)``."""
        i, j = self.players.index(new), self.players.index(old)
        var = self.cov[i, i] + self.cov[j, j] - 2 * self.cov[i, j]
        gain = ELO_SCALE * float(self.theta[i] - self.theta[j])
        half = Z95 * ELO_SCALE * math.sqrt(max(var, 0.0))
        return gain, gain - half, gain + half

    def table(self) -> list[EloRow]:
        """One row per player: name, elo, low, high, games; strongest first."""
        rows: list[EloRow] = []
        for name, g in zip(self.players, self.games, strict=True):
            low, high = self.elo_interval(name)
            rows.append(
                EloRow(player=name, elo=round(self.elo(name), 1), low=round(low, 1), high=round(high, 1), games=int(g))
            )
        return sorted(rows, key=lambda r: -r["elo"])


def _stages(rankings: np.ndarray) -> list[tuple[np.ndarray, np.ndarray]]:
    """Per choice stage k: (chosen int[G], choice set int[G, K-k]) of PL's sequential choices."""
    k = rankings.shape[1]
    return [(rankings[:, s], rankings[:, s:]) for s in range(k - 1)]


def _objective(
    free: np.ndarray, anchor: int, n: int, stages: list[tuple[np.ndarray, np.ndarray]], prior_pairs: np.ndarray, prior_prec: float
) -> tuple[float, np.ndarray, np.ndarray]:
    """Negative log posterior of the free ratings (anchor fixed at 0), its gradient and Hessian over the free ones."""
    theta = np.insert(free, anchor, 0.0)
    nll = 0.0
    grad = np.zeros(n)
    hess = np.zeros((n, n))
    for chosen, sets in stages:
        t = theta[sets]
        m = t.max(axis=1, keepdims=True)
        e = np.exp(t - m)
        z = e.sum(axis=1, keepdims=True)
        p = e / z
        nll += float(np.sum(np.log(z[:, 0]) + m[:, 0] - theta[chosen]))
        np.add.at(grad, chosen, -1.0)
        np.add.at(grad, sets, p)
        cols = sets.shape[1]
        for a in range(cols):
            np.add.at(hess, (sets[:, a], sets[:, a]), p[:, a])
            for b in range(cols):
                np.add.at(hess, (sets[:, a], sets[:, b]), -p[:, a] * p[:, b])
    if len(prior_pairs):
        d = theta[prior_pairs[:, 0]] - theta[prior_pairs[:, 1]]
        nll += 0.5 * prior_prec * float(d @ d)
        np.add.at(grad, prior_pairs[:, 0], prior_prec * d)
        np.add.at(grad, prior_pairs[:, 1], -prior_prec * d)
        for a, b in prior_pairs:
            hess[a, a] += prior_prec
            hess[b, b] += prior_prec
            hess[a, b] -= prior_prec
            hess[b, a] -= prior_prec
    keep = np.arange(n) != anchor
    return nll, grad[keep], hess[np.ix_(keep, keep)]


def fit_plackett_luce(
    rankings: Sequence[Sequence[str]], anchor: str, prior_chain: Sequence[str] = (), prior_sigma_elo: float = 400.0
) -> Ratings:
    """Maximum-a-posteriori Plackett-Luce ratings of players from full rankings.

    Args:
        rankings: per game, player names from first place to last (all games the same
            length; a player may appear twice in a game, e.g. two heuristic seats).
        anchor: player fixed at Elo 1500 (must appear in the data).
        prior_chain: players linked by the weak prior, in order (consecutive generations).
        prior_sigma_elo: standard deviation of the prior on consecutive differences (Elo).

    Returns:
        Ratings with covariance from the inverse Hessian at the optimum.

    Raises:
        ValueError: empty data, ragged rankings or an anchor that never played.
    """
    if not rankings:
        raise ValueError("no games to rate")
    players = sorted({p for r in rankings for p in r} | set(prior_chain))
    if anchor not in players:
        raise ValueError(f"anchor {anchor!r} never played")
    index = {p: i for i, p in enumerate(players)}
    lengths = {len(r) for r in rankings}
    if len(lengths) != 1:
        raise ValueError(f"all rankings must have the same length, got {sorted(lengths)}")
    arr = np.asarray([[index[p] for p in r] for r in rankings], dtype=np.int64)
    n, a = len(players), index[anchor]
    pairs = np.asarray(
        [(index[x], index[y]) for x, y in zip(prior_chain[1:], prior_chain[:-1], strict=False)], dtype=np.int64
    ).reshape(-1, 2)
    prec = (ELO_SCALE / prior_sigma_elo) ** 2
    stages = _stages(arr)
    res = minimize(
        lambda f: _objective(f, a, n, stages, pairs, prec)[:2],
        np.zeros(n - 1),
        jac=True,
        hess=lambda f: _objective(f, a, n, stages, pairs, prec)[2],
        method="trust-exact",
        options={"gtol": 1e-10},
    )
    free = res.x
    for _ in range(20):  # Newton polish: the objective is convex, so this converges quadratically
        _, g, h = _objective(free, a, n, stages, pairs, prec)
        if np.max(np.abs(g), initial=0.0) < 1e-12:
            break
        free = free - np.linalg.lstsq(h, g, rcond=None)[0]
    theta = np.insert(free, a, 0.0)
    h = _objective(free, a, n, stages, pairs, prec)[2]
    cov_free = np.linalg.pinv(h)
    cov = np.zeros((n, n))
    keep = np.arange(n) != a
    cov[np.ix_(keep, keep)] = cov_free
    games = np.zeros(n, dtype=np.int64)
    for row in arr:
        for i in set(row.tolist()):
            games[i] += 1
    return Ratings(players, theta, cov, games)


HEURISTIC: Final = "heuristic"
RANDOM: Final = "random"


def tournament_seatings(
    newest: str, others: Sequence[str], games: int, pod_size: int, rng: np.random.Generator
) -> list[list[str]]:
    """Pods with ``newest`` rotated through the seats (``ml.play.rollout.rotated_seatings``) and the
    other seats drawn uniformly from ``others`` (distinct where there are enough players,
    repeated otherwise)."""
    k = pod_size - 1

    def draw(g: int) -> list[str]:
        return [others[i] for i in rng.choice(len(others), size=k, replace=len(others) < k)]

    return rotated_seatings(games, pod_size, newest, draw)


@dataclass(frozen=True)
class TournamentPlay:
    """How a tournament is played.

    Attributes:
        games: games to play.
        num_envs: games played at once (batched).
        seed: seeds the seatings, the games and any sampling.
        chunk_games: games per chunk by game index (0: one chunk); chunk ``k`` samples with
            ``ml.runtime.compute.chunk_seed(seed, k)``.
    """

    games: int
    num_envs: int
    seed: int
    chunk_games: int = 0


@dataclass(frozen=True)
class _ChunkSetup:
    """What every chunk of one tournament reads (shared once: ``Executor.share``)."""

    controllers: Mapping[str, Controller]
    seatings: list[list[str]]
    seeds: list[int]
    play: TournamentPlay
    encoder: Encoder | None
    game: GameSpec


def play_tournament(
    students: Mapping[str, PolicyNet],
    newest: str,
    play: TournamentPlay,
    game: GameSpec,
    *,
    encoder: Encoder | None = None,
    executor: Executor = LOCAL,
    progress: bool | None = None,
) -> list[TournamentGame]:
    """Play ``play.games`` pods among students, the heuristic teacher and the random player.

    Students act greedily (arg-max over legal actions). Every pod holds ``newest``. The
    ``heuristic`` player is the game's teacher (MCTS for OpenSpiel games), the anchor.

    Args:
        students: name -> PolicyNet of each accepted generation's student.
        newest: the student to rate now.
        play: games, batching, seed and chunking (:class:`TournamentPlay`).
        game: the game (``ml.game.registry.GameSpec``): ``num_players`` seats per pod, the
            commander's ``max_turns`` cap.
        encoder: observation encoder (None: the game's own).
        executor: where the games are played (``ml.runtime.compute``: here or on a Ray cluster, same rankings).
        progress: show the progress bar (None: when stderr is a terminal).

    Returns:
        Per game, in game order, its :class:`TournamentGame`; ``returns`` only in a two-player
        zero-sum game (``GameSpec.zero_sum``).

    Raises:
        ml.runtime.compute.ComputeError: the Ray cluster was lost mid-stage.
    """
    controllers = {HEURISTIC: Controller(HEURISTIC), RANDOM: Controller(RANDOM)}
    controllers.update({name: Controller("net", net, greedy=True) for name, net in students.items()})
    others = sorted(set(controllers) - {newest})
    seatings = tournament_seatings(newest, others, play.games, game.num_players, np.random.default_rng(play.seed))
    setup = executor.share(_ChunkSetup(controllers, seatings, game_seeds(play.seed, play.games), play, encoder, game))
    shown = sys.stderr.isatty() if progress is None else progress
    bar = ProgressBar(total=play.games, desc="rating", unit="game", disable=not shown)
    tasks = list(enumerate(chunk_ranges(play.games, play.chunk_games)))
    local = executor.backend == "local"
    if local:  # played in this process: the bar counts each game as it ends (one chunk is the whole tournament)
        chunks: Iterable[list[TournamentGame]] = (_tournament_chunk(t, setup.value, on_game=bar.update) for t in tasks)
    else:  # on a cluster: each chunk as it comes back
        chunks = executor.imap(_tournament_chunk, tasks, setup)
    rankings: list[TournamentGame] = []
    for chunk in chunks:
        rankings += chunk
        if not local:
            bar.update(len(chunk))
    bar.close()
    return rankings


def _tournament_chunk(
    task: tuple[int, range], setup: _ChunkSetup, on_game: Callable[[], object] | None = None
) -> list[TournamentGame]:
    """Play one chunk of a tournament: per game in index order, the entry of :func:`play_tournament`.

    ``on_game`` is called as each game ends (a progress bar's ``update``; it reads nothing).
    """
    k, indices = task
    game = setup.game
    results = []
    for result in play_games(
        Pods(setup.seatings, setup.seeds, indices), dict(setup.controllers), num_envs=setup.play.num_envs, encoder=setup.encoder,
        generator=torch.Generator().manual_seed(chunk_seed(setup.play.seed, k)), game=game,
    ):  # fmt: skip
        results.append(result)
        if on_game is not None:
            on_game()
    games: list[TournamentGame] = []
    for r in sorted(results, key=lambda r: r.index):
        played = TournamentGame(ranking=[r.seats[s] for s in r.ranking])
        if game.zero_sum:
            played["returns"] = [round(float(r.returns[s]) * game.reward_scale, 9) for s in r.ranking]
        games.append(played)
    return games


class PlayedTournament(BaseModel):
    """The ``rate`` stage's output (``data/tournament.json``): this attempt's tournament games.

    Attributes:
        generation: the attempt's generation; the newest student is ``gen{generation:03d}``.
        accepted: the gate accepted the attempt (a rejected one plays no tournament: ``games`` empty).
        students: names of every accepted generation's student (``data/merged/students``), sorted.
        games: the games of :func:`play_tournament`, in game order.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    generation: int
    accepted: bool
    students: list[str]
    games: list[TournamentGame]

    @property
    def newest(self) -> str:
        return f"gen{self.generation:03d}"

    def write(self, path: Path) -> None:
        """Write as JSON (atomic)."""
        atomic_write_json(path, self.model_dump(mode="json"))

    @classmethod
    def read(cls, path: Path) -> PlayedTournament:
        """Read a file :meth:`write` wrote.

        Raises:
            ml.base.io.DataFileError: not JSON, or a field missing or of the wrong type (the first one named).
            FileNotFoundError: no such file.
        """
        try:
            return cls.model_validate(read_json(path))
        except ValidationError as e:
            err = e.errors()[0]
            raise DataFileError(path, None, ".".join(str(x) for x in err["loc"]) or None, err["msg"]) from None


def return_table(games: Iterable[TournamentGame | RecordedGame], confidence: float = 0.95) -> list[ReturnRow]:
    """Each player's mean return (chips per game) over the tournament games that carry returns.

    The game is the unit (tournament games have seeds of their own, no duplicate deals), so
    the interval is Student's t over the player's games (``ml.judge.stats.ReturnTally``).

    Returns:
        Rows ``player``, ``mean_return``, ``low``, ``high`` (None with one game), ``games``;
        best first. Empty when no game carries returns (the commander's).
    """
    tallies: dict[str, ReturnTally] = {}
    for g in games:
        for name, value in zip(g["ranking"], g.get("returns") or (), strict=False):
            tallies.setdefault(name, ReturnTally()).add(value)
    rows: list[ReturnRow] = []
    for name, t in tallies.items():
        low, high = t.interval(confidence) if t.deals > 1 else (None, None)
        rows.append(ReturnRow(player=name, mean_return=round(t.mean, 4), low=low if low is None else round(low, 4),
                              high=high if high is None else round(high, 4), games=t.deals))  # fmt: skip
    return sorted(rows, key=lambda r: (-r["mean_return"], r["player"]))


PLAYED_FILE = Path("data/tournament.json")
"""The ``rate`` stage's output (``dvc.yaml``): this attempt's :class:`PlayedTournament`."""
TOURNAMENT_FILE = Path("state/tournament.jsonl")
"""Every tournament game ever played: ``{"attempt_id", "ranking"}`` per line, with ``"returns"`` (chips,
aligned with the ranking) in a zero-sum game (the data of every refit)."""
ELO_FILE = Path("state/elo_history.json")
"""Every refit: the attempt that triggered it, the table and the newest generation's gain."""


def load_tournament(root: Path) -> list[RecordedGame]:
    """Tournament games recorded so far (empty when none).

    Raises:
        ml.base.io.DataFileError: a line that is not a JSON object (the file is written atomically,
            so a bad line is damage, never a write in progress).
    """
    path = root / TOURNAMENT_FILE
    if not path.exists():
        return []
    return [game for _, game in iter_jsonl(path, allow_truncated_last=False)]  # type: ignore[misc]


def record_tournament(root: Path, attempt_id: str, played: PlayedTournament, prior_sigma_elo: float = 400.0) -> EloEntry:
    """Record an accepted generation's tournament and refit all ratings (idempotent).

    Appends ``played.games`` to ``state/tournament.jsonl`` keyed by ``attempt_id`` (once), refits
    the Plackett-Luce ratings over every game recorded so far (the generations of
    ``played.students`` linked by the prior) and appends the refit to ``state/elo_history.json``.

    Args:
        root: repository root.
        attempt_id: the accepted attempt (keys the games and the refit, so a rerun adds nothing).
        played: the ``rate`` stage's output for that attempt.
        prior_sigma_elo: the generation-linking prior (Elo).

    Returns:
        The refit's :class:`EloEntry` (the recorded one when the attempt was recorded before).

    Raises:
        ml.base.io.DataFileError: either state file is damaged.
    """
    history: list[EloEntry] = read_json(root / ELO_FILE) if (root / ELO_FILE).exists() else []
    for past in history:
        if past["attempt_id"] == attempt_id:
            return past
    newest = played.newest
    games = load_tournament(root)
    if played.games and not any(g["attempt_id"] == attempt_id for g in games):
        games += [RecordedGame(attempt_id=attempt_id, **g) for g in played.games]
        atomic_write_text(root / TOURNAMENT_FILE, "".join(json.dumps(g) + "\n" for g in games))
        seam(f"g{played.generation:03d}.rating.games")  # the games are written, the refit not yet
    entry = EloEntry(
        attempt_id=attempt_id,
        generation=played.generation,
        games=len(games),
        episodes=sum(1 for g in games if g["attempt_id"] == attempt_id),
        table=[],
        gain=None,
    )
    if games:
        chain = sorted(n for n in played.students if n.startswith("gen"))
        fit = fit_plackett_luce(
            [g["ranking"] for g in games], anchor=HEURISTIC, prior_chain=chain, prior_sigma_elo=prior_sigma_elo
        )
        entry["table"] = fit.table()
        if chips := return_table(games):  # zero-sum games: the same games in chips
            entry["returns"] = chips
        earlier = [n for n in chain if n < newest]
        if earlier and newest in fit.players:
            gain, low, high = fit.gain(newest, earlier[-1])
            entry["gain"] = GainRow(new=newest, old=earlier[-1], elo=round(gain, 1), low=round(low, 1), high=round(high, 1))
    atomic_write_json(root / ELO_FILE, [*history, entry])
    return entry


def converged(history: Sequence[EloEntry], threshold_elo: float, window: int) -> bool:
    """Whether the last ``window`` refits each put the newest generation's gain, with 95%
    confidence, inside ``(-threshold_elo, +threshold_elo)``.

    A clearly negative gain (interval reaching below ``-threshold_elo``) is a regression, not
    convergence, and so is a gain that may still be large.
    """
    gains = [e.get("gain") for e in history[-window:]]
    return len(gains) == window and all(
        g is not None and g["high"] < threshold_elo and g["low"] > -threshold_elo for g in gains
    )


def format_table(entry: EloEntry) -> str:
    """The Elo table of an ``elo_history`` entry as text."""
    lines = [
        f"Elo after {entry['attempt_id']} ({entry['games']} games; heuristic anchored at 1500)",
        f"{'player':12s} {'Elo':>7s} {'95% interval':>17s} {'games':>6s}",
    ]
    for r in entry["table"]:
        lines.append(f"{r['player']:12s} {r['elo']:7.0f} [{r['low']:6.0f}, {r['high']:6.0f}] {r['games']:6d}")
    if (g := entry.get("gain")) is not None:
        lines.append(f"gain {g['new']} over {g['old']}: {g['elo']:+.0f} Elo [{g['low']:+.0f}, {g['high']:+.0f}]")
    if entry.get("returns"):
        lines.append(f"{'player':12s} {'chips/game':>10s} {'95% by game':>19s} {'games':>6s}")
        for c in entry["returns"]:
            span = f"[{c['low']:+7.3f}, {c['high']:+7.3f}]" if c["low"] is not None else "-"
            lines.append(f"{c['player']:12s} {c['mean_return']:+10.3f} {span:>19s} {c['games']:6d}")
    return "\n".join(lines)
