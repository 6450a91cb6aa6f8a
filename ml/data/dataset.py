"""Source-aware dataset builder: teacher and PPO decision files -> encoded arrays.

* **Sources.** Teacher batches (``ml-decisions-sim-*.jsonl``, source ``sim``), real Forge
  files imported into their own folder (``python loop.py import-forge``; read there only,
  source ``forge``, a bad line reported and left out) and accepted PPO batches
  (``ml-decisions-ppo-*.jsonl``, source ``ppo``). Every sample keeps its source tag.
* **Holdout.** A fixed 10-15% of *teacher games* (never single decisions) is held out:
  a game is in the holdout when the SHA-256 of its ``game_id`` falls below the fraction,
  so the split does not move when more data arrives and never depends on a seed.
* **Reward filter.** PPO games whose ``episode_return`` is below ``min_reward_threshold``
  are dropped.
* **Once per batch.** Every file is read through the encoded-batch cache
  (``ml.data.encoded_cache``) when one is given; only the files the loaders need are read (the PPO
  window's, not the whole pool).

What a decision set is and how records are encoded: ``ml.data.decisions``.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from ml.base.io import JSONObject
from ml.data.batch_files import scan_batches
from ml.data.decisions import DecisionSet, empty_set, in_holdout
from ml.data.encoded_cache import EncodedCache, encode_file
from ml.game.spec import Encoder
from ml.runtime.executor import LOCAL, Executor

logger = logging.getLogger(__name__)


def _skip_stats(skipped: Counter[tuple[str, str]], decisions: int, top: int = 10) -> JSONObject:
    """Metrics of the non-trainable decisions: by reason, and each reason's most frequent details."""
    by_reason: Counter[str] = Counter()
    details: dict[str, Counter[str]] = {}
    for (reason, detail), n in skipped.items():
        by_reason[reason] += n
        if detail:
            details.setdefault(reason, Counter())[detail] += n
    total = sum(by_reason.values())
    if total:
        parts = []
        for reason, n in by_reason.most_common():
            top5 = ", ".join(f"{d!r} {k}" for d, k in details.get(reason, Counter()).most_common(5))
            parts.append(f"{reason} {n}" + (f" (most frequent: {top5})" if top5 else ""))
        logger.info("%d of %d teacher decisions are not trainable: %s", total, decisions, "; ".join(parts))
    return {
        "non_trainable_decisions": total,
        "non_trainable_by_reason": dict(by_reason.most_common()),
        "non_trainable_top": {r: dict(c.most_common(top)) for r, c in sorted(details.items())},
    }


def teacher_files(teacher_dirs: Sequence[Path], forge_dirs: Sequence[Path] = ()) -> tuple[list[Path], list[Path]]:
    """The files ``load_teacher`` reads: the teacher batches and the imported Forge files."""
    paths = [p for d in teacher_dirs for p in scan_batches(d, sources=("sim",))]
    return paths, [p for d in forge_dirs for p in scan_batches(d, sources=(), include_forge=True)]


def ppo_files(pool_dirs: Sequence[Path], window: int = 0) -> list[Path]:
    """The PPO batches ``load_ppo`` reads: all of ``pool_dirs`` by name, the newest ``window`` (0: all)."""
    paths = sorted((p for d in pool_dirs for p in scan_batches(d, sources=("ppo",))), key=lambda p: p.name)
    return paths[-window:] if window else paths


