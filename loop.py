"""distill-loop driver: run generation attempts until done, committing every attempt.

    python loop.py                      # run (or resume) until loop.max_generations or convergence
    python loop.py --max-generations 5  # override loop.max_generations for this run (kept when it resumes)
    python loop.py --force-retry        # after a fix: unblock and retry the blocked generation
    python loop.py --skip-to-next-stage # give up on the blocked generation and go on
    python loop.py --profile full       # apply the `full` profile of params.yaml, commit it, run
    python loop.py elo                  # print the latest Elo table
    python loop.py eval --games 2000    # each accepted generation's student against the teacher
    python loop.py compare RUN_A RUN_B  # two runs' results head to head and against the same teachers
    python loop.py promote gen003-a1 [--name NAME]   # keep that attempt's student as a bot
    python loop.py import-forge PATH... [--cards TABLE]  # Forge files as teacher data (data/forge)
    python loop.py onnx [MODEL] [--out FILE]   # a student or bot as ONNX + feature layout (JVM)

Safe to stop at any moment (Ctrl-C, kill -9) and start again: it resumes the attempt in
flight. A second instance on the same repo refuses to start. See ml/driver/orchestrator.py.
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from ml.base.cli_args import mixture_weight, positive_int
from ml.driver.onnx_cmd import add_onnx_parser

if TYPE_CHECKING:
    from filelock import FileLock

    from ml.driver.orchestrator import Loop

# The driver's modules (torch, GitPython, pydantic models ...) are imported in `main`, after the
# command line is parsed: `--help` answers with argparse alone (bench/bench_startup.py).

LOCKED = (None, "promote", "import-forge")
"""The commands that take the one-instance lock (a run, an override, a profile, promote, import-forge)."""


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """The command line (``sys.argv[1:]`` when None); argparse exits with status 2 on a bad one."""
    p = argparse.ArgumentParser(prog="loop.py", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--repo", type=Path, default=Path("."), help="repository root (default: current directory)")
    max_gen = "stop after this many accepted generations (default: the limit of the run it resumes, else loop.max_generations)"
    p.add_argument("--max-generations", type=positive_int, help=max_gen)
    p.add_argument("--max-attempts", type=positive_int, help="stop after running this many attempts in this invocation")
    p.add_argument("--profile", help="apply a named profile of params.yaml (e.g. full) and commit it before running")
    seed = "start the first phase's students from this checkpoint (copied to data/seed)"
    p.add_argument("--seed-checkpoint", type=Path, help=seed)
    over = p.add_mutually_exclusive_group()
    over.add_argument("--force-retry", action="store_true", help="unblock a blocked generation and retry it (after a fix)")
    over.add_argument("--skip-to-next-stage", action="store_true", help="leave a blocked generation and start the next one")
    sub = p.add_subparsers(dest="command", metavar="{elo,eval,compare,promote,import-forge,onnx}")
    sub.add_parser(
        "elo",
        help="print the latest Elo table (state/elo_history.json)",
        description="Prints the latest tournament's Elo table (state/elo_history.json): each accepted student, the heuristic "
        "teacher (anchored at 1500) and a random player, with its Elo (Plackett-Luce fit), 95% interval and games, and the "
        "newest student's gain over the one before. Changes nothing. "
        "(--repo goes before the subcommand: python loop.py --repo PATH elo.)",
    )
    ev = sub.add_parser(
        "eval",
        help="win rate of each accepted generation's student (greedy) in pods against the teacher",
        description="Plays each accepted generation's student greedily in seat-rotated duplicate deals against "
        "pod_size - 1 teachers, on deals no stage ever played (seed: base.seed), and prints the win rate with its 95% "
        "interval by deal, the gate's win rate of that generation's PPO agent, the student's Elo and the PPO share of "
        "its training set. Reads the run's params.yaml and state; changes nothing. "
        "(--repo goes before the subcommand: python loop.py --repo PATH eval.)",
    )
    games = "games per student, rounded down to whole deals of pod_size games, at least one deal (default 2000)"
    ev.add_argument("--games", type=int, default=2000, help=games)
    ev.add_argument("--json", type=Path, help="also write the rows to this JSON file")
    ev.add_argument(
        "--agents", action="store_true", help="measure each accepted generation's PPO agent instead of its student"
    )
    cmp = sub.add_parser(
        "compare",
        help="two runs' results head to head and against the same teachers, with the CPU time each spent",
        description="Plays run A's result against run B's (each run's loop.result policy of its last accepted generation, "
        "greedy) in mixed pods (two seats each in a 4-pod, 1 against 1 in 2-player games, paired by deal) and each against "
        "pod_size - 1 teachers on the same deals, and prints A's share of the first places between them, both teacher-pod "
        "rates and their difference with 95% intervals by deal (chips too in zero-sum games), the CPU and wall seconds and "
        "learner decisions each run spent, and the params that differ. A RUN is a clone's folder (its HEAD), or a branch "
        "or commit of --repo. Changes nothing. (--repo goes before the subcommand.)",
    )
    cmp.add_argument("run_a", metavar="RUN_A", help="a clone's folder, or a branch or commit of --repo")
    cmp.add_argument("run_b", metavar="RUN_B", help="a clone's folder, or a branch or commit of --repo")
    cmp.add_argument("--games", type=positive_int, default=2000, help="games of each measure, whole deals (default 2000)")
    gen = "compare this generation of both runs (default: each one's last accepted)"
    cmp.add_argument("--generation", type=int, help=gen)
    cmp.add_argument("--generation-a", type=int, help="run A's generation (default: --generation, else its last accepted)")
    cmp.add_argument("--generation-b", type=int, help="run B's generation (default: --generation, else its last accepted)")
    cmp.add_argument("--json", type=Path, help="also write the report to this JSON file")
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
    imp.add_argument(
        "paths", nargs="*", type=Path, metavar="PATH", help="Forge decision files (JSONL; a folder is refused: name its files)"
    )
    imp.add_argument(
        "--cards",
        type=Path,
        help="card table to merge into data/forge/cards.yaml: a YAML mapping `card name: kind` (land, creature, removal, "
        "draw, ramp, wipe) for cards outside the built-in pool; used for labels only, never changes a built-in card",
    )
    imp.add_argument(
        "--weight", type=mixture_weight, default=1.0, help="train.source_weights.forge if unset (default 1, >= 0)"
    )
    add_onnx_parser(sub)
    return p.parse_args(argv)


def check_cache_cap() -> None:
    """Refuse a bad ``$DISTILL_ENCODED_CACHE_MAX_MB`` before any work (``ml.data.encoded_cache.max_cache_bytes``).

    Raises:
        LoopError: the value is not a number >= 0 (or inf).
    """
    from ml.data.encoded_cache import CacheConfigError, max_cache_bytes
    from ml.driver.workspace import LoopError

    try:
        max_cache_bytes()
    except CacheConfigError as e:
        raise LoopError(str(e)) from None


def early_lock(args: argparse.Namespace) -> FileLock | None:
    """The one-instance lock of a command that takes it (``LOCKED``), taken before the driver's heavy
    imports so that a second loop.py is refused at once; None for the others, and where ``--repo`` has
    no ``.dvc/`` (``main`` takes it once ``Loop`` has checked the repository).

    Raises:
        LoopError: another loop.py holds it (``ml.driver.workspace.acquire_lock``).
    """
    from ml.driver.workspace import acquire_lock

    if args.command in LOCKED and (args.repo / ".dvc").is_dir():
        return acquire_lock(args.repo.resolve())
    return None


def main(argv: list[str] | None = None) -> int:
    """Run ``loop.py`` with ``argv``; returns the exit status (0 ok, 2 refused or failed, 3 blocked, 130 interrupted)."""
    args = parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s loop %(levelname)s %(message)s")
    from ml.driver.workspace import LoopError

    try:
        lock = early_lock(args)
    except LoopError as e:
        print(f"loop.py: {e}", file=sys.stderr)
        return 2
    return run(args, lock)


READ_ONLY = ("elo", "eval", "compare", "onnx")
"""The commands that change nothing in the repository (no lock, no checks of the tree)."""


def read_only(loop: Loop, args: argparse.Namespace) -> int:
    """Run a ``READ_ONLY`` command; returns its exit status."""
    if args.command == "elo":
        from ml.driver.commands import print_elo

        return print_elo(loop)
    if args.command == "eval":
        from ml.driver.evaluate import evaluate

        return evaluate(loop, args.games, args.json, args.agents)
    if args.command == "compare":
        from ml.driver.compare import compare

        gens = (args.generation_a, args.generation_b)
        gens = (gens[0] if gens[0] is not None else args.generation, gens[1] if gens[1] is not None else args.generation)
        return compare(loop.root, (args.run_a, args.run_b), args.games, gens, args.json)
    from ml.driver.onnx_cmd import onnx_command

    return onnx_command(loop, args.model, args.out)


def run(args: argparse.Namespace, lock: FileLock | None) -> int:
    """The command of ``args`` (``main``), holding ``lock`` when ``early_lock`` took it; returns the exit status."""
    # Each command's own modules are imported in its branch: a run imports no torch, numba or scipy.stats
    # (the stages do), so a (re)start costs about a second of imports (bench/bench_startup.py).
    from ml.base.io import WriteError
    from ml.config.params import load_params
    from ml.config.yaml_file import ParamsError
    from ml.driver.commands import apply_override, apply_profile, run_attempts
    from ml.driver.dataguard import refuse_foreign_data
    from ml.driver.experiments import set_aside_experiment
    from ml.driver.orchestrator import Loop
    from ml.driver.teacher_folder import TEACHER_DIR, foreign_files_message, foreign_teacher_files
    from ml.driver.workspace import LoopError, acquire_lock
    from ml.game.checks import check_params

    try:
        loop = Loop(args.repo)
        if args.command in READ_ONLY:
            return read_only(loop, args)
        lock = lock or acquire_lock(loop.root)
    except (LoopError, ParamsError, WriteError) as e:
        print(f"loop.py: {e}", file=sys.stderr)
        return 2  # an early lock is released with its FileLock, when this frame goes
    running = False
    try:
        loop.kill_strays()  # every command here holds the lock: what an earlier one left running goes
        if args.command is None:
            loop.clear_stale_dvc_locks()
        loop.preflight()
        loop.restore_torn_dvc_files()
        loop.finish_pending_commit()
        state = loop.load_state()
        load_params(loop.path("params.yaml"), check=check_params)  # a bad value is named before any dirty-tree complaint
        check_cache_cap()
        if args.command is None:  # a run or an override: refused before anything is written
            set_aside_experiment(loop, state)  # `dvc exp run`'s outputs stashed; params.yaml's value stays
            if foreign := foreign_teacher_files(loop.path(TEACHER_DIR)):
                raise LoopError(foreign_files_message(foreign, loop.root))
            refuse_foreign_data(loop.root, promotion_pending=state.in_flight is None or not state.in_flight.promoted)
        loop.commit_params_edit(state)  # params.yaml edited by hand between attempts: its own commit
        if args.command == "import-forge":  # before check_tree: the files may sit in data/teacher
            from ml.driver.forge_command import import_command

            return import_command(loop, args.paths, args.cards, args.weight)
        loop.check_tree(state)
        loop.check_records(state)
        if args.command == "promote":
            from ml.driver.model_commands import promote_command

            return promote_command(loop, args.attempt, args.name)
        if args.force_retry or args.skip_to_next_stage:
            apply_override(loop, skip=args.skip_to_next_stage)
        if args.profile:
            apply_profile(loop, args.profile)
        if args.seed_checkpoint:
            from ml.driver.model_commands import seed_checkpoint

            seed_checkpoint(loop, args.seed_checkpoint)
        running = True
        return run_attempts(loop, args.max_generations, args.max_attempts)
    except (LoopError, ParamsError, WriteError) as e:  # one line each, no traceback
        print(f"loop.py: {e}", file=sys.stderr)
        if running:  # a refused command line (bad profile, dirty tree, promote) leaves the run's status as it was
            detail = getattr(e, "detail", "")
            loop.write_status("error", message=(f"{e}\n{detail}" if detail else str(e))[-2000:])
        return 2
    except KeyboardInterrupt:
        print("\ninterrupted: run `python loop.py` again to resume where it stopped.", file=sys.stderr)
        loop.write_status("stopped", message="interrupted")
        return 130
    finally:
        loop.processes.release()
        lock.release()


if __name__ == "__main__":
    sys.exit(main())
