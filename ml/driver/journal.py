"""Kill safety in one place: each step of an attempt that leaves something on disk is done once.

A run of ``loop.py`` may be killed anywhere (Ctrl-C, ``kill -9``, a power cut). Every step below
has a record that says it is done, written atomically (write to a temporary file, then rename:
``ml.base.io``) or made atomically by git; the driver asks ``Journal.done`` before a step and
skips it when the record is there. The records are the loop's own files, so a repository run by
an earlier version resumes as it is.

The steps of an attempt (``Step``), in this order:

1. ``promote``: the previous attempt's ``data/merged`` folders linked into ``data/`` and
   ``dvc add``-ed, before the first stage (``ml.driver.orchestrator.Loop.promote``). Record:
   ``in_flight.promoted`` in ``state/curriculum_state.json`` (``record_promoted``).
2. (the stages: ``dvc repro`` is its own journal: ``dvc.lock``.)
3. ``history``: the attempt's entry in ``state/eval_history.json``. Record: an entry with its
   attempt id (``add_history``).
4. ``ledger``: its line in ``state/feedback.jsonl``. Record: a line with its attempt id
   (``add_ledger``).
5. ``state``: the attempt in the state's log, nothing in flight, the next generation or retry
   set. Record: the attempt id in ``log`` of ``state/curriculum_state.json`` (``end_attempt``).
6. ``commit``: ``params.yaml``, ``dvc.lock``, pointers, metrics and state committed. Record: a
   commit with the trailer ``Attempt-Id: <id>`` among the last 200 (``commit_last``).

What a kill between two steps leaves, and how the next start converges:

* before 1 is recorded: the attempt is in flight, not promoted. The next start promotes again:
  ``ml.data.merge.promote_folders`` replaces only the folders that differ, and ``dvc add`` of
  all of them converges the pointers to the data. Once recorded, never again: the attempt's
  own merge output must not feed it.
* between 1 and 3: in flight and promoted; ``dvc repro`` skips the stages that ran, the
  interrupted one runs again, then the attempt is finished (the tournament is idempotent).
* between 3 and 4, or 4 and 5: still in flight; finishing again finds the history entry (and
  the ledger line) and adds neither twice.
* between 5 and 6: nothing in flight, the log's last entry has no commit. The next start makes
  it (``commit_last``): the message is built from the state alone
  (``ml.driver.messages.pending_message``), so it is the commit the killed run would have made.
* inside 6: ``git add`` is repeated; ``git commit`` is atomic (a stale ``index.lock`` is
  cleared at start: ``Workspace.preflight``).

A human override (``--force-retry``, ``--skip-to-next-stage``) is steps 5 and 6 alone.

Commits of other commands (a profile, the end of a curriculum, a seed checkpoint, a Forge
import, a promoted bot, a hand edit of params.yaml) are journalled by ``committing``:
``.dvc/tmp/loop/pending-commit.json`` (``PendingCommit``: message, paths, ``dvc_add``) is written
before the block's writes; after them ``dvc_add`` is ``dvc add``-ed, the paths committed and
the file removed. A kill before the file: nothing was written. A kill after it, before its
removal: the next start completes it (``finish_pending_commit``); a commit already made is not
made again (nothing is staged then).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from enum import Enum

from pydantic import BaseModel, Field, ValidationError

from ml.base.io import DataFileError, atomic_write_json, read_json
from ml.driver import history
from ml.driver.feedback import LEDGER, FeedbackRecord, append_record, read_ledger
from ml.driver.messages import pending_message
from ml.driver.state import RUNTIME_DIR, HistoryEntry, LoopState
from ml.driver.workspace import DVC, OWNED_PATHS, LoopError, Workspace

PENDING_COMMIT = RUNTIME_DIR / "pending-commit.json"
"""The journal of a commit of a command other than an attempt (``Journal.committing``)."""


class Step(str, Enum):
    """A step of an attempt that is done once, in run order (see the module docstring)."""

    PROMOTE = "promote"
    HISTORY = "history"
    LEDGER = "ledger"
    STATE = "state"
    COMMIT = "commit"


class PendingCommit(BaseModel):
    """``.dvc/tmp/loop/pending-commit.json``: a commit in progress of a command other than an attempt.

    Attributes:
        message: the commit message.
        paths: the paths committed (``git add -A -- paths``; those absent are left out).
        dvc_add: the paths ``dvc add``-ed before the commit.
    """

    message: str
    paths: list[str]
    dvc_add: list[str] = Field(default_factory=list)


class Journal:
    """The records of the steps of the attempts in the repository of ``workspace``.

    Args:
        workspace: the repository (its git and DVC, its seams).
    """

    def __init__(self, workspace: Workspace) -> None:
        self.ws = workspace

    # ------------------------------------------------------------------ attempt steps
    def done(self, step: Step, attempt_id: str) -> bool:
        """Whether ``step`` of the attempt ``attempt_id`` is recorded done (read from disk).

        Raises:
            LoopError: the state or the history cannot be read (``ml.driver.history``).
        """
        root = self.ws.root
        if step is Step.COMMIT:
            return attempt_id in self.ws.head_attempt_ids()
        if step is Step.LEDGER:
            return any(r.attempt_id == attempt_id for r in read_ledger(root / LEDGER)[0])
        state = history.load_state(root)
        ended = any(e.attempt_id == attempt_id for e in state.log)
        if step is Step.STATE:
            return ended
        if step is Step.HISTORY:
            return any(e.attempt_id == attempt_id for e in history.load_history(root, state))
        flight = state.in_flight  # Step.PROMOTE: an attempt that ended was promoted
        return ended or (flight is not None and flight.attempt_id == attempt_id and flight.promoted)

    def record_promoted(self, attempt_id: str) -> None:
        """Record ``promote`` done for the attempt in flight (``in_flight.promoted``; atomic).

        Raises:
            AssertionError: ``attempt_id`` is not the attempt in flight.
        """
        state = history.load_state(self.ws.root)
        assert state.in_flight is not None and state.in_flight.attempt_id == attempt_id, "promote runs in flight"
        state.in_flight.promoted = True
        history.save_state(self.ws.root, state)
        self.ws.seam("promote.done")

    def add_history(self, attempts: Sequence[HistoryEntry], entry: HistoryEntry) -> list[HistoryEntry]:
        """Append ``entry`` to the history ``attempts`` (as read) unless it has its attempt id;
        written atomically. Returns the history with it."""
        if any(e.attempt_id == entry.attempt_id for e in attempts):
            return list(attempts)
        attempts = [*attempts, entry]
        history.save_history(self.ws.root, attempts)
        self.ws.seam("finish.history")
        return attempts

    def add_ledger(self, record: FeedbackRecord) -> None:
        """Append the attempt's ledger line unless one with its attempt id is there (``ml.driver.feedback.append_record``)."""
        append_record(self.ws.path(LEDGER), record)
        self.ws.seam("finish.ledger")

    def end_attempt(self, state: LoopState) -> None:
        """Write the state that records the attempt finished (atomic): ``state`` has it in its
        log and nothing in flight."""
        history.save_state(self.ws.root, state)
        self.ws.seam("finish.state")

    def commit_last(self, state: LoopState) -> bool:
        """Commit the loop's paths for the state's last log entry (an attempt or an override), once.

        The message is ``ml.driver.messages.pending_message`` of ``state``; nothing happens when a
        commit with its ``Attempt-Id`` trailer is at HEAD.

        Returns:
            Whether a commit was made.

        Raises:
            IndexError: the state's log is empty.
            git.GitCommandError: git failed.
        """
        message = pending_message(state)
        if self.done(Step.COMMIT, state.log[-1].attempt_id):
            return False
        ws = self.ws
        ws.seam("commit.add")
        ws.git("add", "-A", "--", *(p for p in OWNED_PATHS if ws.path(p).exists()))
        ws.seam("commit.staged")
        ws.git("commit", "--quiet", "--no-verify", "-m", message)
        ws.seam("commit.done")
        return True

    def uncommitted(self, state: LoopState) -> bool:
        """Whether the state's last log entry has no commit (a kill came between steps 5 and 6)."""
        return bool(state.log) and not self.done(Step.COMMIT, state.log[-1].attempt_id)

    # ------------------------------------------------------------------ commits of other commands
    @contextlib.contextmanager
    def committing(self, message: str, paths: list[str], dvc_add: tuple[str, ...] = ()) -> Iterator[dict[str, str]]:
        """Journal the writes of the block and their commit (``PendingCommit``; module docstring).

        An exception in the block (nothing written, by the callers' contract) removes the
        journal and propagates; a ``KeyboardInterrupt`` leaves it for the next start. The block
        gets a dict whose ``"message"`` it may set once it knows more (a resumed journal uses the
        first).

        Raises:
            LoopError: ``dvc add`` failed (the journal stays; the next start retries it).
        """
        path = self.ws.path(PENDING_COMMIT)
        pending = PendingCommit(message=message, paths=list(paths), dvc_add=list(dvc_add))
        atomic_write_json(path, pending.model_dump(mode="json"))
        commit = {"message": message}
        try:
            yield commit
        except BaseException as e:
            if not isinstance(e, KeyboardInterrupt):
                path.unlink(missing_ok=True)
            raise
        self.ws.seam("journal.written")
        self._complete(pending.model_copy(update={"message": commit["message"]}))
        path.unlink()

    def finish_pending_commit(self) -> None:
        """Complete a journalled commit that a kill interrupted (``committing``); no-op without one.

        Raises:
            LoopError: the journal cannot be read (named), or ``dvc add`` failed.
        """
        path = self.ws.path(PENDING_COMMIT)
        if not path.exists():
            return
        try:
            pending = PendingCommit.model_validate(read_json(path))
        except (DataFileError, ValidationError) as e:
            raise LoopError(
                f"{PENDING_COMMIT}: not a journalled commit ({str(e).strip().splitlines()[0]}); "
                f"its writes are in the work tree: commit or revert them, then remove {PENDING_COMMIT}"
            ) from e
        self._complete(pending)
        path.unlink()
        self.ws.echo(f"completed the commit interrupted by a kill: {pending.message.splitlines()[0]}")

    def _complete(self, pending: PendingCommit) -> None:
        ws = self.ws
        if pending.dvc_add:
            ws.run([*DVC, "add", *pending.dvc_add])
        ws.git("add", "-A", "--", *(p for p in pending.paths if ws.path(p).exists()))
        if ws.git("diff", "--cached", "--name-only").strip():
            ws.git("commit", "--quiet", "--no-verify", "-m", pending.message)
