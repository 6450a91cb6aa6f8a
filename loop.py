"""distill-loop driver: run generation attempts until done, committing every attempt.

    python loop.py                      # run (or resume) until loop.max_generations or convergence
    python loop.py --max-generations 5  # override loop.max_generations for this run
    python loop.py --force-retry        # after a fix: unblock and retry the blocked generation
    python loop.py --skip-to-next-stage # give up on the blocked generation and go on
    python loop.py --profile full       # apply the `full` profile of params.yaml, commit it, run
    python loop.py elo                  # print the latest Elo table
    python loop.py eval --games 2000    # each accepted generation's student against the teacher
    python loop.py promote gen003-a1 [--name NAME]   # keep that attempt's student as a bot
    python loop.py import-forge PATH... [--cards TABLE]  # Forge files as teacher data (data/forge)

Safe to stop at any moment (Ctrl-C, kill -9) and start again: it resumes the attempt in
flight. A second instance on the same repo refuses to start. See ml/driver/orchestrator.py.
"""

from __future__ import annotations

import argparse
import logging
import sys
import time
from pathlib import Path

from ml.driver.bots import BOTS_DIR, PromoteError, final_report, load_bots, pod_win_rate, promote
from ml.driver.curriculum import opponent_fallback, phase_overrides
from ml.driver.forge_import import TEACHER_DIR, foreign_files_message, foreign_teacher_files, import_command
from ml.game.registry import make_game
from ml.io import atomic_write_json, read_json
from ml.driver.state import AttemptLog
from ml.driver.orchestrator import Loop
from ml.params import ParamsError, load_params
from ml.policy import CheckpointError, check_shape, load_policy, save_policy
from ml.ratings import ELO_FILE, format_table
from ml.rollout import Controller
from ml.driver.workspace import LoopError, acquire_lock


def positive_int(text: str) -> int:
    """argparse type: an int >= 1."""
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="loop.py", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--repo", type=Path, default=Path("."), help="repository root (default: current directory)")
    p.add_argument(
        "--max-generations",
        type=positive_int,
        help="stop after this many accepted generations (default: loop.max_generations)",
    )
    p.add_argument("--max-attempts", type=positive_int, help="stop after running this many attempts in this invocation")
    p.add_argument("--profile", help="apply a named profile of params.yaml (e.g. full) and commit it before running")
    p.add_argument(
        "--seed-checkpoint", type=Path, help="start the first phase's students from this checkpoint (copied to data/seed)"
    )
    over = p.add_mutually_exclusive_group()
    over.add_argument("--force-retry", action="store_true", help="unblock a blocked generation and retry it (after a fix)")
    over.add_argument("--skip-to-next-stage", action="store_true", help="leave a blocked generation and start the next one")
    sub = p.add_subparsers(dest="command", metavar="{elo,eval,promote,import-forge}")
    sub.add_parser("elo", help="print the latest Elo table (state/elo_history.json)")
    ev = sub.add_parser(
        "eval",
        help="win rate of each accepted generation's student (greedy) in pods against the teacher",
        description="Plays each accepted generation's student greedily in seat-rotated duplicate deals against "
        "pod_size - 1 teachers, on deals no stage ever played (seed: base.seed), and prints the win rate with its 95% "
        "Wilson interval, the gate's win rate of that generation's PPO agent, the student's Elo and the PPO share of "
        "its training set. Reads the run's params.yaml and state; changes nothing. "
        "(--repo goes before the subcommand: python loop.py --repo PATH eval.)",
    )
    ev.add_argument(
        "--games",
        type=int,
        default=2000,
        help="games per student, rounded down to whole deals of pod_size games (default 2000)",
    )
    ev.add_argument("--json", type=Path, help="also write the rows to this JSON file")
    prom = sub.add_parser("promote", help="copy an attempt's student to bots/promoted/<name>.pt and commit it")
    prom.add_argument("attempt", help="attempt id, or a unique part of one (e.g. gen003-a1)")
    prom.add_argument("--name", help="bot name (default: the attempt id)")
    imp = sub.add_parser(
        "import-forge",
        help="validate Forge decision files and add their good lines to the teacher data (data/forge, DVC-tracked)",
        description="Reads each Forge file (ml-decisions-<8 hex>[-tN].jsonl, any name accepted), reports every bad line as "
        "file:line: field: problem and copies the good lines, byte for byte, into data/forge/, which the train and gate "
        "stages read as source `forge`; then `dvc add`s data/forge and commits data/forge.dvc. Source files are only read; "
        "nothing is overwritten (a taken name with other content gets a new name). The first import sets "
        "train.source_weights.forge (--weight) in params.yaml and commits it. Exit status 0: all imported (bad lines left "
        "out and listed); 2: a file or the card table was refused. (--repo goes before the subcommand.)",
    )
    imp.add_argument("paths", nargs="*", type=Path, metavar="PATH", help="Forge decision files (JSONL)")
    imp.add_argument(
        "--cards",
        type=Path,
        help="card table to merge into data/forge/cards.yaml: a YAML mapping `card name: kind` (land, creature, removal, "
        "draw, ramp, wipe) for cards outside the built-in pool; used for labels only, never changes a built-in card",
    )
    imp.add_argument(
        "--weight", type=float, default=1.0, help="train.source_weights.forge to set when it has none (default 1.0)"
    )
    return p.parse_args(argv)


