"""The loop's state: its files, the models of ``state/curriculum_state.json``, and the
runtime status/control files the dashboard shares with the loop.

Versioned (``state/``): ``curriculum_state.json`` (``LoopState``), ``eval_history.json``.
Runtime, not versioned (``.dvc/tmp/loop/``): ``status.json`` (where the loop is, written by
the loop), ``control.json`` (pause/resume/stop requests, written by the dashboard),
``progress.json`` (progress within the running stage, written by ``ml.base.progress``),
``run.json`` (the ``--max-generations`` of the run in progress, written by the loop),
``processes.json`` (the pids of the loop and of the commands it runs, ``ml.driver.processes``).
"""

from __future__ import annotations

import hashlib
import os
import time
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, JsonValue

from ml.base.io import JSONValue, atomic_write_json, read_json

LoopStatus = Literal["idle", "running", "blocked", "done"]
"""``LoopState.status``."""

STATE_FILE = Path("state/curriculum_state.json")
HISTORY_FILE = Path("state/eval_history.json")
LOCK_FILE = Path(".dvc/tmp/loop.lock")
RUNTIME_DIR = Path(".dvc/tmp/loop")
"""Runtime files (not versioned): status.json (where the loop is), control.json (pause/resume/stop
requests), progress.json (progress within the running stage, written by ml.base.progress), run.json
(the --max-generations of the run in progress), processes.json (the loop's pids)."""
STATUS_FILE = RUNTIME_DIR / "status.json"
"""Where the loop is (written by the loop, read by the dashboard)."""
CONTROL_FILE = RUNTIME_DIR / "control.json"
"""Pause/resume/stop requests (written by the dashboard, read by the loop)."""
PROGRESS_FILE = RUNTIME_DIR / "progress.json"
"""Progress within the running stage (written by ``ml.base.progress`` through ``PROGRESS_FILE_ENV``)."""
RUN_FILE = RUNTIME_DIR / "run.json"
"""The ``--max-generations`` a run was started with, kept until it is done, so that ``python loop.py``
(the command an interrupted, stopped or blocked run names) resumes it with the same limit (written by the loop)."""
PROCESSES_FILE = RUNTIME_DIR / "processes.json"
"""The pid and creation time of the loop holding the lock and of each command it is running, so that
the next start finds what a kill left running by its process tree (``ml.driver.processes``)."""
BOTS_DIR = Path("bots/promoted")
"""Promoted bots (``loop.py promote``, ``ml.driver.bots``): ``<name>.pt``, DVC-tracked."""
POLL_S = 1.0


class AttemptLog(BaseModel):
    """One finished attempt (or override) in the state's log."""

    attempt_id: str
    generation: int
    attempt: int
    verdict: Literal["accepted", "rejected", "aborted", "override"]
    phase: str = "main"
    overrides: dict[str, JsonValue] = Field(default_factory=dict)
    figures: dict[str, JsonValue] = Field(default_factory=dict)
    reasons: list[str] = Field(default_factory=list)
    wall_s: float | None = None
    stage_wall_s: dict[str, float] = Field(default_factory=dict)
    episodes: int | None = None
    """Games the attempt played: each stage that ran (its ``<stage>/episodes``) plus the tournament
    of an accepted attempt (``ml.driver.history.attempt_episodes``); None for an override."""


Metrics = dict[str, dict[str, JsonValue]]
"""Every ``metrics/<stage>.json`` of an attempt: stage name -> its metrics (``ml.driver.history.all_metrics``)."""


class HistoryEntry(AttemptLog):
    """One entry of ``state/eval_history.json``: a finished attempt's log entry (``AttemptLog``'s
    fields, in its order), then the ``nudges`` it ran with and every stage's ``metrics``.

    Frozen. Keys it does not know are kept as they are (``extra="allow"``), and
    ``ml.driver.history.save_history`` writes back only the keys an entry was read or made with,
    so an entry read from an older file is written back as it was.
    """

    model_config = ConfigDict(frozen=True, extra="allow")

    nudges: dict[str, JsonValue] = Field(default_factory=dict)
    metrics: Metrics = Field(default_factory=dict)


