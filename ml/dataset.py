"""Source-aware dataset builder: teacher and PPO decision files -> encoded arrays.

* **Games.** The encoder decides the game (``ml.game.spec.Encoder``, made by
  ``ml.game.registry.GameSpec.encoder``): the commander's reads seat views, the OpenSpiel
  games' the observation stored in each record (label ``action.action_idx``); each has
  ``obs_dim``, ``num_actions``, ``encode_batch``, ``label`` and ``action_mask``. An encoder may also have
  ``unlabelled(record)`` (``ml.game.commander.forge.ForgeEncoder``): for a record without a label,
  its partial label (``bool[num_actions]``, the actions any of which it allows) or
  ``(reason, detail)`` saying why it is not trainable.
* **Partial labels.** ``DecisionSet.targets`` holds, per decision, the set of actions the
  record allows: one action for a full label, several for a partial one (a Forge attack
  without a target: attacking anyone); the student maximises their total probability.
* **Sources.** Teacher batches (``ml-decisions-sim-*.jsonl``, source ``sim``), real Forge
  files imported into their own folder (``python loop.py import-forge``; read there only,
  source ``forge``, a bad line reported and left out) and accepted PPO batches
  (``ml-decisions-ppo-*.jsonl``, source ``ppo``). Every sample keeps its source tag.
* **Holdout.** A fixed 10-15% of *teacher games* (never single decisions) is held out:
  a game is in the holdout when the SHA-256 of its ``game_id`` falls below the fraction,
  so the split does not move when more data arrives and never depends on a seed.
* **Reward filter.** PPO games whose ``episode_return`` is below ``min_reward_threshold``
  are dropped.
* **Source weights are mixture ratios.** ``sample_mixture`` draws a training set in which
  source ``s`` makes up ``w_s / sum(w)`` of the samples (``{sim: 1, ppo: 0.5}``: PPO is a
  third), whatever the sizes of the sources; they are not subsampling fractions.
"""

from __future__ import annotations

import hashlib
import logging
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ml.game.spec import Encoder
from ml.io import DataFileError
from ml.progress import log_once
from ml.record_schema import Record
from ml.records import read_records, scan_batches

logger = logging.getLogger(__name__)


@dataclass
class DecisionSet:
    """Encoded, labelled decisions.

    Attributes:
        obs: float32[N, obs_dim] observations (the game encoder's).
        action_mask: bool[N, num_actions] legal actions (all-ones where a file has none).
        label: int64[N] action index taken; -1 where the
            record gives only a partial label (see ``targets``).
        value_target: float32[N] the acting seat's game result (win 1, loss -1/(n-1), draw 0).
        source: str array [N], the record's source (``sim``, ``forge``, ``ppo``).
        game_id: str array [N].
        targets: bool[N, num_actions], the actions the record allows: ``label`` alone for a
            full label, several for a partial one. Built from ``label`` when not given.
        policy: float32[N, num_actions], the acting policy's probabilities stored with the
            record (PPO records of schema 2, ``policy``); all-zero rows where a record has none.
            Zeros when not given.
    """

    obs: np.ndarray
    action_mask: np.ndarray
    label: np.ndarray
    value_target: np.ndarray
    source: np.ndarray
    game_id: np.ndarray
    targets: np.ndarray | None = None
    policy: np.ndarray | None = None

    def __post_init__(self) -> None:
        if self.targets is None:
            assert (self.label >= 0).all(), "a partial label (-1) needs its targets"
            self.targets = np.zeros(self.action_mask.shape, dtype=bool)
            self.targets[np.arange(len(self.label)), self.label] = True
        if self.policy is None:
            self.policy = np.zeros(self.action_mask.shape, dtype=np.float32)

    def __len__(self) -> int:
        return len(self.label)

    @property
    def _targets(self) -> np.ndarray:
        assert self.targets is not None, "__post_init__ builds targets when they are not given"
        return self.targets

    @property
    def soft_policy(self) -> np.ndarray:
        """float32[N, num_actions]: ``policy`` (all-zero rows where a record stores none)."""
        assert self.policy is not None, "__post_init__ builds policy when it is not given"
        return self.policy

    def _fields(self) -> tuple[np.ndarray, ...]:
        return (
            self.obs, self.action_mask, self.label, self.value_target, self.source, self.game_id, self._targets,
            self.soft_policy,
        )  # fmt: skip

    def subset(self, idx: np.ndarray) -> DecisionSet:
        """Rows ``idx`` (int[K] or bool[N]) as a new set."""
        return DecisionSet(*(a[idx] for a in self._fields()))

    def correct(self, pred: np.ndarray) -> np.ndarray:
        """bool[N]: whether each predicted action (int64[N]) is one the record allows (``targets``)."""
        return self._targets[np.arange(len(self)), pred]

    def source_counts(self) -> dict[str, int]:
        """Decisions per source."""
        names, counts = np.unique(self.source, return_counts=True)
        return {str(n): int(c) for n, c in zip(names, counts, strict=True)}

    @staticmethod
    def concat(sets: list[DecisionSet]) -> DecisionSet:
        """Row-wise concatenation of one or more sets.

        Raises:
            ValueError: no sets (the sizes of an empty result would be unknown: use ``empty_set``).
        """
        if not sets:
            raise ValueError("DecisionSet.concat needs at least one set")
        fields = zip(*(s._fields() for s in sets), strict=True)
        return DecisionSet(*(np.concatenate(f) for f in fields))