def apply_override(loop: Loop, args: argparse.Namespace) -> None:
    """Record a human override in the state and commit it."""
    state = loop.load_state()
    if state.in_flight is not None:
        raise LoopError(f"attempt {state.in_flight.attempt_id} is in flight; let it finish (run loop.py) before an override")
    kind = "force-retry" if args.force_retry else "skip-to-next-stage"
    entry = AttemptLog(
        attempt_id=f"{time.strftime('%Y%m%d-%H%M%S')}-override-{kind}",
        generation=state.generation,
        attempt=state.attempt,
        verdict="override",
        reasons=[kind],
        phase=state.phase_name,
    )
    params = load_params(loop.path("params.yaml"))
    phases = params.curriculum
    if args.skip_to_next_stage:  # the queued nudges were for the retry of the generation given up on
        if phases:  # with a curriculum, leave the blocked phase
            state.phase, state.phase_generations = state.phase + 1, 0
        state.generation, state.attempt, state.nudges = state.generation + 1, 1, {}
    state.failures = 0
    state.status, state.stop_reason = loop._status_after(state, params) if phases else ("running", None)
    if args.skip_to_next_stage and phases and state.phase < len(phases):  # into a gauntlet with no model to play?
        before = phases[state.phase - 1].name
        if note := opponent_fallback(phases[state.phase], before, state.phase_winners.get(before)):
            entry.reasons.append(note)
    elif args.skip_to_next_stage and phases:
        state.stop_reason = f"{state.stop_reason}; the last phase, {entry.phase!r}, left by --skip-to-next-stage"
    state.log.append(entry)
    loop.save_state(state)
    notes = "".join(f"{r}\n\n" for r in entry.reasons[1:])
    loop.commit(
        f"override: {kind} (generation {entry.generation:03d} -> {state.generation:03d})\n\n{notes}Attempt-Id: {entry.attempt_id}\n"
    )
    after = f"next is gen {state.generation:03d} attempt {state.attempt}"
    after = f"done, {state.stop_reason}" if state.status == "done" else after
    print("\n".join([f"override {kind} recorded: {after}", *entry.reasons[1:]]))


def apply_profile(loop: Loop, name: str) -> None:
    """Write the named profile's overrides into params.yaml and commit them (no-op if applied)."""
    state = loop.load_state()
    if state.in_flight is not None:
        raise LoopError(f"attempt {state.in_flight.attempt_id} is in flight; let it finish before changing params")
    params = load_params(loop.path("params.yaml"))
    if name not in params.profiles:
        raise LoopError(f"params.yaml has no profile {name!r} (profiles: {', '.join(sorted(params.profiles)) or 'none'})")
    overrides = params.profiles[name]
    current = params.model_dump(mode="json")
    if all(current[sec].get(k) == v for sec, values in overrides.items() for k, v in values.items()):
        return
    loop.set_params(
        overrides,
        f"params: profile {name}\n\n" + "\n".join(f"{s}.{k} = {v}" for s, vals in overrides.items() for k, v in vals.items()),
    )
    print(f"profile {name} applied to params.yaml and committed")


