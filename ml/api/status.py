"""Where the loop is: one status document built from the runtime files, the state and git.

``state`` is one of:

| state | meaning |
|---|---|
| ``idle`` | no loop ever ran here |
| ``starting`` | a loop process runs but has not reported a stage yet |
| ``running`` | a stage runs (``stage``, ``progress``) |
| ``pausing`` / ``paused`` / ``resuming`` | pause asked / the loop waits between stages / resume asked |
| ``stopping`` | stop asked: the current stage finishes, then the loop exits |
| ``stopped`` | no loop runs; the next start resumes where it stopped |
| ``done`` / ``blocked`` | no loop runs; ``loop.max_generations`` reached / waits for a human (see README) |
| ``error`` | the last loop exited on an error (``message``, ``log_tail``) |
"""

from __future__ import annotations

from pathlib import Path
from typing import overload

from ml.api.control import LoopController
from ml.api.readers import LAUNCH_FILE, LOG_FILE, RepoView
from ml.base.io import JSONObject
from ml.driver.state import CONTROL_FILE, PROGRESS_FILE, STATUS_FILE

LOG_TAIL_LINES = 15
LOG_TAIL_BYTES = 8192


def _phase(running: bool, reported: str | None, control: str | None, curriculum: str, ever_ran: bool) -> str:
    """The ``state`` of the table in the module docstring."""
    if running:
        if control == "stop":
            return "stopping"
        if reported == "paused":
            return "resuming" if control == "resume" else "paused"
        if control == "pause":
            return "pausing"
        return reported if reported == "running" else "starting"
    if reported in ("error", "done", "blocked"):
        return reported
    if curriculum in ("done", "blocked"):
        return curriculum
    return "stopped" if ever_ran else "idle"


def log_tail(path: Path, lines: int = LOG_TAIL_LINES) -> list[str]:
    """The last ``lines`` lines of ``path`` (read from its last ``LOG_TAIL_BYTES``); [] when absent."""
    try:
        with open(path, "rb") as f:
            f.seek(0, 2)
            f.seek(max(0, f.tell() - LOG_TAIL_BYTES))
            text = f.read().decode("utf-8", errors="replace")
    except FileNotFoundError:
        return []
    # progress bars redraw with \r: keep the last redraw of each line
    return [line.rsplit("\r", 1)[-1] for line in text.splitlines()[-lines:]]


def _max_generations(view: RepoView, launch: JSONObject, running: bool, reported: JSONObject) -> int | None:
    """The generation limit of the loop that runs (or ran last): what it reported in its
    status (``--max-generations`` or ``loop.max_generations``, however it was started), else
    the dashboard's launch argument, else ``params.yaml``."""
    if reported.get("max_generations"):
        return int(reported["max_generations"])
    argv = launch.get("argv") or []
    if running and "--max-generations" in argv[:-1]:
        return int(argv[argv.index("--max-generations") + 1])
    params = view.params()
    return params.loop.max_generations if params else None


def _progress(reported: JSONObject, progress: JSONObject) -> JSONObject | None:
    """Progress within the running stage, if progress.json was written since the stage began."""
    if not progress or float(progress.get("updated_at", 0)) < float(reported.get("updated_at", 0)) - 1.0:
        return None
    n, total = progress.get("n"), progress.get("total")
    fraction = min(1.0, n / total) if isinstance(n, int | float) and isinstance(total, int | float) and total else None
    return {**{k: progress.get(k) for k in ("desc", "n", "total", "unit", "updated_at", "note")}, "fraction": fraction}


@overload
def generation_label(generation: int) -> str: ...


@overload
def generation_label(generation: None) -> None: ...


def generation_label(generation: int | None) -> str | None:
    """A generation as the commits and attempt ids name it: ``gen 001`` (None for None)."""
    return None if generation is None else f"gen {int(generation):03d}"


def accepted_generations(history: list[JSONObject]) -> list[int]:
    """The generations with an accepted attempt in ``eval_history.json``, in order."""
    return sorted({int(e["generation"]) for e in history if e.get("verdict") == "accepted" and "generation" in e})


def loop_status(view: RepoView, controller: LoopController) -> JSONObject:
    """The document of ``GET /api/ml/distill/status`` (``ml.api.schemas.LoopStatus``).

    Generations are numbered from 0, as in the commits (``gen 000 attempt 1: ...``):
    ``generation`` is the one in flight (``generation_in_flight``) or, when none is, the one
    to run next, so after gen 000 and gen 001 are accepted it is 2 with ``generation_label``
    ``gen 002`` and ``accepted`` 2.
    """
    running, pid = controller.running()
    state = view.state()
    launch = view.runtime(LAUNCH_FILE)
    reported = view.runtime(STATUS_FILE)
    if float(reported.get("updated_at", 0)) < float(launch.get("started_at", 0)):
        reported = {}  # written by a loop before the one the API launched last
    control = view.runtime(CONTROL_FILE).get("command")
    phase = _phase(running, reported.get("status"), control, state.status, bool(reported or launch or state.log))
    live = running and "generation" in reported
    flight = state.in_flight
    generation = reported["generation"] if live else (flight.generation if flight else state.generation)
    attempt = reported["attempt"] if live else (flight.attempt if flight else state.attempt)
    history = view.eval_history()
    last = history[-1] if history else None
    accepted = accepted_generations(history)
    sha, subject = view.head()
    stage_running = running and reported.get("status") == "running"
    return {
        "state": phase,
        "running": running,
        "pid": pid,
        "generation": generation,
        "generation_label": generation_label(generation),
        "generation_in_flight": bool(reported.get("attempt_id")) if live else flight is not None,
        "accepted": len(accepted),
        "last_accepted_label": generation_label(accepted[-1]) if accepted else None,
        "attempt": attempt,
        "attempt_id": reported.get("attempt_id") if live else (flight.attempt_id if flight else None),
        "max_generations": _max_generations(view, launch, running, reported),
        "stage": reported.get("stage") if stage_running else None,
        "stage_index": reported.get("stage_index") if stage_running else None,
        "stages": reported.get("stages") or [],
        "progress": _progress(reported, view.runtime(PROGRESS_FILE)) if stage_running else None,
        "control": control,
        "curriculum_status": state.status,
        "last_verdict": None
        if last is None
        else {k: last.get(k) for k in ("attempt_id", "generation", "attempt", "verdict", "figures", "reasons")},
        "commit": sha,
        "commit_subject": subject,
        "message": reported.get("message"),
        "updated_at": reported.get("updated_at"),
        "log_tail": log_tail(view.path(LOG_FILE)),
    }
