"""Exporter: the PPO agent's decisions from the games it won, in the Forge decision format.

The agent plays ``games`` pods against heuristic teachers (one seat, rotated through the
seats). After each game, the agent seat's records (the decision record plus the PPO
extension: ``source: ppo``, ``model_version``, ``generation``, ``reward``,
``episode_return``, ``action.macro_action``/``action_idx``) are appended to one batch file
``ml-decisions-ppo-<batch_id>.jsonl``, if the agent won or ``only_wins`` is off. The file
appears under its final name when the batch is complete. The games are cut into chunks of
``compute.chunk_games`` by game index (0: one chunk, the games as before chunks existed), each
sampling with its own seed (``ml.runtime.compute.chunk_seed``) and played by the stage's executor
(here or on a Ray cluster: the same batch either way); the exported records of one chunk per
slot are held in memory.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import torch

from ml.base.progress import ProgressBar
from ml.data.batch_files import BatchWriter
from ml.game.registry import GameSpec
from ml.model.policy import PolicyNet
from ml.play.rollout import Controller, game_seeds, play_games, rotated_seatings
from ml.runtime.compute import LOCAL, Executor, chunk_ranges, chunk_seed

logger = logging.getLogger(__name__)


def _agent_seat(seats: list[str]) -> list[int]:
    return [seats.index("agent")]


def _export_chunk(task: tuple[int, range], setup: tuple) -> list[tuple[bool, list[dict] | None, str, float]]:
    """Play one chunk: per game in completion order, whether the agent won, its records (None when
    not exported), the outcome and the agent's return."""
    k, games = task
    net, game, seatings, seeds, num_envs, seed, encoder, only_wins = setup
    controllers = {"agent": Controller("net", net), "heuristic": Controller("heuristic")}
    runner = play_games(
        seatings, seeds, controllers, num_envs=num_envs, encoder=encoder, generator=torch.Generator().manual_seed(chunk_seed(seed, k)),
        log_seats=_agent_seat, game=game, indices=games,
    )  # fmt: skip
    out = []
    for result in runner:
        seat = result.seats.index("agent")
        won = result.winner == seat
        out.append((won, result.records if won or not only_wins else None, result.outcome, float(result.returns[seat])))
    return out


def export_batch(
    net: PolicyNet,
    out_dir: Path,
    *,
    batch_id: str,
    model_version: str,
    generation: int,
    games: int,
    only_wins: bool,
    game: GameSpec,
    num_envs: int,
    seed: int,
    encoder: Any = None,
    progress: bool = True,
    executor: Executor = LOCAL,
    chunk_games: int = 0,
) -> dict:
    """Play ``games`` pods and stream the agent's exported decisions to one batch file.

    Rewards: the environment's (the commander's zero-sum scheme: winner +1, others
    -1/(n-1), draw 0; see ``ml.game.openspiel_env`` for OpenSpiel games), received at the
    agent's last decision; ``episode_return`` is the agent seat's total.

    Args:
        net: the PPO agent (sampled, not greedy).
        out_dir: folder of the batch file (created when missing; an older batch of the same
            id is replaced when the new one is complete).
        batch_id: the batch file's id (``gen<G:03d>-a<A>``; see ``ml.data.batch_files.batch_filename``).
        model_version: written into every exported record.
        generation: written into every exported record.
        games: games to play (the agent's seat rotates with the game index).
        only_wins: export only the games the agent won (first place; a draw is no win).
        game: the game (``ml.game.registry.make_game``): ``num_players`` seats per game, the
            commander's ``max_turns`` cap.
        num_envs: games played at once (batched).
        seed: seeds the game seeds and the action sampling (``Params.stage_seed("export")``).
        encoder: the commander's observation encoder (None: a new one).
        progress: show a progress bar.
        executor: where the chunks are played (``ml.runtime.compute.make_executor``; the batch is the same).
        chunk_games: games per chunk (0: one chunk); changes the games (each chunk samples with its own seed).

    Returns:
        ``export/…`` metrics: ``games_played``, ``games_won``, ``games_exported`` (games),
        ``decisions_exported`` (decisions), ``batch`` (the file name) and, for a PettingZoo
        game, ``env_version`` (the env that produced it, ``GameSpec.env_version``).

    Raises:
        ml.data.batch_files.RecordError: if a produced record does not fit the schema (a bug).
        ml.runtime.compute.ComputeError: the Ray cluster was lost mid-stage.
    """
    pod_size = game.num_players
    seatings = rotated_seatings(games, pod_size, "agent", lambda g: ["heuristic"] * (pod_size - 1))
    setup = executor.share((net, game, seatings, game_seeds(seed, games), num_envs, seed, encoder, only_wins))
    tasks = list(enumerate(chunk_ranges(games, chunk_games)))
    won = 0
    with BatchWriter(out_dir, "ppo", batch_id) as writer:
        bar = ProgressBar(total=games, desc="export", unit="game", disable=not progress)
        for chunk in executor.imap(_export_chunk, tasks, setup):
            bar.update(len(chunk))
            for agent_won, records, outcome, episode_return in chunk:
                won += int(agent_won)
                if records is None:
                    continue
                for i, rec in enumerate(records):
                    rec["model_version"] = model_version
                    rec["generation"] = generation
                    rec["reward"] = episode_return if i == len(records) - 1 else 0.0
                    rec["episode_return"] = episode_return
                if records:
                    writer.write_game(records, outcome)
        bar.close()
        exported_games, exported_decisions, path = writer.games, writer.decisions, writer.path
    return {
        "export/games_played": games,
        "export/games_won": won,
        "export/games_exported": exported_games,
        "export/decisions_exported": exported_decisions,
        "export/batch": path.name,
        **({"export/env_version": game.env_version} if game.env_version else {}),
    }