def seed_checkpoint(loop: Loop, path: Path) -> None:
    """Copy a checkpoint to data/seed/seed.pt (DVC-tracked) and have the current phase's
    students start from it (restored when the phase ends)."""
    state = loop.load_state()
    if state.in_flight is not None or state.log:
        raise LoopError("--seed-checkpoint starts the first phase: use it on a fresh run (no attempt yet)")
    params = load_params(loop.path("params.yaml"))
    first = params.overridden(phase_overrides(params.curriculum[0], None)) if params.curriculum else params
    game = make_game(first.game, first.teacher)
    try:
        net, _ = load_policy(path)
        check_shape(net, game.obs_dim, game.num_actions, f"--seed-checkpoint {path}")
    except CheckpointError as e:
        raise LoopError(str(e)) from e
    if tuple(net.hidden_sizes) != tuple(first.train.hidden_sizes):  # refused before anything is written or committed
        raise LoopError(
            f"--seed-checkpoint {path} has hidden sizes {list(net.hidden_sizes)}, but the first phase's students "
            f"have train.hidden_sizes {list(first.train.hidden_sizes)}"
        )
    loop.ensure_data_dirs()
    state.nudges["train.init_checkpoint"] = "data/seed/seed.pt"
    state.phase_restore["train.init_checkpoint"] = params.train.init_checkpoint
    with loop.committing(f"seed checkpoint: students start from {path.name}", ["data", "state"], dvc_add=("data/seed",)):
        save_policy(net, loop.path("data/seed/seed.pt"), {"role": "seed", "source": str(path)})
        loop.save_state(state)
    print(f"seed checkpoint {path} -> data/seed/seed.pt; the first phase's students start from it")


def print_elo(loop: Loop) -> int:
    path = loop.path(ELO_FILE)
    history = read_json(path) if path.exists() else []
    if not history or not history[-1]["table"]:
        print("no ratings yet: they are fitted after each accepted generation")
        return 0
    print(format_table(history[-1]))
    return 0


def accepted_students(loop: Loop) -> list[Path]:
    """Student checkpoints of the accepted generations, oldest first.

    ``data/merged/students`` (the last merge's output) already holds the newest accepted
    generation's student, which reaches ``data/students`` only when the next attempt starts;
    ``data/students`` is the fallback while a merge is rewriting its output.
    """
    merged = sorted(loop.path("data/merged/students").glob("gen*.pt"))
    return merged or sorted(loop.path("data/students").glob("gen*.pt"))