class InFlight(BaseModel):
    """The attempt being run: its id and the sha256 of the params.yaml it runs with."""

    attempt_id: str
    generation: int
    attempt: int
    params_sha256: str
    started_at: str
    nudges: dict[str, JsonValue] = Field(default_factory=dict)
    stage_wall_s: dict[str, float] = Field(default_factory=dict)
    """Wall seconds of each stage run so far, summed over interrupted runs of this attempt."""
    promoted: bool = False
    """Journal: the previous attempt's merge output is in ``data/`` and ``dvc add``-ed. Set once,
    before the first stage runs; a resumed attempt never promotes again (its own merge output
    would feed it)."""


class LoopState(BaseModel):
    """``state/curriculum_state.json``.

    Attributes:
        status: ``idle`` (fresh), ``running``, ``blocked`` (waits for a human override),
            ``done`` (``loop.max_generations`` reached).
        generation: the generation being worked on (accepted generations so far, plus any given
            up by ``--skip-to-next-stage``: ``ml.driver.transitions.accepted_generations``).
        attempt: the next attempt number in this generation (1-based).
        failures: rejected attempts of this generation since the last override.
        in_flight: the attempt being run, if any.
        nudges: params queued for the next attempt (dotted key -> value): the suggester's
            nudges for a retry, or on a phase's first attempt the phase's params (its
            overrides, the base values of what the previous phase changed, a seed checkpoint).
        stop_reason: why the loop is ``done`` (max generations, converged, curriculum finished).
        phase, phase_name: the curriculum phase being run (index, name; ``main`` without one).
        phase_generations: generations the current phase has advanced so far.
        entered_phase: the phase whose overrides are in params.yaml (-1: none, before the
            first phase or after the curriculum).
        phase_restore: base values (section.key -> value) of every key the current phase
            changed, by its overrides or the suggester's nudges; restored when the phase ends,
            and into params.yaml when the curriculum ends (then it is empty).
        phase_winners: phase name -> the frozen PPO agent that passed it (``genGGG``).
        log: every finished attempt and override, oldest first.
    """

    schema_version: int = 1
    status: LoopStatus = "idle"
    generation: int = 0
    attempt: int = 1
    failures: int = 0
    in_flight: InFlight | None = None
    nudges: dict[str, JsonValue] = Field(default_factory=dict)
    stop_reason: str | None = None
    phase: int = 0
    phase_name: str = "main"
    phase_generations: int = 0
    entered_phase: int = -1
    phase_restore: dict[str, JsonValue] = Field(default_factory=dict)
    phase_winners: dict[str, str] = Field(default_factory=dict)
    log: list[AttemptLog] = Field(default_factory=list)


def sha256_file(path: Path) -> str:
    """SHA-256 of the file's bytes, hex.

    Raises:
        FileNotFoundError: the file is missing.
    """
    return hashlib.sha256(path.read_bytes()).hexdigest()


def write_status(root: Path, status: str, flight: InFlight | None = None, **extra: JSONValue) -> None:
    """Write ``status.json`` for the dashboard (atomic)."""
    doc = {"pid": os.getpid(), "status": status, "updated_at": time.time(), **extra}
    if flight is not None:
        doc.update(attempt_id=flight.attempt_id, generation=flight.generation, attempt=flight.attempt)
    atomic_write_json(root / STATUS_FILE, doc)


def read_control(root: Path) -> str | None:
    """The pending control command (``pause``, ``resume``, ``stop``) or None."""
    try:
        command: str | None = read_json(root / CONTROL_FILE).get("command")
        return command
    except (FileNotFoundError, ValueError):
        return None


def clear_control(root: Path) -> None:
    """Forget a consumed control command."""
    (root / CONTROL_FILE).unlink(missing_ok=True)


def read_run_limit(root: Path) -> int | None:
    """The ``--max-generations`` the run in progress was started with (``RUN_FILE``); None: none recorded
    (the run was started without one, or is done), or the file is unreadable."""
    try:
        value = read_json(root / RUN_FILE).get("max_generations")
    except (FileNotFoundError, ValueError, AttributeError):
        return None
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 1 else None


def write_run_limit(root: Path, max_generations: int | None) -> None:
    """Record the ``--max-generations`` of the run in progress (atomic); None removes the record."""
    if max_generations is None:
        (root / RUN_FILE).unlink(missing_ok=True)
    else:
        atomic_write_json(root / RUN_FILE, {"max_generations": max_generations})


def bot_checkpoints(root: Path) -> dict[str, Path]:
    """The promoted bots of the repository ``root`` by name (``BOTS_DIR/<name>.pt``), sorted by name."""
    return {p.stem: p for p in sorted((root / BOTS_DIR).glob("*.pt"))}
