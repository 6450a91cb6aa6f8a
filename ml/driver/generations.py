"""Across attempts: the generation plot file and the check of the recorded versions.

``plots/generations.json`` holds one row per finished attempt (run order), rebuilt in full
from ``state/eval_history.json`` and ``state/elo_history.json`` after every attempt, so a
resumed attempt writes the same file. ``dvc.yaml``'s top-level ``plots:`` draw it (gate win
rate with its interval, student win rate, Elo with its interval, PPO share, NashConv against
cumulative episodes), and so does
the dashboard.

Each stage's metrics carry ``<stage>/env`` (``ml.runtime.cli.environment``: Python, torch, DVC and
numpy versions, the git SHA and torch's CPU capability); ``version_changes`` names what differs
from the previous attempt's.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from ml.base.io import JSONObject, atomic_write_json
from ml.driver.state import HistoryEntry, Metrics

if TYPE_CHECKING:
    from ml.judge.elo import EloEntry

GENERATIONS_FILE = Path("plots/generations.json")
"""The generation plot file (sync partner: the top-level ``plots:`` of ``dvc.yaml``)."""

GenerationRow = JSONObject
"""One row of ``plots/generations.json`` (the keys: ``generation_rows``)."""

VERSION_KEYS = ("python", "torch", "dvc", "numpy", "cpu_capability")
"""The versions compared between attempts (the git SHA changes every attempt); ``cpu_capability``
is the vector unit torch's CPU kernels used (``ml.base.determinism``): another one rounds differently."""


def _elo_row(elo_history: list[EloEntry], entry: HistoryEntry) -> dict[str, float | None]:
    """The Elo and 95% interval of an accepted attempt's student (``gen<generation>``) in the latest
    refit (all generations are rated together, so earlier figures move as games are added); else nulls."""
    if entry.verdict == "accepted" and elo_history:
        for row in elo_history[-1].get("table", []):
            if row.get("player") == f"gen{entry.generation:03d}":
                return {"elo": row["elo"], "elo_low": row["low"], "elo_high": row["high"]}
    return {"elo": None, "elo_low": None, "elo_high": None}


def generation_rows(attempts: Sequence[HistoryEntry], elo_history: list[EloEntry]) -> list[GenerationRow]:
    """One row per finished attempt, in run order (``attempt_no`` from 1).

    Args:
        attempts: ``state/eval_history.json`` (each entry's ``figures`` and ``metrics``).
        elo_history: ``state/elo_history.json`` (``ml.judge.elo``' records).

    Returns:
        Rows with ``attempt_no``, ``generation``, ``attempt``, ``verdict``, ``gate_win_rate``,
        ``gate_win_low``, ``gate_win_high``, ``student_win_rate``, ``elo``, ``elo_low``,
        ``elo_high`` (accepted attempts, from the latest refit), ``ppo_share``, in zero-sum games
        ``gate_mean_return`` with ``gate_return_low``/``gate_return_high`` and ``student_mean_return``
        (chips per game: the PPO agent against the teachers, the candidate student against the
        current one), ``episodes`` (games
        the attempt played, ``AttemptLog.episodes``), ``cumulative_episodes`` (every attempt's so
        far, this one included: the x axis of NashConv in the papers) and ``nash_conv`` (the
        student's exact NashConv, ``train/nash_conv``, in games that have it); null where an
        attempt has no such figure (an aborted attempt has no gate).
    """
    rows = []
    cumulative = 0
    for no, entry in enumerate(attempts, start=1):
        cumulative += entry.episodes or 0
        figures, gate, train = entry.figures, entry.metrics.get("gate") or {}, entry.metrics.get("train") or {}
        share = train.get("train/sampled_share") or {}
        assert isinstance(share, dict), "train/sampled_share is source -> share (ml.learn.supervised)"
        rows.append(
            {
                "attempt_no": no,
                "generation": entry.generation,
                "attempt": entry.attempt,
                "verdict": entry.verdict,
                "gate_win_rate": figures.get("win_rate"),
                "gate_win_low": figures.get("win_rate_low"),
                "gate_win_high": figures.get("win_rate_high"),
                "student_win_rate": gate.get("gate/student_win_rate"),
                **_elo_row(elo_history, entry),
                "ppo_share": float(share.get("ppo", 0.0)) if train else None,  # type: ignore[arg-type]
                "gate_mean_return": figures.get("mean_return"),
                "gate_return_low": figures.get("return_low"),
                "gate_return_high": figures.get("return_high"),
                "student_mean_return": gate.get("gate/student_mean_return"),
                "episodes": entry.episodes,
                "cumulative_episodes": cumulative,
                "nash_conv": train.get("train/nash_conv"),
            }
        )
    return rows


def write_generations(root: Path, attempts: Sequence[HistoryEntry], elo_history: list[EloEntry]) -> None:
    """Rewrite ``plots/generations.json`` under ``root`` from the history (atomic, idempotent)."""
    atomic_write_json(root / GENERATIONS_FILE, generation_rows(attempts, elo_history))


def recorded_versions(metrics: Metrics) -> dict[str, str]:
    """The versions an attempt's stages recorded (``<stage>/env`` of the first stage that has one).

    Args:
        metrics: stage name -> its metrics (``history.all_metrics`` or a history entry's ``metrics``).
    """
    for stage, values in sorted(metrics.items()):
        env = values.get(f"{stage}/env") if isinstance(values, dict) else None
        if isinstance(env, dict):
            return {k: str(env[k]) for k in VERSION_KEYS if k in env}
    return {}


def version_changes(previous: dict[str, str], current: dict[str, str]) -> list[str]:
    """``"torch 2.12.0 -> 2.13.0"`` for each version that differs (nothing when either side is unknown)."""
    return [
        f"{k} {previous[k]} -> {current[k]}"
        for k in VERSION_KEYS
        if k in previous and k in current and previous[k] != current[k]
    ]


def version_warning(attempts: Sequence[HistoryEntry], metrics: Metrics, attempt_id: str) -> str | None:
    """A warning line when this attempt's stages ran on other versions (or CPU capability) than the previous attempt's.

    Args:
        attempts: ``state/eval_history.json`` (the previous attempt is the last entry that is not ``attempt_id``).
        metrics: this attempt's ``metrics/<stage>.json`` (stage name -> metrics).
        attempt_id: this attempt.
    """
    earlier = [a for a in attempts if a.attempt_id != attempt_id]
    if not earlier:
        return None
    changes = version_changes(recorded_versions(earlier[-1].metrics), recorded_versions(metrics))
    if not changes:
        return None
    return f"warning: this attempt ran on other versions than attempt {earlier[-1].attempt_id}: {', '.join(changes)}"