def evaluate(loop: Loop, games: int, out: Path | None) -> int:
    """``loop.py eval``: the table of accepted generations, each student measured against the teacher.

    Per generation g: student g (``accepted_students``, greedy) in seat-rotated duplicate
    deals against pod_size - 1 teachers on deals no stage played; the share of PPO data in
    student g's training set and the gate's win rate of PPO agent g (from
    state/eval_history.json, the accepted attempt); student g's Elo in the latest tournament
    (state/elo_history.json).
    """
    if games < 1:
        print("loop.py eval: --games must be >= 1", file=sys.stderr)
        return 2
    if out is not None and out.is_dir():
        print(f"loop.py eval: --json {out} is a directory; give a file path", file=sys.stderr)
        return 2
    params = load_params(loop.path("params.yaml"))
    students = accepted_students(loop)
    if not students:
        print("no students yet: each accepted generation adds one (run `python loop.py`)")
        return 0
    history_path, elo_path = loop.path("state/eval_history.json"), loop.path(ELO_FILE)
    accepted = {
        e["generation"]: e for e in (read_json(history_path) if history_path.exists() else []) if e["verdict"] == "accepted"
    }
    elo_runs = read_json(elo_path) if elo_path.exists() else []
    elo = {r["player"]: r for r in (elo_runs[-1]["table"] if elo_runs else [])}
    game = make_game(params.game, params.teacher)
    n = params.game.pod_size
    played = max(1, games // n) * n  # whole duplicate deals
    print(
        f"students (greedy) in pods against {n - 1} teachers ({game.teacher_name}), {played} games each "
        f"({played // n} deals); parity {1 / n:.3f}\n"
        f"{'student':8s} {'win rate [95% Wilson]':<24s} {'draws':>6s} {'PPO agent (gate)':>26s} {'Elo [95%]':>20s} {'PPO share':>9s}"
    )
    rows = []
    for path in students:
        net, _ = load_policy(path)
        try:
            check_shape(net, game.obs_dim, game.num_actions, str(path.relative_to(loop.root)))
        except CheckpointError as e:
            print(f"loop.py eval: {e}", file=sys.stderr)
            return 2
        row = pod_win_rate(
            Controller("net", net, greedy=True), Controller("heuristic"), games=games, pod_size=n,
            max_turns=params.game.max_turns, num_envs=params.selfplay.num_envs, seed=params.stage_seed("eval"),
            game=game, progress=sys.stderr.isatty(), label=path.stem,
        )  # fmt: skip
        fig = accepted.get(int(path.stem[3:]), {}).get("figures", {}) if path.stem[3:].isdigit() else {}
        rating = elo.get(path.stem)
        row = {
            "student": path.stem, **row, "ppo_share": fig.get("sampled_share", {}).get("ppo", 0.0),
            "agent_win_rate": fig.get("win_rate"), "agent_low": fig.get("win_rate_low"), "agent_high": fig.get("win_rate_high"),
            "elo": rating and rating["elo"], "elo_low": rating and rating["low"], "elo_high": rating and rating["high"],
        }  # fmt: skip
        rows.append(row)
        agent = f"{row['agent_win_rate']:.3f} [{row['agent_low']:.3f}, {row['agent_high']:.3f}]" if fig else "-"
        rated = f"{row['elo']:.0f} [{row['elo_low']:.0f}, {row['elo_high']:.0f}]" if rating else "-"
        print(
            f"{path.stem:8s} {row['win_rate']:.3f} [{row['low']:.3f}, {row['high']:.3f}]".ljust(33)
            + f" {row['draws']:6d} {agent:>26s} {rated:>20s} {row['ppo_share']:9.3f}",
            flush=True,
        )
    if out is not None:
        atomic_write_json(out, rows)
    return 0


def report(loop: Loop) -> None:
    """The final, informational report: the final student against every promoted bot."""
    params = load_params(loop.path("params.yaml"))
    bots = load_bots(loop.root)
    students = accepted_students(loop)
    if not bots or not students or not params.rating.report_games:
        return
    student, _ = load_policy(students[-1])
    rows = final_report(
        student, bots, games=params.rating.report_games, pod_size=params.game.pod_size, max_turns=params.game.max_turns,
        num_envs=params.selfplay.num_envs, seed=params.stage_seed("report"), game=make_game(params.game, params.teacher),
    )  # fmt: skip
    print(f"final report: student {students[-1].stem} in pods against {params.game.pod_size - 1} copies of each promoted bot")
    for r in rows:
        print(f"  vs {r['bot']:30s} win {r['win_rate']:.3f} [{r['low']:.3f}, {r['high']:.3f}] over {r['games']} games")


def run_attempts(loop: Loop, args: argparse.Namespace) -> int:
    """Attempts until done, blocked, stopped or ``--max-attempts``; returns the exit status."""
    ran = 0
    while True:
        state = loop.load_state()
        params = load_params(loop.path("params.yaml"))
        max_gen = args.max_generations or params.loop.max_generations
        loop.commit_pending(state)  # killed between the state write and its commit
        if state.in_flight is None:
            if state.status == "blocked":
                print(
                    f"BLOCKED: gen {state.generation:03d} was rejected {state.failures} times "
                    f"(loop.max_retries = {params.loop.max_retries}). Last reasons: {'; '.join(state.log[-1].reasons)}.\n"
                    "Fix the cause, then run `python loop.py --force-retry`, or `python loop.py --skip-to-next-stage`."
                )
                loop.write_status("blocked", generation=state.generation, attempt=state.attempt)
                return 3
            if params.curriculum:
                done = state.phase >= len(params.curriculum)
            else:
                converged = state.status == "done" and "converged" in (state.stop_reason or "")
                done = state.generation >= max_gen or converged
            if done:
                loop.enter_phase(state, params)  # after a curriculum: params.yaml back to its base values
                by_count = not params.curriculum and state.generation >= max_gen
                if params.curriculum:
                    reason = state.stop_reason or f"curriculum finished ({len(params.curriculum)} phases)"
                    advice = " Append a phase to `curriculum` in params.yaml to go on."
                elif by_count:
                    reason = f"{state.generation} generations accepted (max {max_gen})"
                    advice = " Raise loop.max_generations (or --max-generations) to go on."
                else:
                    reason, advice = state.stop_reason, ""
                print(f"done: {reason}.{advice}")
                loop.write_status("done", generation=state.generation, attempt=state.attempt)
                report(loop)
                return 0
            if args.max_attempts is not None and ran >= args.max_attempts:
                loop.write_status("stopped", generation=state.generation, attempt=state.attempt)
                return 0
        if loop.wait_while_paused(state.in_flight) == "stop":
            print("stopped on request; run `python loop.py` to go on.")
            return 0
        started = time.perf_counter()
        loop.ensure_data_dirs()
        if state.in_flight is None:
            loop.enter_phase(state, params)
        flight = loop.begin(state)
        print(f"== attempt {flight.attempt_id}: gen {flight.generation:03d} attempt {flight.attempt}", flush=True)
        loop.promote(flight)
        stage_wall = loop.repro(flight)
        if stage_wall is None:
            print(f"stopped on request during {flight.attempt_id}; run `python loop.py` to resume it.")
            return 0
        entry = loop.finish(loop.load_state(), flight, time.perf_counter() - started, stage_wall)
        ran += 1
        f = entry.figures
        stages = ", ".join(f"{k} {v:.0f}s" for k, v in entry.stage_wall_s.items()) or "no stage re-ran"
        if entry.verdict == "aborted":
            print(f"== {entry.attempt_id}: ABORTED  {entry.reasons[0]}; wall {entry.wall_s:.0f}s", flush=True)
            continue
        print(
            f"== {entry.attempt_id} [{entry.phase}]: {entry.verdict.upper()}  PPO win {f['win_rate']:.3f} "
            f"[{f['win_rate_low']:.3f}, {f['win_rate_high']:.3f}] on {f['eval_games']} games (SPRT LLR {f['sprt_llr']:.2f}), "
            f"holdout acc {f['holdout_accuracy']:.3f}; wall {entry.wall_s:.0f}s ({stages})",
            flush=True,
        )


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s loop %(levelname)s %(message)s")
    try:
        loop = Loop(args.repo)
        if args.command == "elo":
            return print_elo(loop)
        if args.command == "eval":
            return evaluate(loop, args.games, args.json)
        lock = acquire_lock(loop.root)
    except (LoopError, ParamsError) as e:
        print(f"loop.py: {e}", file=sys.stderr)
        return 2
    running = False
    try:
        if args.command is None:
            loop.kill_orphans()
            loop.clear_stale_dvc_locks()
        loop.preflight()
        loop.finish_pending_commit()
        state = loop.load_state()
        load_params(loop.path("params.yaml"))  # a bad value is named before any dirty-tree complaint
        if args.command == "import-forge":  # before check_tree: the files may sit in data/teacher
            return import_command(loop, args.paths, args.cards, args.weight)
        if args.command is None and (foreign := foreign_teacher_files(loop.path(TEACHER_DIR))):
            raise LoopError(foreign_files_message(foreign, loop.root))
        loop.check_tree(state)
        loop.check_records(state)
        if args.command == "promote":
            message = f"promote: {args.name or args.attempt} from attempt {args.attempt}"
            with loop.committing(message, ["bots"], dvc_add=(str(BOTS_DIR),)):
                path = promote(loop.root, loop.git, args.attempt, args.name)
            print(f"promoted {path.relative_to(loop.root)}")
            return 0
        if args.force_retry or args.skip_to_next_stage:
            apply_override(loop, args)
        if args.profile:
            apply_profile(loop, args.profile)
        if args.seed_checkpoint:
            seed_checkpoint(loop, args.seed_checkpoint)
        running = True
        return run_attempts(loop, args)
    except (LoopError, PromoteError, ParamsError) as e:
        print(f"loop.py: {e}", file=sys.stderr)
        if running:  # a refused command line (bad profile, dirty tree, promote) leaves the run's status as it was
            loop.write_status("error", message=str(e)[-2000:])
        return 2
    except KeyboardInterrupt:
        print("\ninterrupted: run `python loop.py` again to resume where it stopped.", file=sys.stderr)
        loop.write_status("stopped", message="interrupted")
        return 130
    finally:
        lock.release()


if __name__ == "__main__":
    sys.exit(main())