def empty_set(obs_dim: int, num_actions: int) -> DecisionSet:
    """A DecisionSet with no rows of a game's sizes."""
    return DecisionSet(
        np.zeros((0, obs_dim), np.float32),
        np.zeros((0, num_actions), bool),
        np.zeros(0, np.int64),
        np.zeros(0, np.float32),
        np.zeros(0, dtype=object),
        np.zeros(0, dtype=object),
    )


def in_holdout(game_id: str, fraction: float) -> bool:
    """Whether a teacher game belongs to the fixed holdout (SHA-256 of the game id < fraction)."""
    digest = hashlib.sha256(game_id.encode("utf-8")).digest()
    return int.from_bytes(digest[:8], "big") / 2**64 < fraction


def outcome_value(record: Record) -> float:
    """The acting seat's result: win 1, loss -1/(n-1), draw 0 (the zero-sum reward scheme)."""
    winner = record.winner()
    if winner is None:
        return 0.0
    return 1.0 if winner == record.active_seat else -1.0 / (record.players_count - 1)


def encode_records(records: Iterable[Record], encoder: Encoder) -> tuple[DecisionSet, Counter[tuple[str, str]]]:
    """Encode and label records; non-trainable ones (land drops, unlabelable) are skipped.

    A record without a label (``encoder.label`` is None) is kept with a partial label when
    ``encoder.unlabelled`` gives one (label -1, ``targets`` the allowed actions), else skipped.

    Args:
        records: decision records of one game kind.
        encoder: the game's encoder (``obs_dim``, ``num_actions``, ``encode_batch``, ``label``,
            ``action_mask``, optionally ``unlabelled``; see the module docstring).

    Returns:
        ``(set, skipped)`` where ``skipped`` counts the non-trainable records (decisions) by
        ``(reason, detail)``; ``("unlabelled", "")`` when the encoder gives no reason.

    Raises:
        ValueError: a record of another game (observation or mask of the wrong size).
    """
    rows: list[Record] = []
    labels: list[int] = []
    partial: dict[int, np.ndarray] = {}
    skipped: Counter[tuple[str, str]] = Counter()
    unlabelled = getattr(encoder, "unlabelled", lambda rec: ("unlabelled", ""))
    for rec in records:
        label = encoder.label(rec)
        if label is None:
            allowed = unlabelled(rec)
            if isinstance(allowed, tuple):
                skipped[allowed] += 1
                continue
            partial[len(rows)], label = allowed, -1
        rows.append(rec)
        labels.append(label)
    if not rows:
        return empty_set(encoder.obs_dim, encoder.num_actions), skipped
    obs = encoder.encode_batch(rows)
    masks = np.stack([encoder.action_mask(r) for r in rows])
    if masks.shape[1] != encoder.num_actions:
        raise ValueError(
            f"game {rows[0].game_id!r}: action_mask has {masks.shape[1]} entries, this game has {encoder.num_actions}"
        )
    label_arr = np.asarray(labels, dtype=np.int64)
    targets = np.zeros(masks.shape, dtype=bool)
    full = np.flatnonzero(label_arr >= 0)
    targets[full, label_arr[full]] = True
    for i, allowed in partial.items():
        targets[i] = allowed
    masks |= targets  # a label is legal by definition (Forge files carry no mask)
    values = np.asarray([outcome_value(r) for r in rows], np.float32)
    sources = np.asarray([r.source or "sim" for r in rows], dtype=object)
    policy = np.zeros(masks.shape, dtype=np.float32)
    for i, r in enumerate(rows):
        if getattr(r, "policy", None) is not None:
            policy[i] = r.policy
    game_ids = np.asarray([r.game_id for r in rows], dtype=object)
    return DecisionSet(obs, masks, label_arr, values, sources, game_ids, targets, policy), skipped


def _read_files(paths: list[Path], on_error: Callable[[DataFileError], None] | None = None) -> Iterable[Record]:
    for path in paths:
        yield from read_records(path, on_error=on_error)


def _skip_stats(skipped: Counter[tuple[str, str]], decisions: int, top: int = 10) -> dict:
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