def load_teacher(
    teacher_dirs: list[Path],
    holdout_fraction: float,
    encoder: Encoder,
    forge_dirs: Sequence[Path] = (),
    cache: EncodedCache | None = None,
    executor: Executor = LOCAL,
) -> tuple[DecisionSet, DecisionSet, JSONObject]:
    """Teacher decisions split by game into (train, holdout).

    Args:
        teacher_dirs: folders holding ``ml-decisions-sim-*.jsonl`` (Forge files there are
            left out with a warning: they belong in the imported Forge folder).
        holdout_fraction: share of teacher games held out (0.10-0.15).
        encoder: the game's encoder (see ``encode_records``).
        forge_dirs: folders of imported Forge files (``ml-decisions-<8 hex>[-tN].jsonl``,
            ``python loop.py import-forge``). A bad line there is logged
            (``file:line: field: problem``), counted and left out; the good lines are kept.
        cache: the encoded-batch cache (``EncodedCache``), or None: each file parsed here.
        executor: parses a large file in pieces where it has workers (``encode_file``); the same result.

    Returns:
        ``(train, holdout, stats)``; stats counts files, games and decisions (trainable,
        partial labels, non-trainable by reason and their most frequent details, e.g. the
        unknown cards) and the bad Forge lines.

    Raises:
        ml.data.batch_files.RecordError: a malformed line in a teacher batch, naming file, line and field.
    """
    paths, forge_paths = teacher_files(teacher_dirs, forge_dirs)
    stray = [p for d in teacher_dirs for p in scan_batches(d, sources=(), include_forge=True)]
    if stray:
        logger.warning(
            "%d Forge file(s) in %s left out: import them with `python loop.py import-forge`", len(stray), teacher_dirs[0]
        )
    files = [encode_file(p, encoder, cache, executor=executor) for p in paths]
    files += [encode_file(p, encoder, cache, tolerant=True, executor=executor) for p in forge_paths]
    bad = [line for f in files for line in f.bad_lines]
    for line in bad:
        logger.warning("%s (left out)", line)
    held_game = {g: in_holdout(g, holdout_fraction) for f in files for g in set(f.game_id.tolist())}
    held = [np.asarray([held_game[g] for g in f.game_id.tolist()], dtype=bool) for f in files]
    parts = [
        (f.data.subset(f.row[~h & (f.row >= 0)]), f.data.subset(f.row[h & (f.row >= 0)]))
        for f, h in zip(files, held, strict=True)
    ]
    empty = empty_set(encoder.obs_dim, encoder.num_actions)
    train = DecisionSet.concat([empty, *(t for t, _ in parts)])
    holdout = DecisionSet.concat([empty, *(h for _, h in parts)])
    skipped: Counter[tuple[str, str]] = Counter()
    for f, h in zip(files, held, strict=True):
        skipped += f.skipped(np.ones(len(h), dtype=bool))
    games = {g for f in files for g in f.game_id.tolist()}
    held_games = {g for g in games if held_game[g]}
    stats = {
        "teacher_files": len(paths),
        "forge_files": len(forge_paths),
        "forge_bad_lines": len(bad),
        "teacher_games": len(games),
        "holdout_games": len(held_games),
        "teacher_decisions": sum(len(f.game_id) for f in files),
        "trainable_decisions": len(train) + len(holdout),
        "partial_label_decisions": int((train.label < 0).sum() + (holdout.label < 0).sum()),
        **_skip_stats(skipped, sum(len(f.game_id) for f in files)),
    }
    return train, holdout, stats


def load_ppo(
    pool_dirs: list[Path],
    encoder: Encoder,
    min_reward_threshold: float | None,
    window: int = 0,
    cache: EncodedCache | None = None,
    recency: float = 1.0,
    per_batch: bool = False,
    executor: Executor = LOCAL,
) -> tuple[DecisionSet, JSONObject]:
    """Accepted PPO decisions whose game's ``episode_return`` >= ``min_reward_threshold``.

    Args:
        pool_dirs: folders of accepted batches.
        encoder: the game's record encoder.
        min_reward_threshold: games below this ``episode_return`` are dropped (None: none is).
        window: keep only the newest ``window`` batches (by batch name, ``gen<NNN>-a<k>``:
            the generation that produced them); 0 keeps all. Only those files are read.
        cache: the encoded-batch cache (``EncodedCache``), or None: each file parsed here.
        executor: parses a large file in pieces where it has workers (``encode_file``); the same result.
        recency: the rows of the batch ``k`` places older than the newest weigh ``recency**k``
            (``DecisionSet.weight``: their chance to be drawn among the PPO rows); 1: all alike.
        per_batch: the rows of each batch together weigh ``recency**k`` (each row that over the
            batch's kept rows), so a batch counts as one policy whatever its size (``train.average:
            fictitious``).

    Returns:
        ``(set, stats)``; stats counts files, kept and filtered games and, with ``per_batch``,
        ``ppo_policies``: the batches' total weight (sum of ``recency**k`` over the batches with rows).
    """
    paths = ppo_files(pool_dirs, window)
    files = [encode_file(p, encoder, cache, executor=executor) for p in paths]
    empty = empty_set(encoder.obs_dim, encoder.num_actions)
    floor = -np.inf if min_reward_threshold is None else min_reward_threshold
    low = [f.episode_return < floor for f in files]  # nan (no return) is never below
    parts = [f.data.subset(f.row[~lo & (f.row >= 0)]) for f, lo in zip(files, low, strict=True)]
    policies = 0.0
    for age, part in enumerate(reversed(parts)):
        part.row_weight[:] = recency**age / (len(part) if per_batch else 1)
        policies += recency**age if len(part) else 0.0
    data = DecisionSet.concat([empty, *parts])
    games = {g for f in files for g in f.game_id.tolist()}
    dropped = {g for f, lo in zip(files, low, strict=True) for g in f.game_id[lo].tolist()}
    stats: JSONObject = {"ppo_files": len(paths), "ppo_games": len(games), "ppo_games_filtered": len(dropped)}
    if per_batch:
        stats["ppo_policies"] = policies
    return data, stats
