"""Commit messages of the loop: built from the state alone, so a run killed between a state
write and its commit makes the same commit when it resumes. Each ends with an ``Attempt-Id:``
trailer (``ml.driver.journal.Journal.commit_last`` skips a commit whose attempt id is already at HEAD).
"""

from __future__ import annotations

from collections.abc import Mapping

from ml.base.io import JSONValue
from ml.driver.state import AttemptLog, LoopState


def pending_message(state: LoopState) -> str:
    """The commit message of the state's last log entry (an attempt or an override).

    Raises:
        IndexError: the state's log is empty.
    """
    last = state.log[-1]
    if last.verdict == "override":  # its first reason is the kind, the others the notes
        return override_message(last, state.generation, last.reasons[1:])
    return attempt_message(last, last.overrides, state.nudges)


def override_message(entry: AttemptLog, next_generation: int, notes: list[str] | None = None) -> str:
    """The commit message of an override ``entry`` (its first reason is the kind) that leads to ``next_generation``.

    Args:
        entry: the override's log entry.
        next_generation: the generation the state goes on with.
        notes: paragraphs for the body (e.g. why the next phase plays the heuristic teacher).
    """
    body = "".join(f"{n}\n\n" for n in notes or [])
    return (
        f"override: {entry.reasons[0]} (generation {entry.generation:03d} -> {next_generation:03d})\n\n"
        f"{body}Attempt-Id: {entry.attempt_id}\n"
    )


def attempt_message(entry: AttemptLog, used: Mapping[str, JSONValue], next_nudges: Mapping[str, JSONValue]) -> str:
    """The commit message of a finished attempt.

    Subject: generation, attempt, verdict, phase, then the headline figures, or for an
    aborted attempt (no figures) its reason. Body: the gate's reasons, the params ``used``
    on top of params.yaml, the suggester's ``next_nudges`` and the Elo gain. ``used`` is
    labelled by where it came from: on a generation's first attempt, entering a phase (its
    overrides, base values back, a seed checkpoint); on a retry, the suggester. The
    suggester only nudges retries, and a phase is only entered by a first attempt.
    """
    f = entry.figures
    head = f"gen {entry.generation:03d} attempt {entry.attempt}: {entry.verdict} | phase {entry.phase}"
    if "mean_return" in f:  # a zero-sum game: judged in chips
        head += f" | PPO chips {f['mean_return']:+.3f} [{f['return_low']:+.3f}, {f['return_high']:+.3f}]"
    if "win_rate" in f:
        head += (
            f" | PPO win {f['win_rate']:.3f} [{f['win_rate_low']:.3f}, {f['win_rate_high']:.3f}] "
            f"| holdout acc {f['holdout_accuracy']:.3f} (drop {f['holdout_accuracy_drop']:+.4f})"
        )
    elif entry.reasons:
        head += f" | {entry.reasons[0]}"
    lines = [f"- {r}" for r in entry.reasons]
    if used and entry.attempt == 1:
        lines.append(f"params set on entering phase {entry.phase}: " + ", ".join(f"{k} = {v}" for k, v in used.items()))
    elif used:
        lines.append("params nudged by the suggester for this attempt: " + ", ".join(f"{k} = {v}" for k, v in used.items()))
    if next_nudges:
        lines.append("next attempt's params nudged: " + ", ".join(f"{k} = {v}" for k, v in next_nudges.items()))
    if isinstance(g := f.get("elo_gain"), dict):  # the tournament's gain (``ml.judge.elo``)
        lines.append(f"Elo gain {g['new']} over {g['old']}: {g['elo']:+.0f} [{g['low']:+.0f}, {g['high']:+.0f}]")
    body = "\n".join(lines)
    return f"{head}\n\n{body}\n\nAttempt-Id: {entry.attempt_id}\n" if body else f"{head}\n\nAttempt-Id: {entry.attempt_id}\n"


SUBJECT_CHANGES = 100
"""Most characters of changes a ``params_edit_message`` subject lists; longer ones name the keys only."""


def params_edit_message(changes: list[str], bom: str | None = None) -> str:
    """The commit message of a hand edit of params.yaml that the loop commits between attempts.

    Args:
        changes: ``<dotted key> <old> -> <new>`` per changed value (``ml.driver.params_file.value_changes``).
        bom: ``byte-order mark added`` or ``... removed`` (``ml.driver.params_file.bom_change``), None: neither.

    Subject: ``params: train.epochs 6 -> 3, selfplay.updates 4 -> 8``; past ``SUBJECT_CHANGES``
    characters the keys alone (``params: train.epochs, train.lr, ... (7 values)``); ``bom`` last
    (``params: train.epochs 6 -> 3, byte-order mark added``); with no value changed
    ``params: byte-order mark added (no value changed)``, or for comments and layout
    ``params: params.yaml edited by hand (no value changed)``. Body: one change a line, and what a
    byte-order mark is.
    """
    if not changes and bom is None:
        return "params: params.yaml edited by hand (no value changed)\n"
    listed = ", ".join(changes)
    if len(listed) > SUBJECT_CHANGES:
        keys = ", ".join(c.split(" ", 1)[0] for c in changes)
        if len(keys) > SUBJECT_CHANGES:
            keys = keys[:SUBJECT_CHANGES].rsplit(", ", 1)[0] + ", ..."
        listed = f"{keys} ({len(changes)} values)"
    if bom is not None:
        listed = f"{listed}, {bom}" if changes else f"{bom} (no value changed)"
    lines = [*changes, *([f"{bom}: {BOM_NOTE}"] if bom is not None else [])]
    body = "\n".join(lines)
    return f"params: {listed}\n\nedited by hand in params.yaml, committed by loop.py before the next attempt:\n{body}\n"


BOM_NOTE = "a byte-order mark is the invisible U+FEFF some editors write first: YAML, DVC and the loop read past it"
"""What a UTF-8 byte-order mark at the start of params.yaml is to the loop (``params_edit_message``)."""
