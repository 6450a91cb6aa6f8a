"""The unattended driver behind ``loop.py``: one committed attempt at a time, resumable.

``Loop.run_attempts`` runs attempts until the run is done, blocked or stopped. An attempt goes
through these steps; each is idempotent, so a run killed anywhere (Ctrl-C, ``kill -9``) and
started again converges to the same commits and data (what is done once, its record and what a
kill between two steps leaves: ``ml.driver.journal``):

1. ``begin``: pick (generation, attempt), record it as in flight in
   ``state/curriculum_state.json`` together with the hash of the params it will use,
   then write the ``run`` section of ``params.yaml`` (generation, attempt, seed).
2. ``promote``: hard-link the previous attempt's ``data/merged/<name>`` folders (``PROMOTED``)
   to ``data/<name>`` and ``dvc add`` them (a DVC pipeline cannot feed its own
   input; design.md "Things that bite").
3. ``dvc repro``: DVC skips stages whose deps and params did not change and re-runs the
   one that was interrupted.
4. ``finish``: read the verdict in ``metrics/gate.json``, append the attempt to
   ``state/eval_history.json`` (``HistoryEntry``), the ledger and the state's log (keyed by
   attempt id, never twice), move on (next generation, a retry, or ``blocked``), then
   ``git commit`` params, ``dvc.lock``, DVC pointer files, metrics and state with an
   ``Attempt-Id:`` trailer.

Only the paths in ``OWNED_PATHS`` may be dirty when the loop starts, and only while an
attempt is in flight or uncommitted; ``params.yaml`` must still be what the loop wrote. The
one exception: params.yaml edited by hand between attempts (nothing in flight), alone, is
validated and committed by the loop as its own commit ``params: <changes>`` before the next
attempt (``Loop.commit_params_edit``), so each attempt's commit holds only the loop's changes.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable

from ml.config.params import Params, load_params
from ml.driver import history, transitions
from ml.driver.feedback import LEDGER, read_ledger
from ml.driver.params_edit import commit_params_edit, in_flight_edit_refusal
from ml.driver.phases import enter_phase
from ml.driver.state import STATE_FILE, AttemptLog, LoopState, read_run_limit, sha256_file, write_run_limit
from ml.driver.steps import AttemptSteps
from ml.driver.workspace import OWNED_PATHS, LoopError


class Loop(AttemptSteps):
    """Drives attempts in the repository ``root`` (the current directory by default): the checks
    at start and the attempt loop over the steps of ``ml.driver.steps.AttemptSteps``.

    Raises:
        LoopError: ``root`` is not a git repository.
    """

    def check_records(self, state: LoopState) -> None:
        """At start: the history and the ledger are there and readable when attempts were run.

        Raises:
            LoopError: as ``load_history``; or ``state/feedback.jsonl`` is missing while attempts
                were run. Bad ledger lines are reported (file:line) and left in place.
        """
        self.load_history(state)
        ledger = self.path(LEDGER)
        if not ledger.exists() and any(e.verdict != "override" for e in state.log):
            raise LoopError(
                f"{LEDGER} is missing, but {STATE_FILE} records finished attempts.\n{history.RESTORE_HINT.format(path=LEDGER)}"
            )
        for problem in read_ledger(ledger)[1]:
            self.echo(f"{LEDGER}:{problem.line}: unreadable ledger line left in place ({problem.error})")

    # ------------------------------------------------------------------ the attempt loop
    def say(self, line: str) -> None:
        """A line of the run's progress for a person (``echo``), flushed so that it keeps its
        place among the stages' streamed output."""
        self.echo(line)
        sys.stdout.flush()

    def run_attempts(
        self, max_generations: int | None = None, max_attempts: int | None = None, on_done: Callable[[], None] = lambda: None
    ) -> int:
        """Attempts until done, blocked, stopped or ``max_attempts``; returns the exit status.

        A run keeps its ``--max-generations`` until it is done (``ml.driver.state.RUN_FILE``):
        started again without one (``python loop.py``, as an interrupted, stopped or blocked run
        says), it resumes with that limit. A start that resumes an attempt in flight, or a run
        with a kept limit, says so first in one line (``resume_line``).

        Each pass: commit a finished attempt a kill left uncommitted, stop when blocked or done,
        then ``begin``, ``ensure_data_dirs``, ``promote``, ``repro`` and ``finish`` the attempt
        in flight (module docstring; what is done once: ``ml.driver.journal``).

        Args:
            max_generations: accepted generations to stop at (None: the limit the run it resumes
                was started with, else ``loop.max_generations``).
            max_attempts: attempts to run in this call at most (None: no limit).
            on_done: called once the run is done (``loop.py``'s final report).

        Returns:
            0 (done, stopped, ``max_attempts`` reached) or 3 (blocked, waits for an override).

        Raises:
            LoopError: a step failed (the attempt stays in flight; the next run resumes it); or
                the attempt in flight is of a generation past the limit (nothing is run).
            ParamsError: params.yaml does not validate.
        """
        kept = read_run_limit(self.root)
        resumed = max_generations is None and kept is not None
        limit = max_generations or kept
        source = (f"--max-generations {limit}" if limit else "loop.max_generations") + (
            " of the run it resumes" if resumed else ""
        )
        ran = 0
        while True:
            state = self.load_state()
            params = load_params(self.path("params.yaml"))
            max_gen = self.max_generations = limit or params.loop.max_generations
            self.commit_pending(state)  # killed between the state write and its commit
            if ran == 0:  # this call's first pass: what it resumes, and the limit it keeps
                self._resume(state, params, max_gen, source, resumed)
                if limit != kept:
                    write_run_limit(self.root, kept := limit)
            if state.in_flight is None:
                status = self._between_attempts(state, params, (max_gen, ran, max_attempts), on_done)
                if status is not None:
                    return status
            if self.wait_while_paused(state.in_flight) == "stop":
                self.say("stopped on request; run `python loop.py` to go on.")
                return 0
            started = time.perf_counter()
            resuming = state.in_flight is not None
            if state.in_flight is None:
                state = enter_phase(self, state, params)
            flight = self.begin(state)
            self.ensure_data_dirs()  # in flight: a kill inside it leaves changes the next start knows as its own
            self.say(f"== attempt {flight.attempt_id}: gen {flight.generation:03d} attempt {flight.attempt}")
            self.promote(flight)
            ran_stages = self.repro(flight, resumed=resuming)
            if ran_stages is None:
                self.say(f"stopped on request during {flight.attempt_id}; run `python loop.py` to resume it.")
                return 0
            wall_s = time.perf_counter() - started
            entry = self.finish(self.load_state(), flight, wall_s, ran_stages.stage_wall_s, ran_stages.aborted)
            ran += 1
            self.say(attempt_line(entry))

    def _resume(self, state: LoopState, params: Params, max_gen: int, source: str, resumed: bool) -> None:
        """Say what this start resumes (``resume_line``): an attempt in flight, or a run with a kept
        ``--max-generations`` (``resumed``); refuse an attempt in flight past ``max_gen`` (from ``source``).

        Raises:
            LoopError: the attempt in flight is of a generation past the limit (it would be accepted beyond it).
        """
        flight = state.in_flight
        if flight is not None and not params.curriculum and (done := transitions.accepted_generations(state)) >= max_gen:
            raise LoopError(
                f"attempt {flight.attempt_id} is in flight, but {done} generations are accepted already and the limit is "
                f"{max_gen} ({source}); to finish it: python loop.py --max-generations {done + 1}"
            )
        if flight is not None or resumed:
            self.say(resume_line(state, params, max_gen, source))

    def _between_attempts(
        self, state: LoopState, params: Params, limits: tuple[int, int, int | None], on_done: Callable[[], None]
    ) -> int | None:
        """With nothing in flight: the exit status when the run ends here (blocked 3; done, then
        ``on_done``, or ``max_attempts`` reached 0), status.json written; None to start the next
        attempt. ``limits``: (generations to stop at, attempts run so far, ``max_attempts``)."""
        max_gen, ran, max_attempts = limits
        if state.status == "blocked":
            self.say(
                f"BLOCKED: gen {state.generation:03d} was rejected {state.failures} times "
                f"(loop.max_retries = {params.loop.max_retries}). Last reasons: {'; '.join(state.log[-1].reasons)}.\n"
                "Fix the cause, then run `python loop.py --force-retry`, or `python loop.py --skip-to-next-stage`."
            )
            self.write_status("blocked", generation=state.generation, attempt=state.attempt)
            return 3
        if (done := transitions.finished(state, params, max_gen)) is not None:
            enter_phase(self, state, params)  # after a curriculum: params.yaml back to its base values
            write_run_limit(self.root, None)  # the run is over: the next one starts from loop.max_generations
            self.say(f"done: {done[0]}.{done[1]}")
            self.write_status("done", generation=state.generation, attempt=state.attempt)
            on_done()
            return 0
        if max_attempts is not None and ran >= max_attempts:
            self.write_status("stopped", generation=state.generation, attempt=state.attempt)
            return 0
        return None

    # ------------------------------------------------------------------ checks

    def check_tree(self, state: LoopState) -> None:
        """Refuse a work tree with changes the loop did not make (see module docstring).

        Untracked files outside the loop's paths (``loop.log``, notes) are left alone: the
        loop never commits them. Changes to tracked files are refused; an edit of params.yaml
        alone between attempts was committed before (``commit_params_edit``).

        Raises:
            LoopError: naming the changed paths, or ``params.yaml`` edited (not committed)
                while an attempt is in flight: naming the changed values and the command that
                resumes the attempt with them.
        """
        foreign, owned = self.tree_changes()
        ours_pending = state.in_flight is not None or self.uncommitted_log(state)
        if foreign or (owned and not ours_pending):
            listed = "\n  ".join(foreign or owned)
            raise LoopError(
                "the work tree has changes the loop did not make:\n  "
                f"{listed}\ncommit or revert them first (the loop commits every attempt and must not sweep your edits into it)."
            )
        if state.in_flight is not None:
            params = self.path("params.yaml")
            if sha256_file(params) != state.in_flight.params_sha256 and params.read_bytes() != self.head_bytes("params.yaml"):
                raise LoopError(in_flight_edit_refusal(self, state.in_flight))

    def tree_changes(self) -> tuple[list[str], list[str]]:
        """(tracked paths changed outside ``OWNED_PATHS``, paths changed or added inside them)."""
        changes = self.changes()
        foreign = [p for code, p in changes if not p.startswith(OWNED_PATHS) and code != "??"]
        return foreign, [p for _, p in changes if p.startswith(OWNED_PATHS)]

    def commit_params_edit(self, state: LoopState) -> str | None:
        """``ml.driver.params_edit.commit_params_edit`` of this loop: a hand edit of params.yaml
        between attempts committed alone, before the next attempt; the subject or None."""
        return commit_params_edit(self, state)


