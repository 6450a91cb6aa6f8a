"""The steps of an attempt, each idempotent or journalled (``ml.driver.journal``), and the state they read and write.

``AttemptSteps`` is the repository (``ml.driver.workspace.Workspace``) with the steps
``ml.driver.orchestrator.Loop.run_attempts`` takes in turn (that module's docstring says what
each does): ``begin``, ``ensure_data_dirs``, ``promote``, ``repro``, ``finish`` (with ``rate``),
and ``commit_pending`` for an attempt a kill left uncommitted; beside them the state files, the
journalled commits and the dashboard's status and control file.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from datetime import datetime
from pathlib import Path
from typing import NamedTuple, cast

from ruamel.yaml import YAML

from ml.base.io import JSONValue, atomic_write_text, read_json
from ml.config.curriculum import Overrides
from ml.config.params import Params, load_params
from ml.data.merge import promote_folders
from ml.driver import generations, history, transitions
from ml.driver.dataguard import refuse_foreign_data, refuse_removed_inputs
from ml.driver.dvc_status import pipeline_status
from ml.driver.feedback import suggest
from ml.driver.journal import PENDING_COMMIT, Journal, Step
from ml.driver.params_file import attempt_params_text, overrides_text
from ml.driver.promotion import PROMOTED, TRACKED_INPUTS
from ml.driver.state import (
    POLL_S,
    AttemptLog,
    HistoryEntry,
    InFlight,
    LoopState,
    clear_control,
    read_control,
    sha256_file,
    write_status,
)
from ml.driver.torn import restore_torn
from ml.driver.workspace import DVC, LoopError, Workspace
from ml.game.checks import check_params
from ml.judge.elo import PLAYED_FILE, EloEntry, PlayedTournament, format_table, record_tournament
from ml.judge.verdict import GateVerdict, deciding_checks


class Repro(NamedTuple):
    """What ``Loop.repro`` ran: wall seconds per stage that actually ran, and whether the
    self-play stage aborted the attempt (``abort_if``: it ends as a failed attempt)."""

    stage_wall_s: dict[str, float]
    aborted: bool


class AttemptSteps(Workspace):
    """The steps of an attempt in the repository ``root`` (``ml.driver.orchestrator.Loop`` runs them).

    Raises:
        LoopError: ``root`` is not a git repository.

    Attributes:
        max_generations: the generation limit of this run (``--max-generations`` or
            ``loop.max_generations``), reported in ``status.json``; None until it runs.
    """

    max_generations: int | None = None

    def __init__(self, root: Path, echo: Callable[[str], None] = print) -> None:
        super().__init__(root, echo)
        self.journal = Journal(self)
        """The records of the steps done once (``ml.driver.journal``)."""

    def load_state(self) -> LoopState:
        """``state/curriculum_state.json`` (``ml.driver.history.load_state``).

        Raises:
            LoopError: the file cannot be read or does not validate.
        """
        return history.load_state(self.root)

    def save_state(self, state: LoopState) -> None:
        """Write ``state/curriculum_state.json`` (atomic)."""
        history.save_state(self.root, state)

    def load_history(self, state: LoopState) -> list[HistoryEntry]:
        """``state/eval_history.json`` (``ml.driver.history.load_history``).

        Raises:
            LoopError: missing while ``state`` records finished attempts, or unreadable.
        """
        return history.load_history(self.root, state)

    def uncommitted_log(self, state: LoopState) -> bool:
        """Whether the state's last log entry has no commit at HEAD (a kill came between its state
        write and its commit): ``ml.driver.journal.Journal.uncommitted``."""
        return self.journal.uncommitted(state)

    def committing(
        self, message: str, paths: list[str], dvc_add: tuple[str, ...] = ()
    ) -> AbstractContextManager[dict[str, str]]:
        """Journal the writes of the block and their commit (``ml.driver.journal.Journal.committing``)."""
        return self.journal.committing(message, paths, dvc_add)

    def restore_torn_dvc_files(self) -> None:
        """``ml.driver.torn.restore_torn`` of this repository, before any DVC command reads the files: the
        loop's work is in progress when an attempt is in flight or a journalled commit is pending."""
        in_progress = self.load_state().in_flight is not None or self.path(PENDING_COMMIT).exists()
        restore_torn(self.root, self.head_bytes, in_progress, self.echo)

    def finish_pending_commit(self) -> None:
        """Complete a journalled commit that a kill interrupted (``ml.driver.journal.Journal.finish_pending_commit``)."""
        self.journal.finish_pending_commit()

    def ensure_data_dirs(self) -> None:
        """Create and ``dvc add`` the empty input folders (``TRACKED_INPUTS``) a fresh clone has no pointer of.

        Raises:
            LoopError: a missing pointer was removed by a commit or deleted from the work tree
                (``ml.driver.dataguard.refuse_removed_inputs``); nothing is made.
        """
        missing = [name for name in TRACKED_INPUTS if not self.path(f"data/{name}.dvc").exists()]
        if missing:
            refuse_removed_inputs(self.root)
        for name in missing:
            self.path(f"data/{name}").mkdir(parents=True, exist_ok=True)
        if missing:
            self.seam("data_dirs")
            self.run([*DVC, "add", *(f"data/{n}" for n in missing)])

    def begin(self, state: LoopState) -> InFlight:
        """Start (or resume) the in-flight attempt; writes state first, then params.yaml.

        A resumed attempt whose params.yaml was changed by a commit (``git commit params.yaml``,
        the dashboard's overrides) goes on with the committed params, and says so.

        Raises:
            ParamsError: params.yaml is not valid YAML.
        """
        self.seam_prefix = f"g{state.generation:03d}"
        if state.in_flight is None:
            stamp = datetime.now().strftime("%Y%m%d-%H%M")
            attempt_id = f"{stamp}-gen{state.generation:03d}-a{state.attempt}"
            text = attempt_params_text(self.path("params.yaml"), state.generation, state.attempt, state.nudges)
            state.in_flight = InFlight(
                attempt_id=attempt_id, generation=state.generation, attempt=state.attempt,
                params_sha256=hashlib.sha256(text.encode()).hexdigest(), started_at=datetime.now().isoformat(timespec="seconds"),
                nudges=state.nudges,
            )  # fmt: skip
            state.nudges = {}
            state.status = "running"
            self.seam("begin")
            self.save_state(state)
            self.seam("begin.state")
        flight = state.in_flight
        params = self.path("params.yaml")
        if sha256_file(params) != flight.params_sha256:
            text = attempt_params_text(params, flight.generation, flight.attempt, flight.nudges)
            atomic_write_text(params, text)
            if (sha := hashlib.sha256(text.encode()).hexdigest()) != flight.params_sha256:
                self.echo(f"params.yaml was changed by a commit while {flight.attempt_id} was in flight: it resumes with them")
                flight.params_sha256 = sha
                self.save_state(state)
            self.seam("begin.params")
        return flight

    def set_params(self, overrides: Overrides, message: str) -> None:
        """Write ``overrides`` (section -> key -> value) into params.yaml, comments kept, and commit
        (``ml.driver.params_file.overrides_text``, the one writer of params.yaml).

        Raises:
            ParamsError: params.yaml is not valid YAML, or the result does not validate (nothing is written).
        """
        path = self.path("params.yaml")
        text, _ = overrides_text(path, overrides)
        with self.committing(message, ["params.yaml"]):
            atomic_write_text(path, text)

    def promote(self, flight: InFlight) -> None:
        """Make the last merge's outputs the inputs of this attempt, once (journalled).

        Runs only before the attempt's first stage (``InFlight.promoted`` unset): then
        ``data/merged`` is still the previous attempt's merge output. Each folder is replaced
        (by hard links to the merged files, ``ml.data.merge.promote_folders``) only when it differs, and all
        of them are ``dvc add``-ed every time, so a run killed or failed between the links and
        ``dvc add`` converges to pointers that match the data. A file counts as unchanged when it
        is the same file (a link: no read), so the cost does not grow with the pool, and the
        unchanged files keep their inode and mtime: DVC's hash state answers for them (no
        rehash). Once done, it is recorded (``ml.driver.journal.Step.PROMOTE``); a resumed attempt
        never promotes its own merge output.

        Raises:
            ml.base.io.WriteError: a promoted folder cannot be written (``ml.data.merge.promote_folders``:
                the folder, the step and its path named; not flagged promoted, so the next run
                promotes again).
            LoopError: ``dvc add`` failed (DVC's own message); or a promoted folder holds a file
                added or edited by hand (``ml.driver.promotion.refuse_hand_made``), or a DVC-tracked
                file differs from its record (``ml.driver.dataguard.refuse_changed_data``); no data
                changed; loop.py checks both at start, so they are met here only for a change made
                while the loop was running.
        """
        if self.journal.done(Step.PROMOTE, flight.attempt_id):
            return
        merged = self.path("data/merged")
        refuse_foreign_data(self.root, promotion_pending=True)
        if merged.is_dir():
            promote_folders(merged, self.path("data"), PROMOTED, before_swap=lambda name: self.seam(f"promote.copy.{name}"))
        self.seam("promote.dvc_add")
        self.run([*DVC, "add", *(f"data/{name}" for name in PROMOTED)], label="promote.dvc_add")
        self.seam("promote.added")
        self.journal.record_promoted(flight.attempt_id)
        flight.promoted = True

    def stages(self) -> list[str]:
        """Stage names of ``dvc.yaml`` in pipeline order."""
        return list(YAML(typ="safe").load(self.path("dvc.yaml").read_text(encoding="utf-8"))["stages"])

    def up_to_date_prefix(self, stages: list[str]) -> int:
        """How many of ``stages`` (pipeline order), from the first, DVC's status finds unchanged:
        one status of the whole pipeline (``ml.driver.dvc_status.pipeline_status``), where checking
        each stage with ``dvc repro --single-item`` starts DVC once a stage.

        Raises:
            LoopError: DVC could not read the pipeline.
        """
        changed = pipeline_status(self.root)
        return next((i for i, stage in enumerate(stages) if stage in changed), len(stages))

    def repro(self, flight: InFlight, resumed: bool = False) -> Repro | None:
        """Reproduce the pipeline one stage at a time (``dvc repro --single-item``).

        A resumed attempt (``resumed``) in which a stage ran skips the stages before the first
        stage DVC's status finds changed (``up_to_date_prefix``): what ``dvc repro`` would find
        up to date, asked once for all instead of one DVC start (1.3-1.5 s on a tiny run) each.

        Between stages it honours the control file: ``pause`` waits, ``stop`` returns None
        (the attempt stays in flight; the next start resumes it). A self-play stage that
        aborted (``selfplay/aborted`` in its metrics) ends the pipeline there.

        Returns:
            The wall seconds per stage that actually ran and whether the attempt aborted;
            None when stopped.

        Raises:
            LoopError: a stage failed (the attempt stays in flight); or a file of the loop's
                data folders was added or edited by hand (``ml.driver.promotion.refuse_hand_made``),
                or a DVC-tracked file differs from its record (``ml.driver.dataguard.refuse_changed_data``).
        """
        times: dict[str, float] = {}
        stages = self.stages()
        done = self.up_to_date_prefix(stages) if resumed and flight.stage_wall_s else 0  # a stage of it ran
        if done:  # the guard once for the stages skipped: nothing is written between them
            refuse_foreign_data(self.root, promotion_pending=False)
        for i, stage in enumerate(stages):
            if i < done:  # their seams stand where a run that asks DVC has them
                self.seam(f"repro.{stage}")
                self.seam(f"repro.{stage}.done")
                continue
            if self.wait_while_paused(flight) == "stop":
                return None
            self.write_status("running", flight, stage=stage, stage_index=i, stages=[*stages])
            refuse_foreign_data(self.root, promotion_pending=False)
            self.seam(f"repro.{stage}")
            _, stage_times = self.run_timed([*DVC, "repro", "--single-item", stage])
            self.seam(f"repro.{stage}.done")
            times.update(stage_times)
            self._record_stage_times(stage_times)
            if stage == "selfplay" and read_json(self.path("metrics/selfplay.json")).get("selfplay/aborted"):
                return Repro(times, aborted=True)  # abort_if: the attempt ends here as a failed attempt
        return Repro(times, aborted=False)

    def _record_stage_times(self, times: dict[str, float]) -> None:
        """Add a stage's wall time to the in-flight attempt, so a resumed attempt keeps the
        time its stages took before the interruption."""
        if not times:
            return
        state = self.load_state()
        if state.in_flight is not None:
            for name, sec in times.items():
                state.in_flight.stage_wall_s[name] = round(state.in_flight.stage_wall_s.get(name, 0.0) + sec, 1)
            self.save_state(state)

    def write_status(self, status: str, flight: InFlight | None = None, **extra: JSONValue) -> None:
        """Write the runtime ``status.json`` for the dashboard, with the run's generation limit."""
        if self.max_generations is not None:
            extra.setdefault("max_generations", self.max_generations)
        write_status(self.root, status, flight, **extra)

    def wait_while_paused(self, flight: InFlight | None) -> str | None:
        """Block while the control file says ``pause``; returns ``stop`` if asked to stop."""
        announced = False
        while (cmd := read_control(self.root)) == "pause":
            if not announced:
                self.write_status("paused", flight)
                self.echo("paused (resume from the dashboard or POST /api/ml/distill/resume)")
                announced = True
            time.sleep(POLL_S)
        if cmd == "stop":
            clear_control(self.root)
            self.write_status("stopped", flight)
            return "stop"
        return None

    def finish(
        self, state: LoopState, flight: InFlight, wall_s: float, stage_wall_s: dict[str, float], aborted: bool = False
    ) -> AttemptLog:
        """Record the attempt (history, ratings, ledger), advance the state and commit (idempotent).

        Args:
            state: the state with ``flight`` in flight.
            flight: the attempt whose stages ran.
            wall_s: wall seconds of this run of the attempt.
            stage_wall_s: wall seconds per stage that ran in this run (``Repro.stage_wall_s``).
            aborted: the self-play stage aborted the attempt (``Repro.aborted``).

        Returns:
            The attempt's log entry.

        Raises:
            LoopError: the history cannot be read (``load_history``); nothing is recorded.
        """
        params = load_params(self.path("params.yaml"), check=check_params)
        abort_reason = read_json(self.path("metrics/selfplay.json")).get("selfplay/aborted") if aborted else None
        gate = {} if abort_reason else read_json(self.path("metrics/gate.json"))
        verdict = GateVerdict.from_metrics(gate) if gate else None
        accepted = verdict is not None and verdict.accepted
        ran = history.stages_run(self.root, self.head_bytes("dvc.lock"))
        entry = history.attempt_entry(self.root, state, flight, verdict, abort_reason, wall_s, stage_wall_s, ran)
        attempts = self.load_history(state)  # before the tournament: a lost history stops here
        if warning := generations.version_warning(attempts, history.all_metrics(self.root), flight.attempt_id):
            self.echo(warning)
        elo = self.rate(flight, params) if accepted else None
        self.seam("finish.rated")
        if elo and elo.get("gain"):
            entry.figures["elo_gain"] = cast("JSONValue", elo["gain"])  # a GainRow: plain JSON
        # the steps done once, in the order of ml.driver.journal: history, ledger, state, commit
        attempts = self.journal.add_history(
            attempts, history.history_entry(entry, flight.nudges, history.all_metrics(self.root))
        )
        generations.write_generations(self.root, attempts, history.elo_history(self.root))  # rebuilt: idempotent
        if not self.journal.done(Step.STATE, flight.attempt_id):
            state.log.append(entry)
            elo_history = history.elo_history(self.root)
            state = transitions.after_attempt(state, flight.generation, flight.attempt, accepted, params, elo_history)
            if not accepted and state.status == "running" and params.loop.suggest_on_retry and verdict is not None:
                train = read_json(self.path("metrics/train.json"))
                failed = [c for c in verdict.failed if c in deciding_checks(params.gate.decide_by)]
                state.nudges = suggest(failed, params.model_dump(mode="json"), train if isinstance(train, dict) else None)
        state.in_flight = None
        # the ledger's outcome is the new state's: the line is written before the state that ends the attempt
        outcome = "blocked" if state.status == "blocked" else "rejected" if abort_reason else entry.verdict
        self.journal.add_ledger(history.ledger_record(flight, params, gate, abort_reason, outcome))
        self.journal.end_attempt(state)
        self.journal.commit_last(state)
        self.push()
        return entry

    def commit_pending(self, state: LoopState) -> None:
        """Commit the state's last log entry if a kill came between its state write and its commit
        (``ml.driver.journal.Journal.commit_last``)."""
        if state.in_flight is None and self.uncommitted_log(state):
            self.seam_prefix = f"g{state.log[-1].generation:03d}"
            self.journal.commit_last(state)

    def rate(self, flight: InFlight, params: Params) -> EloEntry:
        """Record the ``rate`` stage's tournament of an accepted generation (``data/tournament.json``)
        and refit all ratings (idempotent: ``ml.judge.elo.record_tournament``).

        Returns:
            The refit's entry of ``state/elo_history.json`` (``table`` in Elo, ``gain``).

        Raises:
            LoopError: ``data/tournament.json`` is another generation's (the stage did not run).
            ml.base.io.DataFileError: it or a state file of the ratings is damaged.
        """
        played = PlayedTournament.read(self.path(PLAYED_FILE))
        if played.generation != flight.generation or not played.accepted:
            raise LoopError(
                f"{PLAYED_FILE} is not the tournament of {flight.attempt_id}: run `dvc repro rate` and start again"
            )
        entry = record_tournament(self.root, flight.attempt_id, played, prior_sigma_elo=params.rating.prior_sigma_elo)
        if entry["table"]:
            self.echo(format_table(entry))
        return entry
