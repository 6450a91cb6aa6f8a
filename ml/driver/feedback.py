"""The feedback ledger and the parameter suggester.

``state/feedback.jsonl`` is append-only: one validated ``FeedbackRecord`` per attempt
(timestamp, attempt id, the params used, the gate's figures, passed, outcome). A corrupt
line is reported with its line number and left in place: the ledger is never rewritten.

After a rejection, ``suggest`` nudges the retry's params by fixed, bounded rules keyed to
the check that failed (``RULES``). The loop writes the nudged values into ``params.yaml``
so ``dvc params diff`` shows them and the commit message names them.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, ValidationError

from ml.base.io import DataFileError, JSONObject
from ml.base.jsonl import iter_jsonl
from ml.driver.params_file import get_dotted

logger = logging.getLogger(__name__)

LEDGER = Path("state/feedback.jsonl")


class FeedbackRecord(BaseModel):
    """One attempt in the ledger."""

    model_config = ConfigDict(extra="forbid")

    timestamp: str
    attempt_id: str
    generation: int
    attempt: int
    params: dict[str, Any]
    figures: dict[str, Any]
    passed: bool
    outcome: Literal["accepted", "rejected", "blocked", "done"]
    nudges: dict[str, Any] = {}


@dataclass(frozen=True)
class LedgerProblem:
    """A ledger line that could not be read (left in place)."""

    line: int
    error: str


def read_ledger(path: Path) -> tuple[list[FeedbackRecord], list[LedgerProblem]]:
    """All valid records, and the corrupt lines with their 1-based line numbers.

    Read with ``ml.base.jsonl.iter_jsonl``, which reports a line that is not UTF-8 or not JSON and
    reads on; a line that is JSON but not a record is reported too. Every such line is a
    ``LedgerProblem``, whatever its bytes; it is never rewritten.
    """
    records: list[FeedbackRecord] = []
    problems: list[LedgerProblem] = []
    if not path.exists():
        return records, problems

    def unreadable(e: DataFileError) -> None:
        problems.append(LedgerProblem(e.line or 0, e.problem))

    for no, obj in iter_jsonl(path, allow_truncated_last=False, on_error=unreadable):
        try:
            records.append(FeedbackRecord.model_validate(obj))
        except ValidationError as e:
            problems.append(LedgerProblem(no, str(e).splitlines()[0]))
    problems.sort(key=lambda p: p.line)
    for p in problems:
        logger.warning("%s:%d: corrupt ledger line left in place: %s", path, p.line, p.error)
    return records, problems


def append_record(path: Path, record: FeedbackRecord) -> bool:
    """Append ``record`` unless its attempt id is already in the ledger. Returns True if written.

    The line is written with one ``write`` and fsynced; a line cut short by a crash shows
    up as a corrupt line, reported by ``read_ledger`` and never rewritten.
    """
    records, _ = read_ledger(path)
    if any(r.attempt_id == record.attempt_id for r in records):
        return False
    path.parent.mkdir(parents=True, exist_ok=True)
    data = record.model_dump_json() + "\n"
    with path.open("a", encoding="utf-8") as f:
        if f.tell() and not path.read_bytes().endswith(b"\n"):
            data = "\n" + data  # never glue onto a truncated line
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    return True


def now() -> str:
    """UTC timestamp, ISO 8601, seconds."""
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


@dataclass(frozen=True)
class Rule:
    """Nudge ``key`` (dotted params path) by ``factor`` and ``step`` within ``[low, high]``."""

    check: str
    key: str
    factor: float = 1.0
    step: float = 0.0
    low: float = float("-inf")
    high: float = float("inf")
    integer: bool = False
    sound_teacher: bool = False
    """Only when the teacher's games are less exploitable than the current student
    (``teacher_sounder``): a rule that moves the student toward the teacher data."""


RULES: tuple[Rule, ...] = (
    # The agent was not stronger: train it longer, explore more, take smaller steps.
    Rule("strength", "selfplay.learner_decisions", factor=1.5, high=2_000_000, integer=True),
    Rule("strength", "selfplay.ent_coef", step=0.005, high=0.05),
    Rule("strength", "selfplay.lr", factor=0.7, low=1e-5),
    # The student's basic play collapsed (the holdout check guards only that): give PPO data less weight.
    Rule("holdout", "train.source_weights.ppo", factor=0.7, low=0.1),
    # No rule for "student" (the candidate student fell back): the retry's new seed plays a new
    # batch. Lowering the PPO weight there starved later students of PPO data: the share is what
    # makes them strong (docs/measurements.md, "The PPO share is the lever").
    # Nothing to export: play more export games.
    Rule("empty", "export.games", factor=2.0, high=5000, integer=True),
    # The batch raised the student's NashConv (``gate.decide_by: nash_conv``): a best response that
    # strayed too far from the average. Pull the agent harder toward the student (the magnet of
    # magnetic mirror descent), take smaller PPO steps, and move the student's average less per batch.
    Rule("nash_conv", "selfplay.magnet_kl", factor=2.0, step=0.25, high=8.0),
    Rule("nash_conv", "selfplay.lr", factor=0.5, low=1e-5),
    # Lowering the PPO share moves the student toward the teacher data: only toward a sounder teacher
    # (a CFR teacher, not a uniform one; docs/openspiel.md, "From a uniform teacher").
    Rule("nash_conv", "train.source_weights.ppo", factor=0.7, low=0.05, sound_teacher=True),
)
"""The suggester's rules: bounded, one direction each, so repeated retries converge to the bounds."""


def teacher_sounder(train: Mapping[str, object]) -> bool:
    """Whether the teacher's games are less exploitable than the current student: the NashConv of
    what the teacher's records teach below the student's (``train/nash_conv_teacher_empirical`` and
    ``train/nash_conv`` of ``metrics/train.json``, ``ml.judge.nashconv``). True when either is
    missing (a game without exact NashConv)."""
    teacher, student = train.get("train/nash_conv_teacher_empirical"), train.get("train/nash_conv")
    if not isinstance(teacher, (int, float)) or not isinstance(student, (int, float)):
        return True
    return teacher < student


def suggest(failed: Sequence[str], params: JSONObject, train: Mapping[str, object] | None = None) -> JSONObject:
    """Nudged values for a retry after a rejection.

    Args:
        failed: the failed checks that decide under ``gate.decide_by`` (``ml.judge.verdict.GateVerdict.failed``
            within ``ml.judge.verdict.deciding_checks``: the driver filters them).
        params: the params of the rejected attempt (plain nested dict).
        train: the rejected attempt's ``metrics/train.json`` (a rule with ``sound_teacher``
            applies only when ``teacher_sounder`` says so; None: as if it did).

    Returns:
        dotted key -> new value, only for values that actually change (a value already at
        its bound is left alone).
    """
    out: JSONObject = {}
    sounder = teacher_sounder(train or {})
    for check in failed:
        for rule in (r for r in RULES if r.check == check and r.key not in out and (sounder or not r.sound_teacher)):
            try:
                old = float(get_dotted(params, rule.key))
            except (KeyError, TypeError):
                continue
            new = min(max(old * rule.factor + rule.step, rule.low), rule.high)
            new = round(new) if rule.integer else round(new, 6)
            if new != old:
                out[rule.key] = new
    return out
