"""The loop's records: the state file, the attempt history, the Elo history and an attempt's figures.

Readers of the versioned files under ``state/`` and of ``metrics/`` that the driver needs;
every one names a file it cannot read together with how to restore it, and none returns
an empty record in place of a lost one.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

from pydantic import ValidationError

from ml.base.io import DataFileError, JSONObject, JSONValue, atomic_write_json, read_json
from ml.config.params import Params
from ml.config.yaml_file import safe_yaml
from ml.driver.feedback import FeedbackRecord
from ml.driver.feedback import now as feedback_now
from ml.driver.state import HISTORY_FILE, STATE_FILE, AttemptLog, HistoryEntry, InFlight, LoopState, Metrics
from ml.driver.workspace import LoopError
from ml.judge.elo import ELO_FILE, EloEntry
from ml.judge.verdict import GateVerdict

RESTORE_HINT = (
    "Restore it from the last commit (`git checkout HEAD -- {path}`; if its deletion was committed: "
    "`git checkout $(git rev-list -n 1 HEAD -- {path})~1 -- {path}`) and run loop.py again: the attempt in flight resumes."
)


def load_state(root: Path) -> LoopState:
    """``state/curriculum_state.json`` under ``root``, or a fresh state when the file is absent.

    Raises:
        LoopError: the file cannot be read or does not validate (named, with how to restore it).
    """
    p = root / STATE_FILE
    if not p.exists():
        return LoopState()
    try:
        return LoopState.model_validate(read_json(p))
    except (DataFileError, ValidationError) as e:
        raise LoopError(f"{STATE_FILE} cannot be read: {_first_line(e)}\n{RESTORE_HINT.format(path=STATE_FILE)}") from e


def save_state(root: Path, state: LoopState) -> None:
    """Write ``state/curriculum_state.json`` under ``root`` (atomic)."""
    atomic_write_json(root / STATE_FILE, state.model_dump(mode="json"))


def load_history(root: Path, state: LoopState) -> list[HistoryEntry]:
    """``state/eval_history.json`` under ``root``: every finished attempt with its metrics, oldest first.

    Raises:
        LoopError: the file is missing while ``state`` records finished attempts, it cannot be
            read, or an entry does not validate (the file, the entry's index and attempt id and
            the field named). Never an empty history in place of a lost one.
    """
    p = root / HISTORY_FILE
    if not p.exists():
        if any(e.verdict != "override" for e in state.log):
            raise LoopError(
                f"{HISTORY_FILE} is missing, but {STATE_FILE} records {len(state.log)} finished attempts.\n"
                + RESTORE_HINT.format(path=HISTORY_FILE)
            )
        return []
    try:
        doc = read_json(p)
    except DataFileError as e:
        raise LoopError(f"{e}\n{RESTORE_HINT.format(path=HISTORY_FILE)}") from e
    if not isinstance(doc, list):
        raise LoopError(f"{HISTORY_FILE}: expected a JSON list of attempts\n{RESTORE_HINT.format(path=HISTORY_FILE)}")
    entries = []
    for i, raw in enumerate(doc):
        try:
            entries.append(HistoryEntry.model_validate(raw))
        except ValidationError as e:
            err = e.errors()[0]
            where = ".".join(map(str, err["loc"])) or "entry"
            named = f" ({raw.get('attempt_id')})" if isinstance(raw, dict) and raw.get("attempt_id") else ""
            raise LoopError(
                f"{HISTORY_FILE}: entry {i}{named}: {where}: {err['msg']}\n{RESTORE_HINT.format(path=HISTORY_FILE)}"
            ) from e
    return entries


def save_history(root: Path, entries: Sequence[HistoryEntry]) -> None:
    """Write ``state/eval_history.json`` under ``root`` (atomic): each entry with the keys it was
    read or made with, so entries read from an older file are written back unchanged."""
    atomic_write_json(root / HISTORY_FILE, [e.model_dump(mode="json", exclude_unset=True) for e in entries])


def history_entry(entry: AttemptLog, nudges: Mapping[str, JSONValue], metrics: Metrics) -> HistoryEntry:
    """The history entry of a finished attempt: its log ``entry``, the ``nudges`` it ran with and
    every stage's ``metrics`` (``all_metrics``)."""
    return HistoryEntry(**entry.model_dump(mode="json"), nudges=dict(nudges), metrics=metrics)


def elo_history(root: Path) -> list[EloEntry]:
    """``state/elo_history.json`` (one tournament per accepted generation, oldest first); ``[]`` while absent.

    Raises:
        ml.base.io.DataFileError: the file is there but is not JSON.
    """
    p = root / ELO_FILE
    return read_json(p) if p.exists() else []


def attempt_figures(root: Path, verdict: GateVerdict) -> JSONObject:
    """The headline figures of a gated attempt (win rate with its interval in games, holdout
    accuracy, SPRT, sampled source shares; in a zero-sum game the mean return in chips with its
    interval first) from the gate's ``verdict`` and
    ``metrics/{train,selfplay}.json`` under ``root``.

    Raises:
        FileNotFoundError: a metrics file is missing.
    """
    train = read_json(root / "metrics/train.json")
    selfplay = read_json(root / "metrics/selfplay.json")
    chips = (
        {"mean_return": verdict.mean_return, "return_low": verdict.return_low, "return_high": verdict.return_high}
        if verdict.mean_return is not None
        else {}
    )  # zero-sum games only: the commander's figures are what they were
    return {
        **chips,
        "win_rate": verdict.win_rate,
        "win_rate_low": verdict.win_rate_low,
        "win_rate_high": verdict.win_rate_high,
        "eval_games": verdict.eval_games,
        "sprt_llr": verdict.sprt_llr,
        "sprt_decision": verdict.sprt_decision,
        "holdout_accuracy": verdict.holdout_accuracy_current,
        "holdout_accuracy_drop": verdict.holdout_accuracy_drop,
        "selfplay_train_win_rate": selfplay.get("selfplay/train_win_rate"),
        "sampled_share": train.get("train/sampled_share"),
    }


