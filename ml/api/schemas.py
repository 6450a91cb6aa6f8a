"""Request and response bodies of the API (they make the OpenAPI schema at ``/openapi.json``)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictInt

MAX_GENERATIONS_LIMIT = 10_000
"""Upper bound of ``max_generations`` in a start request (a typo guard, not a real limit)."""


class StartRequest(BaseModel):
    """Body of ``POST /api/ml/distill/start`` (optional as a whole)."""

    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)

    max_generations: StrictInt | None = Field(None, ge=1, le=MAX_GENERATIONS_LIMIT)
    """Run until this many generations are accepted (``loop.py --max-generations``); default ``loop.max_generations``."""
    params: dict[str, Any] = Field(default_factory=dict)
    """Overrides of ``params.yaml`` as ``{section: {key: value}}``, validated like ``params.yaml``; committed before the start."""


class StopRequest(BaseModel):
    """Body of ``POST /api/ml/distill/stop`` (optional)."""

    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)

    force: StrictBool = False
    """Kill the loop's process group now instead of letting the current stage finish."""


class StartResult(BaseModel):
    """The loop process that was launched."""

    pid: int
    """Process id of ``loop.py``."""
    argv: list[str]
    """Its command line."""
    params_changed: list[str]
    """``section.key=value`` of each override that changed ``params.yaml``."""
    params_commit: str | None
    """SHA of the commit holding the overrides (None when nothing changed)."""


class ControlResult(BaseModel):
    """A control request that was written (``pause``, ``resume``, ``stop``) or carried out (``kill``)."""

    requested: str
    pid: int | None
    """The loop's pid, when known."""


class Progress(BaseModel):
    desc: str | None = None
    n: float | None = None
    total: float | None = None
    unit: str | None = None
    updated_at: float | None = None
    fraction: float | None = None
    """``n / total`` in [0, 1], when the total is known."""
    note: str | None = None
    """Why the bar ended short of its total (``decided early: ...``), once it has (``ml.base.progress.ProgressBar.finish``)."""


class LoopStatus(BaseModel):
    """``GET /api/ml/distill/status``; ``state`` values are listed in ``ml/api/status.py``."""

    model_config = ConfigDict(use_attribute_docstrings=True)

    state: str
    """idle, starting, running, pausing, paused, resuming, stopping, stopped, done, blocked or error."""
    running: bool
    """Whether a loop process runs."""
    pid: int | None
    generation: int
    """Generation being run (or to run next when no loop runs)."""
    generation_label: str | None = None
    """That generation as the commits name it (``gen 001``); None once the run is done."""
    generation_in_flight: bool = False
    """Whether an attempt of ``generation`` is in flight."""
    accepted: int = 0
    """Generations accepted so far."""
    last_accepted_label: str | None = None
    """The newest accepted generation as the commits name it (``gen 001``), if any."""
    attempt: int
    """Attempt number within the generation, 1-based."""
    attempt_id: str | None
    max_generations: int | None
    stage: str | None
    """Stage running now (dvc.yaml name)."""
    stage_index: int | None
    stages: list[str]
    progress: Progress | None
    """Progress within the running stage."""
    control: str | None
    """Pending control command (pause, resume, stop)."""
    curriculum_status: str
    """``status`` of ``state/curriculum_state.json``."""
    last_verdict: dict[str, Any] | None
    """The last finished attempt: id, generation, attempt, verdict, figures, reasons."""
    commit: str | None
    """SHA of HEAD."""
    commit_subject: str | None
    message: str | None
    updated_at: float | None
    """When the loop last wrote ``status.json`` (Unix seconds)."""
    log_tail: list[str]
    """Last lines of ``.dvc/tmp/loop/loop.log``."""


class Problem(BaseModel):
    """An error answer (401, 403, 409)."""

    detail: str
