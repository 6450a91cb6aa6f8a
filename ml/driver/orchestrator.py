"""The unattended driver behind ``loop.py``: one committed attempt at a time, resumable.

An attempt goes through these steps; each is idempotent, so a run killed anywhere
(Ctrl-C, ``kill -9``) and started again converges to the same commits and data:

1. ``begin``: pick (generation, attempt), record it as in flight in
   ``state/curriculum_state.json`` together with the hash of the params it will use,
   then write the ``run`` section of ``params.yaml`` (generation, attempt, seed).
2. ``promote``: copy the previous attempt's ``data/merged/{pool,rejected,frozen,students}`` to
   ``data/{pool,rejected,frozen,students}`` and ``dvc add`` them (a DVC pipeline cannot feed its own
   input; design.md "Things that bite").
3. ``dvc repro``: DVC skips stages whose deps and params did not change and re-runs the
   one that was interrupted.
4. ``finish``: read the verdict in ``metrics/gate.json``, append the attempt to
   ``state/eval_history.json`` and the state's log (keyed by attempt id, never twice),
   move on (next generation, a retry, or ``blocked``), then ``git commit`` params,
   ``dvc.lock``, DVC pointer files, metrics and state with an ``Attempt-Id:`` trailer.

Only the paths in ``OWNED_PATHS`` may be dirty when the loop starts, and only while an
attempt is in flight or uncommitted; ``params.yaml`` must still be what the loop wrote.
"""

from __future__ import annotations

import hashlib
from io import StringIO
import logging
import shutil
import time
from datetime import datetime
from pathlib import Path

from ruamel.yaml import YAML

from ml.driver.curriculum import opponent_fallback, phase_overrides
from ml.game.registry import make_game
from pydantic import ValidationError

from ml.io import DataFileError, atomic_write_json, atomic_write_text, read_json
from ml.driver.feedback import LEDGER, FeedbackRecord, append_record, get_dotted, read_ledger, suggest
from ml.driver.feedback import now as feedback_now
from ml.params import Params, attempt_seed, load_params, params_from_dict
from ml.policy import load_policy
from ml.ratings import ELO_FILE, converged, format_table, rate_generation
from ml.driver.state import (
    HISTORY_FILE,
    POLL_S,
    STATE_FILE,
    AttemptLog,
    InFlight,
    LoopState,
    clear_control,
    read_control,
    sha256_file,
    write_status,
)
from ml.driver.workspace import DVC, OWNED_PATHS, LoopError, Workspace

logger = logging.getLogger(__name__)

PROMOTED = ("pool", "rejected", "frozen", "students")
TRACKED_INPUTS = (*PROMOTED, "seed", "forge")
"""DVC-tracked input folders created empty on a fresh clone (``seed`` holds a --seed-checkpoint)."""


