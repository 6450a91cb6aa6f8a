"""The ratings' record: each accepted generation's tournament games and every Plackett-Luce refit.

The ``rate`` stage plays a tournament (``ml.judge.tournament``) and writes it as a
:class:`PlayedTournament` (``data/tournament.json``); the driver records it with
:func:`record_tournament`: the games go to ``state/tournament.jsonl`` (once per attempt) and
the refit over all games so far (``ml.judge.plackett_luce.fit_plackett_luce``, the heuristic
teacher anchored at Elo 1500) to ``state/elo_history.json``. Nothing here imports torch: the
driver reads and writes these files at every attempt.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Final

from pydantic import BaseModel, ConfigDict, ValidationError
from typing_extensions import NotRequired, TypedDict  # pydantic reads TypedDicts from typing_extensions before Python 3.12

from ml.base.faults import seam
from ml.base.io import DataFileError, atomic_write_json, atomic_write_text, read_json
from ml.base.jsonl import iter_jsonl
from ml.judge.mean_return import ReturnTally
from ml.judge.plackett_luce import EloRow, GainRow, fit_plackett_luce

TEACHER: Final = "teacher"
"""The anchor of every refit (Elo 1500): the game's teacher (the controller kind ``teacher``)."""
FORMER_TEACHER_NAME: Final = "heuristic"
"""The teacher's name in tournament files written before it was ``teacher`` (read as ``TEACHER``)."""
RANDOM: Final = "random"
"""The uniform-random player every tournament holds."""


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

    ``games``: all games so far; ``episodes``: the games of this attempt's tournament; ``gain``: the
    newest generation's Elo over the strongest earlier generation of the same refit (the highest
    Elo among every earlier accepted student: a league's best, not the last one), or None; ``returns``: in a zero-sum game, :func:`return_table` over all games.
    """

    attempt_id: str
    generation: int
    games: int
    episodes: int
    table: list[EloRow]
    gain: GainRow | None
    returns: NotRequired[list[ReturnRow]]


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
    the interval is Student's t over the player's games (``ml.judge.mean_return.ReturnTally``).

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
    """Tournament games recorded so far (empty when none); ``FORMER_TEACHER_NAME`` is read as ``TEACHER``.

    Raises:
        ml.base.io.DataFileError: a line that is not a JSON object (the file is written atomically,
            so a bad line is damage, never a write in progress).
    """
    path = root / TOURNAMENT_FILE
    if not path.exists():
        return []
    games: list[RecordedGame] = [game for _, game in iter_jsonl(path, allow_truncated_last=False)]  # type: ignore[misc]
    for game in games:
        game["ranking"] = [TEACHER if name == FORMER_TEACHER_NAME else name for name in game["ranking"]]
    return games


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
            [g["ranking"] for g in games], anchor=TEACHER, prior_chain=chain, prior_sigma_elo=prior_sigma_elo
        )
        entry["table"] = fit.table()
        if chips := return_table(games):  # zero-sum games: the same games in chips
            entry["returns"] = chips
        earlier = [n for n in chain if n < newest and n in fit.players]
        if earlier and newest in fit.players:
            elo = {r["player"]: r["elo"] for r in entry["table"]}
            best = max(earlier, key=lambda n: (elo[n], n))  # the strongest earlier generation in this refit
            gain, low, high = fit.gain(newest, best)
            entry["gain"] = GainRow(new=newest, old=best, elo=round(gain, 1), low=round(low, 1), high=round(high, 1))
    atomic_write_json(root / ELO_FILE, [*history, entry])
    return entry


def converged(history: Sequence[EloEntry], threshold_elo: float, window: int) -> bool:
    """Whether the last ``window`` refits each put the newest generation's gain over the strongest
    earlier generation, with 95% confidence, inside ``(-threshold_elo, +threshold_elo)``.

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
        f"Elo after {entry['attempt_id']} ({entry['games']} games; teacher anchored at 1500)",
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