def load_teacher(
    teacher_dirs: list[Path], holdout_fraction: float, encoder: Encoder, forge_dirs: Sequence[Path] = ()
) -> tuple[DecisionSet, DecisionSet, dict]:
    """Teacher decisions split by game into (train, holdout).

    Args:
        teacher_dirs: folders holding ``ml-decisions-sim-*.jsonl`` (Forge files there are
            left out with a warning: they belong in the imported Forge folder).
        holdout_fraction: share of teacher games held out (0.10-0.15).
        encoder: the game's encoder (see ``encode_records``).
        forge_dirs: folders of imported Forge files (``ml-decisions-<8 hex>[-tN].jsonl``,
            ``python loop.py import-forge``). A bad line there is logged
            (``file:line: field: problem``), counted and left out; the good lines are kept.

    Returns:
        ``(train, holdout, stats)``; stats counts files, games and decisions (trainable,
        partial labels, non-trainable by reason and their most frequent details, e.g. the
        unknown cards) and the bad Forge lines.

    Raises:
        ml.records.RecordError: a malformed line in a teacher batch, naming file, line and field.
    """
    paths = [p for d in teacher_dirs for p in scan_batches(d, sources=("sim",))]
    forge_paths = [p for d in forge_dirs for p in scan_batches(d, sources=(), include_forge=True)]
    stray = [p for d in teacher_dirs for p in scan_batches(d, sources=(), include_forge=True)]
    if stray:
        logger.warning(
            "%d Forge file(s) in %s left out: import them with `python loop.py import-forge`", len(stray), teacher_dirs[0]
        )
    bad: list[DataFileError] = []
    records = list(_read_files(paths)) + list(_read_files(forge_paths, on_error=bad.append))
    for e in bad:
        logger.warning("%s (left out)", e)
    held = np.asarray([in_holdout(r.game_id, holdout_fraction) for r in records], dtype=bool)
    train, skipped_train = encode_records([r for r, h in zip(records, held, strict=True) if not h], encoder)
    holdout, skipped_hold = encode_records([r for r, h in zip(records, held, strict=True) if h], encoder)
    games = {r.game_id for r in records}
    held_games = {r.game_id for r, h in zip(records, held, strict=True) if h}
    stats = {
        "teacher_files": len(paths),
        "forge_files": len(forge_paths),
        "forge_bad_lines": len(bad),
        "teacher_games": len(games),
        "holdout_games": len(held_games),
        "teacher_decisions": len(records),
        "trainable_decisions": len(train) + len(holdout),
        "partial_label_decisions": int((train.label < 0).sum() + (holdout.label < 0).sum()),
        **_skip_stats(skipped_train + skipped_hold, len(records)),
    }
    return train, holdout, stats


def load_ppo(
    pool_dirs: list[Path], encoder: Encoder, min_reward_threshold: float, window: int = 0
) -> tuple[DecisionSet, dict]:
    """Accepted PPO decisions whose game's ``episode_return`` >= ``min_reward_threshold``.

    Args:
        pool_dirs: folders of accepted batches.
        encoder: the game's record encoder.
        min_reward_threshold: games below this ``episode_return`` are dropped.
        window: keep only the newest ``window`` batches (by batch name, ``gen<NNN>-a<k>``:
            the generation that produced them); 0 keeps all.

    Returns:
        ``(set, stats)``; stats counts files, kept and filtered games.
    """
    paths = sorted((p for d in pool_dirs for p in scan_batches(d, sources=("ppo",))), key=lambda p: p.name)
    if window:
        paths = paths[-window:]
    kept: list[Record] = []
    games, dropped = set(), set()
    for rec in _read_files(paths):
        games.add(rec.game_id)
        if rec.episode_return is not None and rec.episode_return < min_reward_threshold:
            dropped.add(rec.game_id)
            continue
        kept.append(rec)
    data, _ = encode_records(kept, encoder)
    return data, {"ppo_files": len(paths), "ppo_games": len(games), "ppo_games_filtered": len(dropped)}


def sample_mixture(data: DecisionSet, source_weights: dict[str, float], n: int, rng: np.random.Generator) -> np.ndarray:
    """Row indices of a training sample whose source shares follow ``source_weights``.

    Each of the ``n`` draws first picks a source with probability ``w_s / sum(w)`` over
    the sources that have data, then a row of that source uniformly (with replacement).
    Sources with a weight but no data are left out and the rest renormalised (logged).

    Args:
        data: the candidate rows.
        source_weights: source -> mixture weight (>= 0). Sources not listed get weight 0.
        n: rows to draw (decisions).
        rng: numpy Generator.

    Returns:
        int64[n] row indices.

    Raises:
        ValueError: when no source with a positive weight has data.
    """
    present = {s: np.flatnonzero(data.source == s) for s in source_weights if source_weights[s] > 0}
    missing = [s for s, rows in present.items() if len(rows) == 0]
    if missing:  # normal in generation 0 (no PPO data yet); once per process, not once per epoch (issue #12)
        log_once(logger, logging.INFO, "source_weights names %s but the dataset has no such decisions; renormalising", missing)
    present = {s: rows for s, rows in present.items() if len(rows)}
    if not present:
        raise ValueError(f"no training data for any source with positive weight {source_weights}")
    names = sorted(present)
    weights = np.asarray([source_weights[s] for s in names], dtype=np.float64)
    choice = rng.choice(len(names), size=n, p=weights / weights.sum())
    out = np.empty(n, dtype=np.int64)
    for i, s in enumerate(names):
        slots = np.flatnonzero(choice == i)
        out[slots] = present[s][rng.integers(0, len(present[s]), size=len(slots))]
    return out
