"""The per-generation table of a finished run, as Markdown: student, agent, league Elo, learner
decisions, CPU time and wall.

Reads the run's ``state/eval_history.json`` (each accepted attempt's learner decisions, and the
CPU and wall seconds of every attempt up to it, rejected ones included), ``state/elo_history.json``
(the last refit: every generation's Elo in one fit of all tournament games) and the JSON files of
``loop.py eval --json`` (students) and ``loop.py eval --agents --json`` (agents).

Usage: python bench/run_table.py RUN --students students.json [--agents agents.json]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("run", type=Path, help="the run's clone")
    parser.add_argument("--students", type=Path, required=True, help="loop.py eval --json output")
    parser.add_argument("--agents", type=Path, help="loop.py eval --agents --json output")
    args = parser.parse_args()
    history = json.loads((args.run / "state/eval_history.json").read_text())
    elo_runs = json.loads((args.run / "state/elo_history.json").read_text())
    elo = {r["player"]: r for r in (elo_runs[-1]["table"] if elo_runs else [])}
    students = {r["student"]: r for r in json.loads(args.students.read_text())}
    agents = {r["student"]: r for r in json.loads(args.agents.read_text())} if args.agents else {}
    print("| generation | student vs 3 teachers [95% by deal] | agent vs 3 teachers | student Elo [95%] "
          "| learner decisions (cumulative) | CPU h (cumulative) | wall min (cumulative) |")  # fmt: skip
    print("|---|---|---|---|---|---|---|")
    cpu = wall = decisions = 0.0
    for entry in history:
        metrics = entry.get("metrics") or {}
        for stage, seconds in (entry.get("stage_wall_s") or {}).items():
            cpu += float((metrics.get(stage) or {}).get(f"{stage}/cpu_s", seconds))
        wall += float(entry.get("wall_s") or 0.0)
        decisions += (
            float((metrics.get("selfplay") or {}).get("selfplay/decisions", 0))
            if "selfplay" in entry.get("stage_wall_s", {})
            else 0
        )
        if entry["verdict"] != "accepted":
            continue
        name = f"gen{entry['generation']:03d}"

        def cell(rows: dict, key: str = name) -> str:
            r = rows.get(key)
            return f"{r['win_rate']:.3f} [{r['low']:.3f}, {r['high']:.3f}]" if r else "-"

        e = elo.get(name)
        rating = f"{e['elo']:.0f} [{e['low']:.0f}, {e['high']:.0f}]" if e else "-"
        print(f"| {entry['generation']} | {cell(students)} | {cell(agents)} | {rating} | {decisions / 1e6:.1f}M "
              f"| {cpu / 3600:.2f} | {wall / 60:.0f} |")  # fmt: skip


if __name__ == "__main__":
    main()
