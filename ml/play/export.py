"""Exporter: the PPO agent's decisions from the games it won, in the Forge decision format.

The agent plays ``games`` pods against heuristic teachers (one seat, rotated through the
seats). After each game, the agent seat's records (the decision record plus the PPO
extension: ``source: ppo``, ``model_version``, ``generation``, ``reward``,
``episode_return``, ``action.macro_action``/``action_idx``) are appended to one batch file
``ml-decisions-ppo-<batch_id>.jsonl``, if the agent won or ``only_wins`` is off. The file
appears under its final name when the batch is complete. The games are cut into chunks of
``compute.chunk_games`` by game index (0: one chunk, the games as before chunks existed), each
sampling with its own seed (``ml.runtime.executor.chunk_seed``) and played by the stage's executor
(here or on a Ray cluster: the same batch either way); the exported records of one chunk per
slot are held in memory.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Literal, NamedTuple, TypedDict

import torch
from typing_extensions import NotRequired  # typing's from Python 3.11

from ml.base.progress import ProgressBar
from ml.data.batch_files import BatchWriter
from ml.game.protocol import GameSpec
from ml.game.spec import Encoder
from ml.model.policy import PolicyNet
from ml.play.controller import Controller
from ml.play.runner import Keep, Pods, StagePlay, play_games
from ml.play.seating import game_seeds, rotated_seatings
from ml.runtime.executor import chunk_ranges, chunk_seed

if TYPE_CHECKING:
    from ml.config.sections import ExportParams, RunParams

logger = logging.getLogger(__name__)


ExportMetrics = TypedDict(
    "ExportMetrics",
    {
        "export/games_played": int,
        "export/games_won": int,
        "export/games_exported": int,
        "export/decisions_exported": int,
        "export/batch": str,
        "export/env_version": NotRequired[str],
    },
)
"""``export_batch``'s metrics (see its Returns)."""


def _agent_seat(seats: list[str]) -> list[int]:
    return [seats.index("agent")]


@dataclass(frozen=True)
class ExportSetup:
    """What every chunk of an export plays (shared once per stage; picklable, it crosses process and Ray boundaries).

    Attributes:
        net: the PPO agent.
        game: the game.
        pods: every game's seating and simulator seed.
        num_envs: games played at once (batched).
        seed: the stage's seed; chunk ``k`` samples with ``chunk_seed(seed, k)``.
        encoder: the commander's observation encoder (None: a new one).
        only_wins: keep the records of the games the agent won only.
        explore: share of the agent's moves drawn uniformly from the legal ones (``export.explore``).
        targets: whose distribution the records keep as ``policy`` (``export.targets``).
    """

    net: PolicyNet
    game: GameSpec
    pods: Pods
    num_envs: int
    seed: int
    encoder: Encoder | None
    only_wins: bool
    explore: float = 0.0
    targets: Literal["agent", "teacher"] = "agent"


class ExportedGame(NamedTuple):
    """One game of an export chunk: whether the agent won, its records (None: not exported), the outcome, its return."""

    won: bool
    records: list[dict[str, object]] | None
    outcome: str
    episode_return: float


def _export_chunk(task: tuple[int, range], setup: ExportSetup) -> list[ExportedGame]:
    """Play one chunk: per game in completion order, what ``ExportedGame`` holds."""
    k, games = task
    controllers = {
        "agent": Controller("net", setup.net, explore=setup.explore, targets=setup.targets),
        "teacher": Controller("teacher"),
    }
    runner = play_games(
        replace(setup.pods, indices=games), controllers, game=setup.game, num_envs=setup.num_envs, encoder=setup.encoder,
        generator=torch.Generator().manual_seed(chunk_seed(setup.seed, k)), keep=Keep(log_seats=_agent_seat),
    )  # fmt: skip
    out = []
    for result in runner:
        seat = result.seats.index("agent")
        won = result.winner == seat
        out.append(ExportedGame(won, result.records if won or not setup.only_wins else None, result.outcome,
                                float(result.returns[seat])))  # fmt: skip
    return out


