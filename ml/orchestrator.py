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

import contextlib
import hashlib
from io import StringIO
import logging
import os
import shutil
import subprocess
import sys
import time
from datetime import datetime
from pathlib import Path

import psutil
from filelock import FileLock, Timeout
from git import InvalidGitRepositoryError, NoSuchPathError, Repo
from ruamel.yaml import YAML

from ml.io import atomic_write_json, atomic_write_text, read_json
from ml.game.registry import make_game
from ml.curriculum import phase_overrides
from ml.feedback import LEDGER, FeedbackRecord, append_record, suggest
from ml.feedback import now as feedback_now
from ml.params import Params, attempt_seed, load_params, params_from_dict
from ml.policy import load_policy
from ml.ratings import ELO_FILE, converged, format_table, rate_generation
from ml.progress import PROGRESS_FILE_ENV
from ml.loop_state import (
    HISTORY_FILE,
    LOCK_FILE,
    POLL_S,
    RUNTIME_DIR,
    STATE_FILE,
    AttemptLog,
    InFlight,
    LoopState,
    clear_control,
    read_control,
    sha256_file,
    write_status,
)

logger = logging.getLogger(__name__)

PROMOTED = ("pool", "rejected", "frozen", "students")
TRACKED_INPUTS = (*PROMOTED, "seed")
"""DVC-tracked input folders created empty on a fresh clone (``seed`` holds a --seed-checkpoint)."""
OWNED_PATHS = ("params.yaml", "dvc.lock", "metrics/", "state/", "data/")
"""Paths the loop writes; any other change in the work tree makes it refuse to start."""
DVC_ENV = {"DVC_NO_ANALYTICS": "1"}
"""Environment of every DVC call (update checks are off in .dvc/config: core.check_update)."""
DVC = (sys.executable, "-m", "dvc")
"""DVC of this interpreter's environment (works without an activated venv)."""


class LoopError(RuntimeError):
    """The loop cannot go on; the message says why and what to do."""


