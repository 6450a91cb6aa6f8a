"""Exporter: the PPO agent's decisions from the games it won, in the Forge decision format.

The agent plays ``games`` pods against heuristic teachers (one seat, rotated through the
seats). After each game, the agent seat's records (the decision record plus the PPO
extension: ``source: ppo``, ``model_version``, ``generation``, ``reward``,
``episode_return``, ``action.macro_action``/``action_idx``) are appended to one batch file
``ml-decisions-ppo-<batch_id>.jsonl``, if the agent won or ``only_wins`` is off. Only one
game is held in memory; the file appears under its final name when the batch is complete.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import torch

from ml.game.registry import GameSpec
from ml.policy import PolicyNet
from ml.progress import ProgressBar
from ml.records import BatchWriter
from ml.rollout import Controller, game_seeds, play_games, rotated_seatings

logger = logging.getLogger(__name__)


def export_batch(
    net: PolicyNet,
    out_dir: Path,
    *,
    batch_id: str,
    model_version: str,
    generation: int,
    games: int,
    only_wins: bool,
    pod_size: int,
    max_turns: int,
    num_envs: int,
    seed: int,
    encoder: Any = None,
    progress: bool = True,
    game: GameSpec | None = None,
) -> dict:
    """Play ``games`` pods and stream the agent's exported decisions to one batch file.

    Rewards: the environment's (the commander's zero-sum scheme: winner +1, others
    -1/(n-1), draw 0; see ``ml.game.openspiel_env`` for OpenSpiel games), received at the
    agent's last decision; ``episode_return`` is the agent seat's total. ``game``
    (``ml.game.registry``) defaults to the commander of ``pod_size`` and ``max_turns``.

    Args:
        net: the PPO agent (sampled, not greedy).
        out_dir: folder of the batch file (created when missing; an older batch of the same
            id is replaced when the new one is complete).
        batch_id: the batch file's id (``gen<G:03d>-a<A>``; see ``ml.records.batch_filename``).
        model_version: written into every exported record.
        generation: written into every exported record.
        games: games to play (the agent's seat rotates with the game index).
        only_wins: export only the games the agent won (first place; a draw is no win).
        pod_size: players per game.
        max_turns: turn cap in rounds (commander only).
        num_envs: games played at once (batched).
        seed: seeds the game seeds and the action sampling (``Params.stage_seed("export")``).
        encoder: the commander's observation encoder (None: a new one).
        progress: show a progress bar.
        game: the game (None: the commander).

    Returns:
        ``export/…`` metrics: ``games_played``, ``games_won``, ``games_exported`` (games),
        ``decisions_exported`` (decisions) and ``batch`` (the file name).

    Raises:
        ml.records.RecordError: if a produced record does not fit the schema (a bug).
    """
    controllers = {"agent": Controller("net", net), "heuristic": Controller("heuristic")}
    seatings = rotated_seatings(games, pod_size, "agent", lambda g: ["heuristic"] * (pod_size - 1))
    gen = torch.Generator().manual_seed(seed)
    won = 0
    with BatchWriter(out_dir, "ppo", batch_id) as writer:
        runner = play_games(
            seatings, game_seeds(seed, games), controllers, pod_size=pod_size, max_turns=max_turns, num_envs=num_envs,
            encoder=encoder, generator=gen, log_seats=lambda seats: [seats.index("agent")], game=game,
        )  # fmt: skip
        for result in ProgressBar(runner, total=games, desc="export", unit="game", disable=not progress):
            seat = result.seats.index("agent")
            won += int(result.winner == seat)
            if only_wins and result.winner != seat:
                continue
            records = result.records
            episode_return = float(result.returns[seat])
            for i, rec in enumerate(records):
                rec["model_version"] = model_version
                rec["generation"] = generation
                rec["reward"] = episode_return if i == len(records) - 1 else 0.0
                rec["episode_return"] = episode_return
            if records:
                writer.write_game(records, result.outcome)
        exported_games, exported_decisions, path = writer.games, writer.decisions, writer.path
    return {
        "export/games_played": games,
        "export/games_won": won,
        "export/games_exported": exported_games,
        "export/decisions_exported": exported_decisions,
        "export/batch": path.name,
    }
