"""DVC stage `rate`: the rating tournament of an accepted generation.

Reads the gate's verdict (``metrics/gate.json``) and every accepted generation's student
(``<students>``: ``data/merged/students``, the newest included), plays the tournament
(``ml.judge.tournament.play_tournament``: ``rating.games`` pods, each holding the newest
student, seeded by ``stage_seed("rating")``) and writes ``<out>`` (``data/tournament.json``,
``ml.judge.elo.PlayedTournament``) and ``metrics/rate.json``. A rejected attempt plays
no game. The refit over every generation's games is the driver's (``loop.py`` records the
games in ``state/tournament.jsonl`` and the refit in ``state/elo_history.json``,
``ml.judge.elo.record_tournament``): the games of past attempts are its state, not a DVC input.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ml.runtime.cli import exit_stage, stage_main, stage_setup, write_metrics


def _args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--gate", type=Path, required=True, help="gate metrics JSON (the verdict)")
    p.add_argument("--students", type=Path, required=True, help="folder of every accepted generation's student")
    p.add_argument("--out", type=Path, required=True, help="tournament JSON to write")
    p.add_argument("--metrics", type=Path, required=True, help="metrics JSON to write")


@stage_main
def main(argv: list[str] | None = None) -> int:
    args, params = stage_setup("rate", __doc__, argv, _args)
    from ml.base.io import DataFileError, read_json
    from ml.game.registry import make_game
    from ml.judge.elo import PlayedTournament
    from ml.judge.tournament import TournamentPlay, play_tournament
    from ml.model.policy import CheckpointError, load_policy
    from ml.runtime.compute import open_executor
    from ml.runtime.executor import ComputeError

    try:
        verdict = read_json(args.gate)
        if not isinstance(verdict, dict) or not isinstance(verdict.get("gate/accepted"), bool):
            raise DataFileError(args.gate, None, "gate/accepted", "missing or not true/false: not the gate stage's metrics")
        accepted = verdict["gate/accepted"]
        paths = sorted(args.students.glob("*.pt"))
        played = PlayedTournament(
            generation=params.run.generation, accepted=accepted, students=[p.stem for p in paths], games=[]
        )
        if accepted and played.newest not in played.students:
            raise DataFileError(
                args.students, None, None, f"no {played.newest}.pt, the accepted student the merge stage puts there"
            )
        students = {p.stem: load_policy(p)[0] for p in paths} if accepted and params.rating.games else {}
    except FileNotFoundError as e:
        print(f"error: {e.filename}: not found", file=sys.stderr)
        return 2
    except (DataFileError, CheckpointError) as e:  # a bad verdict file or checkpoint: one line
        print(f"error: {e}", file=sys.stderr)
        return 2
    if students:
        play = TournamentPlay(
            params.rating.games, params.selfplay.num_envs, params.stage_seed("rating"), params.compute.chunk_games
        )
        try:
            with open_executor(params.compute, params.base.torch_threads) as executor:
                games = play_tournament(
                    students,
                    played.newest,
                    play,
                    make_game(params.game, params.teacher),
                    executor=executor,
                    progress=args.progress,
                )
        except ComputeError as e:
            print(f"error: {e}", file=sys.stderr)
            return 2
        played = played.model_copy(update={"games": games})
    played.write(args.out)
    metrics = {"rate/accepted": accepted, "rate/games": len(played.games), "rate/students": len(played.students)}
    write_metrics(args.metrics, metrics, args, "rate", episodes=len(played.games))
    return 0


if __name__ == "__main__":
    exit_stage(main())
