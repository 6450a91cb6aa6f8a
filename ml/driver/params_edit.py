"""A hand edit of ``params.yaml``: committed as its own commit between attempts, refused in flight.

Between attempts (nothing in flight), an edit of params.yaml alone is validated and committed by
the loop as ``params: <changes>`` before the next attempt (:func:`commit_params_edit`), so each
attempt's commit holds only the loop's changes; in flight it is refused with the one command that
resumes the attempt with it (:func:`in_flight_edit_refusal`). docs/design-notes.md, "A hand edit of
``params.yaml`` is its own commit; any other edit is refused".
"""

from __future__ import annotations

import shlex
from collections.abc import Callable
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Protocol

from ml.config.yaml_file import ParamsError
from ml.driver.messages import BOM_NOTE, params_edit_message
from ml.driver.params_file import attempt_text, bom_change, check_text, value_changes
from ml.driver.state import InFlight, LoopState


class EditedRepo(Protocol):
    """What a hand edit of params.yaml needs of the loop's repository (``ml.driver.orchestrator.Loop`` has it)."""

    def path(self, rel: Path | str) -> Path: ...
    def head_bytes(self, rel: str) -> bytes | None: ...
    def uncommitted_log(self, state: LoopState) -> bool: ...
    def tree_changes(self) -> tuple[list[str], list[str]]: ...
    def committing(
        self, message: str, paths: list[str], dvc_add: tuple[str, ...] = ()
    ) -> AbstractContextManager[dict[str, str]]: ...
    def seam(self, name: str) -> None: ...

    echo: Callable[[str], None]


def in_flight_edit_refusal(loop: EditedRepo, flight: InFlight) -> str:
    """The refusal of a params.yaml edited while ``flight`` is in flight: the values changed
    against what the loop wrote for it, and the one command that resumes it with them."""
    path = loop.path("params.yaml")
    head = loop.head_bytes("params.yaml") or b""
    try:
        wrote = attempt_text(head.decode("utf-8"), "params.yaml", flight.generation, flight.attempt, flight.nudges)
        text = path.read_text(encoding="utf-8")
        changes, bom = value_changes(wrote, text), bom_change(wrote, text)
    except (ParamsError, KeyError, UnicodeDecodeError):
        changes, bom = [], None
    subject = params_edit_message(changes, bom).splitlines()[0]
    said = [*changes, *([bom] if bom else [])]
    what = f" ({', '.join(said)})" if said else ""
    return (
        f"params.yaml was edited while attempt {flight.attempt_id} is in flight{what}; an attempt runs on the params "
        f"it began with. To resume it with your edit: git commit -m {shlex.quote(subject)} params.yaml && python "
        "loop.py (its stages re-run where the params changed); to resume it as it was: git checkout params.yaml "
        "&& python loop.py."
    )


def commit_params_edit(loop: EditedRepo, state: LoopState) -> str | None:
    """Commit a hand edit of params.yaml made between attempts as its own commit, before the next attempt.

    Only when params.yaml is the one change in the loop's paths, no other tracked file is
    changed, and no attempt is in flight or uncommitted; otherwise nothing happens here
    (``check_tree`` refuses what is left). The file is validated first; the message names
    each changed value and a byte-order mark added or removed (``ml.driver.messages.params_edit_message``:
    ``params: train.epochs 6 -> 3, selfplay.updates 4 -> 8``; ``params: byte-order mark added (no value
    changed)``), and so does the line printed, which says what an added mark is. The commit is journalled
    (``committing``): a run killed between the validation and the commit makes the same
    commit when it starts again.

    Returns:
        The commit's subject, or None when nothing was committed.

    Raises:
        ParamsError: the edited params.yaml does not validate (nothing is committed).
    """
    if state.in_flight is not None or loop.uncommitted_log(state):
        return None
    foreign, owned = loop.tree_changes()
    head = loop.head_bytes("params.yaml")
    if foreign or owned != ["params.yaml"] or head is None:
        return None
    path = loop.path("params.yaml")
    text = path.read_text(encoding="utf-8")
    check_text(path, text)
    bom = bom_change(head.decode("utf-8"), text)
    message = params_edit_message(value_changes(head.decode("utf-8"), text), bom)
    with loop.committing(message, ["params.yaml"]):
        loop.seam("params_edit")  # validated, journalled, not committed: the edit itself is the change
    subject = message.splitlines()[0]
    note = f"; {BOM_NOTE}, and the loop keeps it" if bom == "byte-order mark added" else ""
    loop.echo(f"committed your edit of params.yaml: {subject}{note}")
    return subject