class Loop(Workspace):
    """Drives attempts in the repository ``root`` (the current directory by default).

    Raises:
        LoopError: ``root`` is not a git repository.
    """

    def __init__(self, root: Path, echo=print) -> None:
        super().__init__(root, echo)
        self.aborted = False

    # ------------------------------------------------------------------ state files
    def load_state(self) -> LoopState:
        """``state/curriculum_state.json``, or a fresh state when the file is absent.

        Raises:
            LoopError: the file cannot be read or does not validate (named, with how to restore it).
        """
        p = self.path(STATE_FILE)
        if not p.exists():
            return LoopState()
        try:
            return LoopState.model_validate(read_json(p))
        except (DataFileError, ValidationError) as e:
            raise LoopError(f"{STATE_FILE} cannot be read: {_first_line(e)}\n{RESTORE_HINT.format(path=STATE_FILE)}") from e

    def save_state(self, state: LoopState) -> None:
        atomic_write_json(self.path(STATE_FILE), state.model_dump(mode="json"))

    def load_history(self, state: LoopState) -> list[dict]:
        """``state/eval_history.json``: every finished attempt with its metrics.

        Raises:
            LoopError: the file is missing while ``state`` records finished attempts, or it
                cannot be read. Never an empty history in place of a lost one.
        """
        p = self.path(HISTORY_FILE)
        if not p.exists():
            if any(e.verdict != "override" for e in state.log):
                raise LoopError(
                    f"{HISTORY_FILE} is missing, but {STATE_FILE} records {len(state.log)} finished attempts.\n"
                    + RESTORE_HINT.format(path=HISTORY_FILE)
                )
            return []
        try:
            history = read_json(p)
        except DataFileError as e:
            raise LoopError(f"{e}\n{RESTORE_HINT.format(path=HISTORY_FILE)}") from e
        if not isinstance(history, list):
            raise LoopError(f"{HISTORY_FILE}: expected a JSON list of attempts\n{RESTORE_HINT.format(path=HISTORY_FILE)}")
        return history

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
                f"{LEDGER} is missing, but {STATE_FILE} records finished attempts.\n{RESTORE_HINT.format(path=LEDGER)}"
            )
        for problem in read_ledger(ledger)[1]:
            self.echo(f"{LEDGER}:{problem.line}: unreadable ledger line left in place ({problem.error})")

    # ------------------------------------------------------------------ checks

    def check_tree(self, state: LoopState) -> None:
        """Refuse a work tree with changes the loop did not make (see module docstring).

        Untracked files outside the loop's paths (``loop.log``, notes) are left alone: the
        loop never commits them. Changes to tracked files are refused.

        Raises:
            LoopError: naming the changed paths, or ``params.yaml`` edited (not committed)
                while an attempt is in flight.
        """
        changes = self.changes()
        foreign = [p for code, p in changes if not p.startswith(OWNED_PATHS) and code != "??"]
        owned = [p for _, p in changes if p.startswith(OWNED_PATHS)]
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
                raise LoopError(
                    f"params.yaml was edited while attempt {state.in_flight.attempt_id} was in flight; "
                    "revert it (git checkout params.yaml) so the attempt can resume, then commit your change after it."
                )

    def uncommitted_log(self, state: LoopState) -> bool:
        return bool(state.log) and state.log[-1].attempt_id not in self.head_attempt_ids()

    # ------------------------------------------------------------------ attempt steps
    def ensure_data_dirs(self) -> None:
        """Create and ``dvc add`` empty ``data/{pool,rejected,frozen,students}`` on a fresh clone."""
        missing = [name for name in TRACKED_INPUTS if not self.path(f"data/{name}.dvc").exists()]
        for name in missing:
            self.path(f"data/{name}").mkdir(parents=True, exist_ok=True)
        if missing:
            self.run([*DVC, "add", *(f"data/{n}" for n in missing)])

    def begin(self, state: LoopState) -> InFlight:
        """Start (or resume) the in-flight attempt; writes state first, then params.yaml.

        A resumed attempt whose params.yaml was changed by a commit (``git commit params.yaml``,
        the dashboard's overrides) goes on with the committed params, and says so.
        """
        self.seam_prefix = f"g{state.generation:03d}"
        if state.in_flight is None:
            stamp = datetime.now().strftime("%Y%m%d-%H%M")
            attempt_id = f"{stamp}-gen{state.generation:03d}-a{state.attempt}"
            text = self._params_text(state.generation, state.attempt, state.nudges)
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
            text = self._params_text(flight.generation, flight.attempt, flight.nudges)
            atomic_write_text(params, text)
            if (sha := hashlib.sha256(text.encode()).hexdigest()) != flight.params_sha256:
                self.echo(f"params.yaml was changed by a commit while {flight.attempt_id} was in flight: it resumes with them")
                flight.params_sha256 = sha
                self.save_state(state)
            self.seam("begin.params")
        return flight

    def _params_text(self, generation: int, attempt: int, nudges: dict | None = None) -> str:
        """params.yaml with the ``run`` section set for (generation, attempt) and the suggester's
        ``nudges`` (dotted key -> value) applied, comments kept."""
        yaml = YAML()
        yaml.preserve_quotes = True
        yaml.width = 4096  # never re-wrap the user's long lines
        data = yaml.load(self.path("params.yaml").read_text(encoding="utf-8"))
        base_seed = int(data.get("base", {}).get("seed", 0))
        data["run"] = {"generation": generation, "attempt": attempt, "seed": attempt_seed(base_seed, generation, attempt)}
        for key, value in (nudges or {}).items():
            *parents, leaf = key.split(".")
            node = data
            for part in parents:
                node = node[part]
            node[leaf] = value
        buf = StringIO()
        yaml.dump(data, buf)
        return buf.getvalue()

    def set_params(self, overrides: dict[str, dict], message: str) -> None:
        """Write ``overrides`` (section -> key -> value) into params.yaml, comments kept, and commit.

        Raises:
            ParamsError: the result does not validate (nothing is written).
        """
        yaml = YAML()
        yaml.width = 4096
        path = self.path("params.yaml")
        data = yaml.load(path.read_text(encoding="utf-8"))
        for section, values in overrides.items():
            for key, value in values.items():
                data.setdefault(section, {})[key] = value
        buf = StringIO()
        yaml.dump(data, buf)
        params_from_dict(YAML(typ="safe").load(buf.getvalue()), source=str(path))
        with self.committing(message, ["params.yaml"]):
            atomic_write_text(path, buf.getvalue())

    def promote(self, flight: InFlight) -> None:
        """Make the last merge's outputs the inputs of this attempt, once (journalled).

        Runs only before the attempt's first stage (``InFlight.promoted`` unset): then
        ``data/merged`` is still the previous attempt's merge output. Each folder is copied
        only when it differs, and all of them are ``dvc add``-ed every time, so a run killed
        or failed between the copy and ``dvc add`` converges to pointers that match the data.
        Once done, the flag is saved; a resumed attempt never promotes its own merge output.

        Raises:
            LoopError: ``dvc add`` failed (DVC's own message).
        """
        if flight.promoted:
            return
        merged = self.path("data/merged")
        for name in PROMOTED if merged.is_dir() else ():
            src, dst = merged / name, self.path(f"data/{name}")
            want = {f.name: f for f in src.iterdir()} if src.is_dir() else {}
            have = {f.name: f for f in dst.iterdir()} if dst.is_dir() else {}
            if want.keys() == have.keys() and all(sha256_file(want[k]) == sha256_file(have[k]) for k in want):
                continue
            tmp = dst.with_name(dst.name + ".tmp")
            shutil.rmtree(tmp, ignore_errors=True)
            shutil.copytree(src, tmp)
            self.seam(f"promote.copy.{name}")
            shutil.rmtree(dst, ignore_errors=True)
            tmp.rename(dst)
        self.seam("promote.dvc_add")
        self.run([*DVC, "add", *(f"data/{name}" for name in PROMOTED)], label="promote.dvc_add")
        self.seam("promote.added")
        state = self.load_state()
        assert state.in_flight is not None and state.in_flight.attempt_id == flight.attempt_id, "promote runs in flight"
        state.in_flight.promoted = flight.promoted = True
        self.save_state(state)
        self.seam("promote.done")

    def stages(self) -> list[str]:
        """Stage names of ``dvc.yaml`` in pipeline order."""
        return list(YAML(typ="safe").load(self.path("dvc.yaml").read_text(encoding="utf-8"))["stages"])

    def repro(self, flight: InFlight) -> dict[str, float] | None:
        """Reproduce the pipeline one stage at a time (``dvc repro --single-item``).

        Between stages it honours the control file: ``pause`` waits, ``stop`` returns None
        (the attempt stays in flight; the next start resumes it).

        Returns:
            Wall seconds per stage that actually ran, or None when stopped.
        """
        self.aborted = False
        times: dict[str, float] = {}
        stages = self.stages()
        for i, stage in enumerate(stages):
            if self.wait_while_paused(flight) == "stop":
                return None
            self.write_status("running", flight, stage=stage, stage_index=i, stages=stages)
            self._stage_times = {}
            self.seam(f"repro.{stage}")
            self.run([*DVC, "repro", "--single-item", stage], stream=True)
            self.seam(f"repro.{stage}.done")
            times.update(self._stage_times)
            self._record_stage_times(self._stage_times)
            if stage == "selfplay" and read_json(self.path("metrics/selfplay.json")).get("selfplay/aborted"):
                self.aborted = True  # abort_if: the attempt ends here as a failed attempt
                break
        return times

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

    # ------------------------------------------------------------------ runtime status and control
    def write_status(self, status: str, flight: InFlight | None = None, **extra) -> None:
        """Write the runtime ``status.json`` for the dashboard."""
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

    def finish(self, state: LoopState, flight: InFlight, wall_s: float, stage_wall_s: dict[str, float]) -> AttemptLog:
        """Record the attempt (history, ratings, ledger), advance the state and commit (idempotent)."""
        params = load_params(self.path("params.yaml"))
        if state.in_flight is not None and state.in_flight.stage_wall_s:  # include stages run before an interruption
            earlier = sum(state.in_flight.stage_wall_s.values()) - sum(stage_wall_s.values())
            wall_s, stage_wall_s = wall_s + max(earlier, 0.0), dict(state.in_flight.stage_wall_s)
        aborted = read_json(self.path("metrics/selfplay.json")).get("selfplay/aborted") if self.aborted else None
        gate = {} if aborted else read_json(self.path("metrics/gate.json"))
        accepted = bool(gate.get("gate/accepted"))
        entry = AttemptLog(
            attempt_id=flight.attempt_id, generation=flight.generation, attempt=flight.attempt,
            verdict="aborted" if aborted else "accepted" if accepted else "rejected",
            figures={} if aborted else self._figures(gate), reasons=[aborted] if aborted else list(gate.get("gate/reasons", [])),
            wall_s=round(wall_s, 1), stage_wall_s=stage_wall_s, phase=state.phase_name, overrides=flight.nudges,
        )  # fmt: skip
        history = self.load_history(state)  # before the tournament: a lost history stops here
        elo = self.rate(flight, params) if accepted else None
        self.seam("finish.rated")
        if elo and elo.get("gain"):
            entry.figures["elo_gain"] = elo["gain"]
        if not any(h.get("attempt_id") == flight.attempt_id for h in history):
            history.append({**entry.model_dump(mode="json"), "nudges": flight.nudges, "metrics": self._all_metrics()})
            atomic_write_json(self.path(HISTORY_FILE), history)
            self.seam("finish.history")
        if not any(e.attempt_id == flight.attempt_id for e in state.log):
            state.log.append(entry)
            self._advance(state, flight, accepted, params)
            if not accepted and state.status == "running" and params.loop.suggest_on_retry and gate:
                state.nudges = suggest(gate, params.model_dump(mode="json"))
        state.in_flight = None
        # the ledger line (keyed by attempt id) before the state that ends the attempt: a kill
        # between them re-runs finish, which finds the line and the history entry and adds neither
        append_record(
            self.path(LEDGER),
            FeedbackRecord(
                timestamp=feedback_now(), attempt_id=flight.attempt_id, generation=flight.generation, attempt=flight.attempt,
                params=params.model_dump(mode="json"), figures={k: v for k, v in gate.items() if k != "gate/batch"} or {"aborted": aborted},
                passed=accepted, outcome="blocked" if state.status == "blocked" else "rejected" if aborted else entry.verdict,
                nudges=flight.nudges,
            ),
        )  # fmt: skip
        self.seam("finish.ledger")
        self.save_state(state)
        self.seam("finish.state")
        self.commit(self.pending_message(state))
        self.push()
        return entry

    def commit_pending(self, state: LoopState) -> None:
        """Commit the state's last log entry if a kill came between its state write and its commit."""
        if state.in_flight is None and self.uncommitted_log(state):
            self.seam_prefix = f"g{state.log[-1].generation:03d}"
            self.commit(self.pending_message(state))

    def pending_message(self, state: LoopState) -> str:
        """The commit message of the state's last log entry (an attempt or an override).

        Built from the state alone, so a run killed between the state write and the commit
        makes the same commit when it resumes.
        """
        last = state.log[-1]
        if last.verdict == "override":
            return (
                f"override: {last.reasons[0]} (generation {last.generation:03d} -> {state.generation:03d})\n\n"
                f"Attempt-Id: {last.attempt_id}\n"
            )
        return _commit_message(last, last.overrides, state.nudges)

    def _advance(self, state: LoopState, flight: InFlight, accepted: bool, params: Params) -> None:
        """Next generation (and phase) after an accepted attempt, or the next attempt after a failed one."""
        if accepted:
            state.generation, state.attempt, state.failures = flight.generation + 1, 1, 0
            state.phase_generations += 1
            phases = params.curriculum or []
            if phases and state.phase < len(phases) and state.phase_generations >= phases[state.phase].generations:
                state.phase_winners[phases[state.phase].name] = f"gen{flight.generation:03d}"
                state.phase, state.phase_generations = state.phase + 1, 0
        else:
            state.attempt, state.failures = flight.attempt + 1, state.failures + 1
        state.status, state.stop_reason = self._status_after(state, params)

    def enter_phase(self, state: LoopState, params: Params) -> None:
        """Keep params.yaml in step with the curriculum before the next attempt (no-op without one).

        Entering a phase (once per phase) queues in ``state.nudges`` the phase's params
        (``ml.driver.curriculum.phase_overrides``) and the base value of every key the previous phase
        changed, by its overrides or by the suggester's nudges; suggester nudges still queued
        are dropped. Within a phase, the base value of each key the suggester nudges for the
        first time goes to ``state.phase_restore``: nudges last until their phase ends. The
        state is not saved here: the caller's ``begin`` saves it with the in-flight attempt.
        Once the curriculum is over, ``_end_curriculum`` puts the base values back.

        Raises:
            ParamsError: (after the last phase) the restored params.yaml does not validate.
        """
        phases = params.curriculum
        if not phases:
            return
        if state.phase >= len(phases):
            self._end_curriculum(state, params)
            return
        current = params.model_dump(mode="json")
        if state.entered_phase == state.phase:
            for key in state.nudges:  # the suggester's, for a retry: remember the phase's value of its section key
                section_key = ".".join(key.split(".")[:2])
                state.phase_restore.setdefault(section_key, get_dotted(current, section_key))
            return
        phase = phases[state.phase]
        before = phases[state.phase - 1].name if state.phase else None
        winner = state.phase_winners.get(before) if before else None
        if before and (note := opponent_fallback(phase, before, winner)):
            self.echo(note)
        wanted = {f"{sec}.{k}": v for sec, vals in phase_overrides(phase, winner).items() for k, v in vals.items()}
        base = {k: state.phase_restore.get(k, get_dotted(current, k)) for k in wanted}
        if state.phase == 0:  # nothing to restore before the first phase; keep what --seed-checkpoint queued
            state.nudges = {**state.nudges, **wanted}
            base = {**state.phase_restore, **base}
        else:
            restore = {k: v for k, v in state.phase_restore.items() if k not in wanted and get_dotted(current, k) != v}
            state.nudges = {**restore, **wanted}
        state.phase_restore, state.entered_phase, state.phase_name = base, state.phase, phase.name

    def _end_curriculum(self, state: LoopState, params: Params) -> None:
        """Write the base values of what the last phase changed back into params.yaml and commit
        it with the state, once (``state.phase_restore`` is then empty), so params.yaml after the
        curriculum equals params.yaml before it (the ``run`` section apart).

        Raises:
            ParamsError: the restored params.yaml does not validate (nothing is written).
        """
        if not state.phase_restore:
            return
        current = params.model_dump(mode="json")
        restore = {k: v for k, v in state.phase_restore.items() if get_dotted(current, k) != v}
        text = self._params_text(params.run.generation, params.run.attempt, restore) if restore else None
        if text is not None:
            params_from_dict(YAML(typ="safe").load(text), source=str(self.path("params.yaml")))
        state.phase_restore, state.entered_phase = {}, -1
        changes = "\n".join(f"- {k}: {get_dotted(current, k)} -> {v}" for k, v in restore.items()) or "- nothing differed"
        with self.committing(
            f"curriculum finished: params.yaml back to its base values\n\n{changes}\n", ["params.yaml", "state"]
        ):
            if text is not None:
                atomic_write_text(self.path("params.yaml"), text)
            self.save_state(state)
        self.echo(f"curriculum finished: params.yaml back to its base values ({', '.join(restore) or 'nothing differed'})")

    def rate(self, flight: InFlight, params: Params) -> dict:
        """Tournament of an accepted generation and the refit of all ratings (idempotent)."""
        students = {p.stem: load_policy(p)[0] for p in sorted(self.path("data/merged/students").glob("*.pt"))}
        self.write_status("running", flight, stage="rating")
        entry = rate_generation(
            self.root, flight.attempt_id, flight.generation, students, prior_sigma_elo=params.rating.prior_sigma_elo,
            games=params.rating.games, pod_size=params.game.pod_size, max_turns=params.game.max_turns,
            num_envs=params.selfplay.num_envs, seed=params.stage_seed("rating"), encoder=None,
            game=make_game(params.game, params.teacher),
        )  # fmt: skip
        if entry["table"]:
            self.echo(format_table(entry))
        return entry

    def _status_after(self, state: LoopState, params: Params) -> tuple[str, str | None]:
        if params.curriculum and state.phase >= len(params.curriculum):
            return "done", f"curriculum finished ({len(params.curriculum)} phases)"
        if not params.curriculum and state.generation >= params.loop.max_generations:
            return "done", f"loop.max_generations ({params.loop.max_generations}) reached"
        if state.failures > params.loop.max_retries:
            return "blocked", None
        history = read_json(self.path(ELO_FILE)) if self.path(ELO_FILE).exists() else []
        if converged(history, params.loop.convergence_elo, params.loop.convergence_window):
            return (
                "done",
                f"converged: Elo gain within +-{params.loop.convergence_elo} for {params.loop.convergence_window} generations",
            )
        return "running", None

    def _figures(self, gate: dict) -> dict:
        train = read_json(self.path("metrics/train.json"))
        selfplay = read_json(self.path("metrics/selfplay.json"))
        return {
            "win_rate": gate["gate/win_rate"],
            "win_rate_low": gate["gate/win_rate_low"],
            "win_rate_high": gate["gate/win_rate_high"],
            "eval_games": gate["gate/eval_games"],
            "sprt_llr": gate.get("gate/sprt_llr"),
            "sprt_decision": gate.get("gate/sprt_decision"),
            "holdout_accuracy": gate["gate/holdout_accuracy_current"],
            "holdout_accuracy_drop": gate["gate/holdout_accuracy_drop"],
            "selfplay_train_win_rate": selfplay.get("selfplay/train_win_rate"),
            "sampled_share": train.get("train/sampled_share"),
        }

    def _all_metrics(self) -> dict:
        out = {}
        for p in sorted(self.path("metrics").glob("*.json")):
            out[p.stem] = read_json(p)
        return out


RESTORE_HINT = (
    "Restore it from the last commit (`git checkout HEAD -- {path}`) and run loop.py again: the attempt in flight resumes."
)


def _first_line(e: Exception) -> str:
    return str(e).strip().splitlines()[0] if str(e).strip() else repr(e)


def _commit_message(entry: AttemptLog, used: dict, next_nudges: dict) -> str:
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
    if "elo_gain" in f:
        g = f["elo_gain"]
        lines.append(f"Elo gain {g['new']} over {g['old']}: {g['elo']:+.0f} [{g['low']:+.0f}, {g['high']:+.0f}]")
    body = "\n".join(lines)
    return f"{head}\n\n{body}\n\nAttempt-Id: {entry.attempt_id}\n" if body else f"{head}\n\nAttempt-Id: {entry.attempt_id}\n"