def export_batch(
    net: PolicyNet,
    out_dir: Path,
    cfg: ExportParams,
    run: RunParams,
    game: GameSpec,
    how: StagePlay,
    *,
    num_envs: int,
    encoder: Encoder | None = None,
) -> ExportMetrics:
    """Play ``cfg.games`` pods and stream the agent's exported decisions to one batch file.

    Rewards: the environment's (the commander's zero-sum scheme: winner +1, others
    -1/(n-1), draw 0; see ``ml.game.openspiel.env`` for OpenSpiel games), received at the
    agent's last decision; ``episode_return`` is the agent seat's total.

    Args:
        net: the PPO agent (sampled, not greedy).
        out_dir: folder of the batch file (created when missing; an older batch of the same
            id is replaced when the new one is complete).
        cfg: the ``export`` params: ``games`` to play (the agent's seat rotates with the game
            index), ``only_wins`` (export only the games the agent won: first place; a draw is no win),
            ``explore`` (share of the agent's moves drawn uniformly; its records keep the agent's distribution),
            ``targets`` (the records' ``policy``: the agent's distribution, or the teacher's at the agent's decisions).
        run: the attempt: its ``batch_id`` names the batch file (``ml.data.batch_files.batch_filename``),
            its ``model_version`` and ``generation`` are written into every exported record.
        game: the game (``ml.game.registry.make_game``): ``num_players`` seats per game, the
            commander's ``max_turns`` cap.
        how: ``seed`` seeds the game seeds and the action sampling (``Params.stage_seed("export")``),
            a progress bar, the executor (the batch is the same) and ``chunk_games`` (0: one chunk;
            changes the games: each chunk samples with its own seed).
        num_envs: games played at once (batched).
        encoder: the commander's observation encoder (None: a new one).

    Returns:
        ``export/…`` metrics: ``games_played``, ``games_won``, ``games_exported`` (games),
        ``decisions_exported`` (decisions), ``batch`` (the file name) and, for a PettingZoo
        game, ``env_version`` (the env that produced it, ``GameSpec.env_version``).

    Raises:
        ml.data.batch_files.RecordError: if a produced record does not fit the schema (a bug).
        ml.runtime.executor.ComputeError: the Ray cluster was lost mid-stage.
    """
    games, pod_size, executor = cfg.games, game.num_players, how.executor
    seatings = rotated_seatings(games, pod_size, "agent", lambda g: ["teacher"] * (pod_size - 1))
    pods = Pods(seatings, game_seeds(how.seed, games))
    setup = executor.share(ExportSetup(net, game, pods, num_envs, how.seed, encoder, cfg.only_wins, cfg.explore, cfg.targets))
    tasks = list(enumerate(chunk_ranges(games, how.chunk_games)))
    won = 0
    with BatchWriter(out_dir, "ppo", run.batch_id) as writer:
        bar = ProgressBar(total=games, desc="export", unit="game", disable=not how.progress)
        for chunk in executor.imap(_export_chunk, tasks, setup):
            bar.update(len(chunk))
            for agent_won, records, outcome, episode_return in chunk:
                won += int(agent_won)
                if records is None:
                    continue
                for i, rec in enumerate(records):
                    rec["model_version"] = run.model_version
                    rec["generation"] = run.generation
                    rec["reward"] = episode_return if i == len(records) - 1 else 0.0
                    rec["episode_return"] = episode_return
                if records:
                    writer.write_game(records, outcome)
        bar.close()
        exported_games, exported_decisions, path = writer.games, writer.decisions, writer.path
    metrics: ExportMetrics = {
        "export/games_played": games,
        "export/games_won": won,
        "export/games_exported": exported_games,
        "export/decisions_exported": exported_decisions,
        "export/batch": path.name,
    }
    if game.env_version:
        metrics["export/env_version"] = game.env_version
    return metrics