def resume_line(state: LoopState, params: Params, max_generations: int, source: str) -> str:
    """The line a run that resumes says first: the attempt in flight (or the next one) and where
    the run stops, ``max_generations`` with ``source`` (where the limit comes from), or the
    curriculum's end."""
    if (flight := state.in_flight) is not None:
        what = f"attempt {flight.attempt_id} (gen {flight.generation:03d} attempt {flight.attempt})"
    else:
        what = f"the run at gen {state.generation:03d} attempt {state.attempt}"
    if phases := params.curriculum:
        until = f"until its curriculum ends (phase {min(state.phase, len(phases) - 1) + 1} of {len(phases)})"
    else:
        until = f"until {max_generations} generations are accepted ({source})"
    return f"resuming {what}, {until}"


def attempt_line(entry: AttemptLog) -> str:
    """The line ``loop.py`` prints when an attempt is finished: its verdict and headline figures
    (``AttemptLog.figures``), or an aborted attempt's reason; its episodes and wall seconds."""
    f = entry.figures
    stages = ", ".join(f"{k} {v:.0f}s" for k, v in entry.stage_wall_s.items()) or "no stage re-ran"
    if entry.verdict == "aborted":
        return f"== {entry.attempt_id}: ABORTED  {entry.reasons[0]}; wall {entry.wall_s:.0f}s"
    chips = (
        f"PPO chips {f['mean_return']:+.3f} [{f['return_low']:+.3f}, {f['return_high']:+.3f}], " if "mean_return" in f else ""
    )
    return (
        f"== {entry.attempt_id} [{entry.phase}]: {entry.verdict.upper()}  {chips}PPO win {f['win_rate']:.3f} "
        f"[{f['win_rate_low']:.3f}, {f['win_rate_high']:.3f}] on {f['eval_games']} games (SPRT LLR {f['sprt_llr']:.2f}), "
        f"holdout acc {f['holdout_accuracy']:.3f}; {entry.episodes or 0} episodes; wall {entry.wall_s:.0f}s ({stages})"
    )