class Loop:
    """Drives attempts in the repository ``root`` (the current directory by default)."""

    def __init__(self, root: Path, echo=print) -> None:
        self.root = root.resolve()
        self.echo = echo
        self.dvc = DVC
        self.aborted = False
        try:
            self.repo = Repo(self.root)
        except (InvalidGitRepositoryError, NoSuchPathError) as e:
            raise LoopError(f"{self.root} is not a git repository (clone the project and run loop.py in it)") from e
        bindir = str(Path(sys.executable).parent)
        # Stage commands say `python`: put this interpreter's folder first so they run in
        # the same environment as loop.py, activated or not.
        self.env = {**os.environ, **DVC_ENV, "PATH": bindir + os.pathsep + os.environ.get("PATH", "")}
        if not self._git_identity():
            self.env.update(GIT_AUTHOR_NAME="distill-loop", GIT_AUTHOR_EMAIL="distill-loop@localhost",
                            GIT_COMMITTER_NAME="distill-loop", GIT_COMMITTER_EMAIL="distill-loop@localhost")  # fmt: skip
        self.repo.git.update_environment(**{k: v for k, v in self.env.items() if k.startswith(("GIT_", "DVC_", "PATH"))})

    def _git_identity(self) -> bool:
        try:
            return bool(self.repo.git.config("user.email"))
        except Exception:
            return False

    # ------------------------------------------------------------------ plumbing
    def path(self, rel: Path | str) -> Path:
        return self.root / rel

    def load_state(self) -> LoopState:
        p = self.path(STATE_FILE)
        return LoopState.model_validate(read_json(p)) if p.exists() else LoopState()

    def save_state(self, state: LoopState) -> None:
        atomic_write_json(self.path(STATE_FILE), state.model_dump(mode="json"))

    def load_history(self) -> list[dict]:
        p = self.path(HISTORY_FILE)
        return list(read_json(p)) if p.exists() else []

    def run(self, cmd: list[str], stream: bool = False) -> str:
        """Run a command in the repo; stream its output when asked. Raises LoopError on failure."""
        logger.debug("run %s", cmd)
        if not stream:
            proc = subprocess.run(cmd, cwd=self.root, env=self.env, capture_output=True, text=True)
            if proc.returncode:
                raise LoopError(f"{' '.join(cmd)} failed ({proc.returncode}):\n{proc.stdout[-3000:]}{proc.stderr[-3000:]}")
            return proc.stdout
        return self._run_streaming(cmd)

    def _run_streaming(self, cmd: list[str]) -> str:
        """Run ``cmd`` passing its output through as it comes (progress bars included)."""
        env = {
            **self.env,
            "DISTILL_PROGRESS": "1" if sys.stdout.isatty() else "0",
            PROGRESS_FILE_ENV: str(self.path(RUNTIME_DIR / "progress.json")),
        }
        proc = subprocess.Popen(cmd, cwd=self.root, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        assert proc.stdout is not None, "Popen with stdout=PIPE has a stdout"
        lines: list[tuple[float, str]] = []
        pending = ""
        while chunk := os.read(proc.stdout.fileno(), 65536):
            sys.stdout.buffer.write(chunk)
            sys.stdout.flush()
            pending += chunk.decode("utf-8", errors="replace")
            *done, pending = pending.split("\n")
            lines += [(time.perf_counter(), line) for line in done]
        lines.append((time.perf_counter(), pending))
        if proc.wait():
            tail = "\n".join(line for _, line in lines[-40:])
            raise LoopError(
                f"{' '.join(cmd)} failed ({proc.returncode}); the attempt stays in flight, run loop.py again to resume.\n{tail}"
            )
        self._stage_times = _stage_times(lines)
        return "\n".join(line for _, line in lines)

    def git(self, *args: str) -> str:
        """A git command, retried briefly while another process holds ``index.lock``."""
        for delay in (0.2, 0.5, 1.0, 2.0, 0.0):
            try:
                return self.repo.git.execute(["git", *args])
            except Exception as e:
                if "index.lock" not in str(e) or not delay:
                    raise
                time.sleep(delay)
        raise AssertionError("unreachable: the last try re-raises")

    def dirty_paths(self) -> list[str]:
        out = self.git("status", "--porcelain", "--untracked-files=all")
        return [line[3:].strip('"') for line in out.splitlines() if line.strip()]

    def head_attempt_ids(self, limit: int = 200) -> set[str]:
        """Attempt ids named by ``Attempt-Id:`` trailers in the last ``limit`` commits."""
        try:
            out = self.git("log", f"-{limit}", "--format=%(trailers:key=Attempt-Id,valueonly)")
        except Exception:
            return set()  # no commits yet
        return {line.strip() for line in out.splitlines() if line.strip()}

    # ------------------------------------------------------------------ checks
    def kill_orphans(self) -> list[int]:
        """Kill stage processes left running in this repo by a loop that was killed alone.

        Called with the one-instance lock held, so no live loop owns them: a ``dvc repro``
        or stage still running here is an orphan that would keep DVC's locks busy.

        Returns:
            The pids killed.
        """
        me = os.getpid()
        orphans = []
        for proc in psutil.process_iter(["pid", "cmdline", "cwd"]):
            try:
                cmd = " ".join(proc.info["cmdline"] or [])
                stage_like = ("dvc" in cmd and " repro" in cmd) or "-m stages." in cmd
                if proc.info["pid"] != me and proc.info["cwd"] == str(self.root) and stage_like:
                    orphans.append(proc)
            except (psutil.Error, TypeError):
                continue
        family = {p.pid: p for o in orphans for p in [o, *o.children(recursive=True)]}
        for p in family.values():
            with contextlib.suppress(psutil.Error):
                p.kill()
        psutil.wait_procs(list(family.values()), timeout=10)
        if family:
            self.echo(f"killed {len(family)} stage process(es) left by an earlier loop: {sorted(family)}")
        return sorted(family)

    def clear_stale_dvc_locks(self) -> None:
        """Remove ``.dvc/tmp/lock`` and ``rwlock`` left by a killed DVC, when no DVC process runs here."""
        for proc in psutil.process_iter(["cmdline", "cwd"]):
            try:
                cmd = " ".join(proc.info["cmdline"] or [])
                if "dvc" in cmd and proc.info["cwd"] == str(self.root) and proc.pid != os.getpid():
                    return
            except (psutil.Error, TypeError):
                continue
        for name in ("lock", "rwlock"):
            p = self.path(".dvc/tmp") / name
            if p.exists():
                logger.debug("removing stale %s", p)
                p.unlink()

    def check_tree(self, state: LoopState) -> None:
        """Refuse a work tree with changes the loop did not make (see module docstring)."""
        dirty = self.dirty_paths()
        foreign = [p for p in dirty if not p.startswith(OWNED_PATHS)]
        ours_pending = state.in_flight is not None or self.uncommitted_log(state)
        if foreign or (dirty and not ours_pending):
            listed = "\n  ".join(foreign or dirty)
            raise LoopError(
                "the work tree has changes the loop did not make:\n  "
                f"{listed}\ncommit or revert them first (the loop commits every attempt and must not sweep your edits into it)."
            )
        if state.in_flight is not None:
            params = self.path("params.yaml")
            head = self.git("show", "HEAD:params.yaml") if self.repo.head.is_valid() else ""
            current = params.read_text(encoding="utf-8")
            if sha256_file(params) != state.in_flight.params_sha256 and current != head:
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
            self.run([*DVC, "add", "--quiet", *(f"data/{n}" for n in missing)])

    def begin(self, state: LoopState) -> InFlight:
        """Start (or resume) the in-flight attempt; writes state first, then params.yaml."""
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
            self.save_state(state)
        flight = state.in_flight
        params = self.path("params.yaml")
        if sha256_file(params) != flight.params_sha256:
            atomic_write_text(params, self._params_text(flight.generation, flight.attempt, flight.nudges))
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
        atomic_write_text(path, buf.getvalue())
        self.commit_paths(message, ["params.yaml"])

    def promote(self) -> None:
        """Make the last merge's outputs the inputs of the next attempt (idempotent)."""
        merged = self.path("data/merged")
        if not merged.is_dir():
            return
        changed = []
        for name in PROMOTED:
            src, dst = merged / name, self.path(f"data/{name}")
            want = {f.name: f for f in src.iterdir()} if src.is_dir() else {}
            have = {f.name: f for f in dst.iterdir()} if dst.is_dir() else {}
            if want.keys() == have.keys() and all(sha256_file(want[k]) == sha256_file(have[k]) for k in want):
                continue
            tmp = dst.with_name(dst.name + ".tmp")
            shutil.rmtree(tmp, ignore_errors=True)
            shutil.copytree(src, tmp)
            shutil.rmtree(dst, ignore_errors=True)
            tmp.rename(dst)
            changed.append(f"data/{name}")
        if changed:
            self.run([*DVC, "add", "--quiet", *changed])

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
        self.clear_stale_dvc_locks()
        self.aborted = False
        times: dict[str, float] = {}
        stages = self.stages()
        for i, stage in enumerate(stages):
            if self.wait_while_paused(flight) == "stop":
                return None
            self.write_status("running", flight, stage=stage, stage_index=i, stages=stages)
            self._stage_times = {}
            self.run([*DVC, "repro", "--single-item", stage], stream=True)
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
        elo = self.rate(flight, params) if accepted else None
        if elo and elo.get("gain"):
            entry.figures["elo_gain"] = elo["gain"]
        history = self.load_history()
        if not any(h.get("attempt_id") == flight.attempt_id for h in history):
            history.append({**entry.model_dump(mode="json"), "nudges": flight.nudges, "metrics": self._all_metrics()})
            atomic_write_json(self.path(HISTORY_FILE), history)
        if not any(e.attempt_id == flight.attempt_id for e in state.log):
            state.log.append(entry)
            self._advance(state, flight, accepted, params)
            if not accepted and state.status == "running" and params.loop.suggest_on_retry and gate:
                state.nudges = suggest(gate, params.model_dump(mode="json"))
        state.in_flight = None
        self.save_state(state)
        append_record(
            self.path(LEDGER),
            FeedbackRecord(
                timestamp=feedback_now(), attempt_id=flight.attempt_id, generation=flight.generation, attempt=flight.attempt,
                params=params.model_dump(mode="json"), figures={k: v for k, v in gate.items() if k != "gate/batch"} or {"aborted": aborted},
                passed=accepted, outcome="blocked" if state.status == "blocked" else "rejected" if aborted else entry.verdict,
                nudges=flight.nudges,
            ),
        )  # fmt: skip
        self.commit(_commit_message(entry, flight.nudges, state.nudges))
        self.push()
        return entry

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
        """Queue the current curriculum phase's overrides (and the previous phase's restores)
        for the next attempt's params, once per phase. No-op without a curriculum."""
        phases = params.curriculum
        if not phases or state.entered_phase == state.phase or state.phase >= len(phases):
            return
        phase = phases[state.phase]
        previous = state.phase_winners.get(phases[state.phase - 1].name) if state.phase else None
        wanted = {f"{sec}.{k}": v for sec, vals in phase_overrides(phase, previous).items() for k, v in vals.items()}
        current = params.model_dump(mode="json")
        base = {k: state.phase_restore.get(k, _dotted(current, k)) for k in wanted}
        if state.phase == 0:  # nothing to restore before the first phase; keep what --seed-checkpoint queued
            state.nudges = {**state.nudges, **wanted}
            base = {**state.phase_restore, **base}
        else:
            restore = {k: v for k, v in state.phase_restore.items() if k not in wanted}
            state.nudges = {**restore, **state.nudges, **wanted}
        state.phase_restore, state.entered_phase, state.phase_name = base, state.phase, phase.name
        self.save_state(state)

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

    def push(self, tries: int = 3, backoff_s: float = 2.0) -> bool:
        """Push DVC data, then git, to the configured remotes, with retries. Never raises.

        Runs only when both a git remote and a DVC remote are configured (a plain clone has
        ``origin`` but no DVC remote, so it never pushes by surprise). A failure is reported and
        remembered (``.dvc/tmp/loop/push-pending``); the next push then sends every commit's
        data (``dvc push --all-commits``) and every commit, so nothing is lost.

        Returns:
            True when everything configured was pushed.
        """
        git_remotes = self.git("remote").split()
        dvc_remotes = self.run([*DVC, "remote", "list"]).split()
        if not git_remotes or not dvc_remotes:
            return True
        pending = self.path(RUNTIME_DIR / "push-pending")
        branch = self.git("rev-parse", "--abbrev-ref", "HEAD")
        for attempt in range(1, tries + 1):
            try:
                self.run([*DVC, "push", "--quiet", *(["--all-commits"] if pending.exists() else [])])
                self.git("push", "--quiet", git_remotes[0], f"HEAD:refs/heads/{branch}")
                pending.unlink(missing_ok=True)
                return True
            except Exception as e:  # any failure of a remote is reported, never fatal
                last = str(e).strip().splitlines()[-1].strip(" '\"") if str(e).strip() else repr(e)
                self.echo(f"push failed (try {attempt}/{tries}): {last}")
                time.sleep(backoff_s * attempt if attempt < tries else 0)
        pending.parent.mkdir(parents=True, exist_ok=True)
        pending.write_text(time.strftime("%Y-%m-%dT%H:%M:%S"))
        self.echo("push failed: it will be retried after the next commit (the commits and data are safe locally)")
        return False

    def commit_paths(self, message: str, paths: list[str]) -> None:
        """Stage ``paths`` and commit them (for commands other than attempts, e.g. promote)."""
        self.git("add", "-A", "--", *paths)
        self.git("commit", "--quiet", "--no-verify", "-m", message)

    def commit(self, message: str) -> None:
        """Stage the loop's paths and commit, unless this attempt's commit already exists."""
        attempt_id = message.rsplit("Attempt-Id: ", 1)[-1].strip()
        if attempt_id in self.head_attempt_ids():
            return
        self.git("add", "-A", "--", *(p for p in OWNED_PATHS if self.path(p).exists()))
        self.git("commit", "--quiet", "--no-verify", "-m", message)


def _stage_times(lines: list[tuple[float, str]]) -> dict[str, float]:
    """Wall seconds per stage from ``dvc repro`` output ("Running stage 'x':" marks a start)."""
    marks = [(t, line.split("'")[1]) for t, line in lines if line.startswith("Running stage '")]
    end = lines[-1][0] if lines else 0.0
    return {name: round((marks[i + 1][0] if i + 1 < len(marks) else end) - t, 1) for i, (t, name) in enumerate(marks)}


def _dotted(tree: dict, key: str):
    for part in key.split("."):
        tree = tree.get(part) if isinstance(tree, dict) else None
    return tree


def _commit_message(entry: AttemptLog, used: dict, next_nudges: dict) -> str:
    f = entry.figures
    head = (
        f"gen {entry.generation:03d} attempt {entry.attempt}: {entry.verdict} | phase {entry.phase} | "
        f"PPO win {f.get('win_rate', float('nan')):.3f} [{f.get('win_rate_low', float('nan')):.3f}, {f.get('win_rate_high', float('nan')):.3f}] "
        f"| holdout acc {f.get('holdout_accuracy', float('nan')):.3f} (drop {f.get('holdout_accuracy_drop', float('nan')):+.4f})"
    )
    lines = [f"- {r}" for r in entry.reasons]
    if used:
        lines.append("params nudged by the suggester for this attempt: " + ", ".join(f"{k} = {v}" for k, v in used.items()))
    if next_nudges:
        lines.append("next attempt's params nudged: " + ", ".join(f"{k} = {v}" for k, v in next_nudges.items()))
    if "elo_gain" in f:
        g = f["elo_gain"]
        lines.append(f"Elo gain {g['new']} over {g['old']}: {g['elo']:+.0f} [{g['low']:+.0f}, {g['high']:+.0f}]")
    body = "\n".join(lines)
    return f"{head}\n\n{body}\n\nAttempt-Id: {entry.attempt_id}\n" if body else f"{head}\n\nAttempt-Id: {entry.attempt_id}\n"


def acquire_lock(root: Path) -> FileLock:
    """The one-instance lock (``.dvc/tmp/loop.lock``, released by the OS if the process dies).

    Raises:
        LoopError: when another loop.py holds it.
    """
    path = root / LOCK_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    lock = FileLock(str(path))
    try:
        lock.acquire(timeout=0)
    except Timeout as e:
        raise LoopError(f"another loop.py is already running in {root} (lock {path} is held)") from e
    return lock