def attempt_episodes(root: Path, stages: Iterable[str]) -> int:
    """Games played by the stages of an attempt that ran: the sum of ``<stage>/episodes`` of
    ``metrics/<stage>.json`` under ``root`` over ``stages`` (``stages_run``; a stage DVC skipped
    played nothing this attempt and is not named). A stage whose metrics file is missing counts 0."""
    total = 0
    for stage in stages:
        p = root / "metrics" / f"{stage}.json"
        if p.exists():
            total += int(read_json(p).get(f"{stage}/episodes") or 0)
    return total


def stages_run(root: Path, committed_lock: bytes | None) -> list[str]:
    """The stages that ran in the attempt in flight, in ``dvc.lock``'s order: those whose entry in
    ``root/dvc.lock`` differs from the last commit's (``committed_lock``; None: no commit has one).

    DVC writes a stage's entry only when it runs the stage, and every attempt commits ``dvc.lock``,
    so this holds after a kill too: a stage that ended before the kill and that DVC skips on resume
    (its outputs cached) still counts, while the teacher, run once, counts in its first attempt only.
    """
    path = root / "dvc.lock"
    if not path.is_file():
        return []
    now = safe_yaml().load(path.read_text(encoding="utf-8")) or {}
    before = (safe_yaml().load(committed_lock.decode("utf-8")) or {}) if committed_lock else {}
    done = before.get("stages") or {}
    return [name for name, entry in (now.get("stages") or {}).items() if done.get(name) != entry]


def attempt_entry(
    root: Path,
    state: LoopState,
    flight: InFlight,
    verdict: GateVerdict | None,
    abort_reason: str | None,
    wall_s: float,
    stage_wall_s: dict[str, float],
    ran: Sequence[str],
) -> AttemptLog:
    """The log entry of a finished attempt: its verdict, figures (``attempt_figures``) and reasons.

    Args:
        root: the repository root.
        state: the state with ``flight`` in flight (its ``stage_wall_s`` holds the stages run
            before an interruption).
        flight: the attempt.
        verdict: the gate's verdict (``metrics/gate.json``); None when aborted.
        abort_reason: why self-play aborted the attempt, or None.
        wall_s: wall seconds of this run of the attempt.
        stage_wall_s: wall seconds per stage that ran in this run.
        ran: the stages that ran in the attempt (``stages_run``): its games are theirs; a stage among
            them with no recorded time (it ended just before a kill) gets its metrics' ``<stage>/wall_s``.

    Raises:
        FileNotFoundError: as ``attempt_figures``.
    """
    if state.in_flight is not None and state.in_flight.stage_wall_s:  # include stages run before an interruption
        earlier = sum(state.in_flight.stage_wall_s.values()) - sum(stage_wall_s.values())
        wall_s, stage_wall_s = wall_s + max(earlier, 0.0), dict(state.in_flight.stage_wall_s)
    for stage in ran:
        metrics = root / "metrics" / f"{stage}.json"
        if stage not in stage_wall_s and metrics.is_file():
            stage_wall_s = {**stage_wall_s, stage: float(read_json(metrics).get(f"{stage}/wall_s") or 0.0)}
    accepted = verdict is not None and verdict.accepted
    return AttemptLog(
        attempt_id=flight.attempt_id, generation=flight.generation, attempt=flight.attempt,
        verdict="aborted" if abort_reason else "accepted" if accepted else "rejected",
        figures=attempt_figures(root, verdict) if verdict is not None and not abort_reason else {},
        reasons=[abort_reason] if abort_reason else list(verdict.reasons if verdict is not None else []),
        wall_s=round(wall_s, 1), stage_wall_s=stage_wall_s, phase=state.phase_name, overrides=flight.nudges,
        episodes=attempt_episodes(root, ran),
    )  # fmt: skip


def ledger_record(
    flight: InFlight, params: Params, gate: Mapping[str, JSONValue], abort_reason: str | None, outcome: str
) -> FeedbackRecord:
    """The ledger line (``state/feedback.jsonl``) of a finished attempt, with every gate metric
    (``gate``, empty when aborted); its ``outcome`` as the state says it."""
    return FeedbackRecord(
        timestamp=feedback_now(), attempt_id=flight.attempt_id, generation=flight.generation, attempt=flight.attempt,
        params=params.model_dump(mode="json"),
        figures={k: v for k, v in gate.items() if k != "gate/batch"} or {"aborted": abort_reason},
        passed=bool(gate.get("gate/accepted")), outcome=outcome, nudges=flight.nudges,
    )  # fmt: skip


def all_metrics(root: Path) -> Metrics:
    """Every ``metrics/<stage>.json`` under ``root``: stage name -> its metrics."""
    return {p.stem: read_json(p) for p in sorted((root / "metrics").glob("*.json"))}


def _first_line(e: Exception) -> str:
    return str(e).strip().splitlines()[0] if str(e).strip() else repr(e)
