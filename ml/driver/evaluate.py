"""``loop.py eval``: each accepted generation's student measured against the teacher.

Reads the run's params.yaml and state and changes nothing but the optional ``--json`` file.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from pathlib import Path

from ml.base.io import atomic_write_json, read_json
from ml.config.params import load_params
from ml.driver import history
from ml.driver.orchestrator import Loop
from ml.driver.state import HISTORY_FILE
from ml.game.registry import make_game
from ml.judge.deals import pod_win_rate
from ml.model.policy import CheckpointError, check_shape, load_policy
from ml.play.controller import Controller
from ml.runtime.compute import open_executor


def accepted_students(loop: Loop, folder: str = "students") -> list[Path]:
    """Student checkpoints of the accepted generations, oldest first (``folder="frozen"``: their PPO agents).

    ``data/merged/students`` (the last merge's output) already holds the newest accepted
    generation's student, which reaches ``data/students`` only when the next attempt starts;
    ``data/students`` is the fallback while a merge is rewriting its output.
    """
    merged = sorted(loop.path(f"data/merged/{folder}").glob("gen*.pt"))
    return merged or sorted(loop.path(f"data/{folder}").glob("gen*.pt"))


def _chips(row: Mapping[str, object], mean: str, low: str, high: str) -> str:
    """``+0.123 [-0.100, +0.350]`` (chips per game), ``+0.123`` without an interval (one deal), ``-`` without a figure."""
    if row.get(mean) is None:
        return "-"
    if row.get(low) is None:
        return f"{row[mean]:+.3f}"
    return f"{row[mean]:+.3f} [{row[low]:+.3f}, {row[high]:+.3f}]"


def evaluate(loop: Loop, games: int, out: Path | None, agents: bool = False) -> int:
    """``loop.py eval``: the table of accepted generations, each student measured against the teacher.

    Progress goes to stderr (a bar per student on a terminal, cleared when the student is done;
    ``ml.base.progress`` lines otherwise); the table goes to stdout once every student is measured.

    Per generation g: student g (``accepted_students``, greedy) in seat-rotated duplicate
    deals against pod_size - 1 teachers on deals no stage played; the share of PPO data in
    student g's training set and the gate's win rate of PPO agent g (from
    state/eval_history.json, the accepted attempt); student g's Elo in the latest tournament
    (state/elo_history.json). In a two-player zero-sum game (``GameSpec.zero_sum``) also its
    mean return against the teacher (``mean_return``, ``return_low``/``return_high``: chips per
    game, 95% t interval by deal) and against the previous accepted student on the same deals
    (``previous_return``, ``previous_low``/``previous_high``; None for the first).

    Args:
        loop: the loop of the run.
        games: games per student (rounded down to whole deals of ``game.pod_size`` games; at least one deal).
        out: also write the rows to this JSON file (None: do not).
        agents: measure each accepted generation's PPO agent (``data/merged/frozen``) in place of its student.

    Returns:
        The exit status: 0, or 2 for a bad ``games``/``out`` or a checkpoint that does not fit the game.
        A row's ``ppo_share`` is None for a student with no accepted history entry (not yet committed).

    Raises:
        ParamsError: params.yaml does not validate.
    """
    if out is not None and out.is_dir():
        print(f"loop.py eval: --json {out} is a directory; give a file path", file=sys.stderr)
        return 2
    params = load_params(loop.path("params.yaml"))
    n = params.game.pod_size
    if games < n:
        print(f"loop.py eval: --games must be at least {n}: one duplicate deal is pod_size = {n} games", file=sys.stderr)
        return 2
    students = accepted_students(loop, "frozen" if agents else "students")
    if not students:
        print("no students yet: each accepted generation adds one (run `python loop.py`)")
        return 0
    history_path = loop.path(HISTORY_FILE)
    accepted = {
        e["generation"]: e for e in (read_json(history_path) if history_path.exists() else []) if e["verdict"] == "accepted"
    }
    elo_runs = history.elo_history(loop.root)
    elo = {r["player"]: r for r in (elo_runs[-1]["table"] if elo_runs else [])}
    game = make_game(params.game, params.teacher)
    deals = games // n  # whole duplicate deals
    played = deals * n
    rounded = f", --games {games} rounded down to whole deals" if played != games else ""
    rows = []
    previous: Controller | None = None
    with open_executor(params.compute, params.base.torch_threads) as executor:
        for path in students:  # progress on stderr, each bar cleared when its student is done
            net, _ = load_policy(path)
            try:
                check_shape(net, game.obs_dim, game.num_actions, str(path.relative_to(loop.root)))
            except CheckpointError as e:
                print(f"loop.py eval: {e}", file=sys.stderr)
                return 2
            measured = Controller("net", net, greedy=True)
            shown = sys.stderr.isatty()
            row: dict[str, object] = {**pod_win_rate(
                measured, Controller("teacher"), games=games, game=game, num_envs=params.selfplay.num_envs,
                seed=params.stage_seed("eval"), label=f"eval {path.stem}" if shown else None, executor=executor,
            ).row()}  # fmt: skip
            if game.zero_sum:  # chips against the previous accepted student, on the same deals
                against = None if previous is None else pod_win_rate(
                    measured, previous, games=games, game=game, num_envs=params.selfplay.num_envs, seed=params.stage_seed("eval"),
                    label=f"eval {path.stem} vs previous" if shown else None, executor=executor,
                )  # fmt: skip
                row.update(
                    previous_return=against and against.mean_return, previous_low=against and against.return_low,
                    previous_high=against and against.return_high,
                )  # fmt: skip
                previous = measured
            fig = accepted.get(int(path.stem[3:]), {}).get("figures", {}) if path.stem[3:].isdigit() else {}
            rating = elo.get(path.stem)
            rows.append({
                "student": path.stem, "policy": str(path.relative_to(loop.root)), **row, "ppo_share": fig.get("sampled_share", {}).get("ppo", 0.0) if fig else None,
                "agent_win_rate": fig.get("win_rate"), "agent_low": fig.get("win_rate_low"), "agent_high": fig.get("win_rate_high"),
                "elo": rating and rating["elo"], "elo_low": rating and rating["low"], "elo_high": rating and rating["high"],
            })  # fmt: skip
    sys.stderr.flush()
    chips = game.zero_sum
    print(  # the table, on stdout, once every bar is done
        f"{'PPO agents' if agents else 'students'} (greedy) in pods against {n - 1} teachers ({game.teacher_name}), {played} games each "
        f"({deals} deal{'' if deals == 1 else 's'}{rounded}); parity {1 / n:.3f}"
        + (f"; chips per game, par {game.par_return:g}" if chips else "")
        + ("; Elo and PPO share: that generation's student" if agents else "")
        + f"\n{'agent' if agents else 'student':8s} {'win rate [95% by deal]':<24s} {'draws':>6s} {'PPO agent (gate)':>26s} {'Elo [95%]':>20s} {'PPO share':>9s}"
        + (f" {'chips vs teacher [95%]':>26s} {'chips vs previous [95%]':>26s}" if chips else "")
    )
    for row in rows:
        agent = (
            f"{row['agent_win_rate']:.3f} [{row['agent_low']:.3f}, {row['agent_high']:.3f}]"
            if row["agent_win_rate"] is not None
            else "-"
        )
        rated = f"{row['elo']:.0f} [{row['elo_low']:.0f}, {row['elo_high']:.0f}]" if row["elo"] is not None else "-"
        share = f"{row['ppo_share']:.3f}" if row["ppo_share"] is not None else "-"  # no accepted entry (yet)
        print(
            f"{row['student']:8s} {row['win_rate']:.3f} [{row['low']:.3f}, {row['high']:.3f}]".ljust(33)
            + f" {row['draws']:6d} {agent:>26s} {rated:>20s} {share:>9s}"
            + (
                f" {_chips(row, 'mean_return', 'return_low', 'return_high'):>26s} {_chips(row, 'previous_return', 'previous_low', 'previous_high'):>26s}"
                if chips
                else ""
            )
        )
    if out is not None:
        atomic_write_json(out, rows)
    return 0
