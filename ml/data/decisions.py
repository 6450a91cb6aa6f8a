"""Encoded, labelled decisions (``DecisionSet``), how records become one, and the source mixture.

* **Games.** The encoder decides the game (``ml.game.spec.Encoder``, made by
  ``ml.game.protocol.GameSpec.encoder``): the commander's reads seat views, the OpenSpiel
  games' the observation stored in each record (label ``action.action_idx``); each has
  ``obs_dim``, ``num_actions``, ``encode_batch``, ``label`` and ``action_mask``. An encoder may also have
  ``unlabelled(record)`` (``ml.game.commander.forge.ForgeEncoder``): for a record without a label,
  its partial label (``bool[num_actions]``, the actions any of which it allows) or
  ``(reason, detail)`` saying why it is not trainable.
* **Partial labels.** ``DecisionSet.targets`` holds, per decision, the set of actions the
  record allows: one action for a full label, several for a partial one (a Forge attack
  without a target: attacking anyone); the student maximises their total probability.
* **The agent's distribution.** ``DecisionSet.policy`` holds the acting policy's
  probabilities of PPO records of schema 2 (``ml.learn.supervised`` fits them by KL divergence).
* **Source weights are mixture ratios.** ``sample_mixture`` draws a training set in which
  source ``s`` makes up ``w_s / sum(w)`` of the samples (``{sim: 1, ppo: 0.5}``: PPO is a
  third), whatever the sizes of the sources; they are not subsampling fractions.
"""

from __future__ import annotations

import hashlib
import logging
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

from ml.base.progress import log_once
from ml.game.record import Record
from ml.game.spec import Encoder

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
        weight: float64[N], relative chance of a row to be drawn among its source's rows
            (``sample_mixture``; the loaders' recency weighting of PPO batches). Ones when not given.
    """

    obs: np.ndarray
    action_mask: np.ndarray
    label: np.ndarray
    value_target: np.ndarray
    source: np.ndarray
    game_id: np.ndarray
    targets: np.ndarray | None = None
    policy: np.ndarray | None = None
    weight: np.ndarray | None = None

    def __post_init__(self) -> None:
        if self.targets is None:
            assert (self.label >= 0).all(), "a partial label (-1) needs its targets"
            self.targets = np.zeros(self.action_mask.shape, dtype=bool)
            self.targets[np.arange(len(self.label)), self.label] = True
        if self.policy is None:
            self.policy = np.zeros(self.action_mask.shape, dtype=np.float32)
        if self.weight is None:
            self.weight = np.ones(len(self.label), dtype=np.float64)

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

    @property
    def row_weight(self) -> np.ndarray:
        """float64[N]: ``weight`` (ones where not given)."""
        assert self.weight is not None, "__post_init__ builds weight when it is not given"
        return self.weight

    def _fields(self) -> tuple[np.ndarray, ...]:
        return (
            self.obs, self.action_mask, self.label, self.value_target, self.source, self.game_id, self._targets,
            self.soft_policy, self.row_weight,
        )  # fmt: skip

    def subset(self, idx: np.ndarray) -> DecisionSet:
        """Rows ``idx`` (int[K] or bool[N]) as a new set."""
        return DecisionSet(*(a[idx] for a in self._fields()))

    def correct(self, pred: np.ndarray) -> np.ndarray:
        """bool[N]: whether each predicted action (int64[N]) is one the record allows (``targets``)."""
        allowed: np.ndarray = self._targets[np.arange(len(self)), pred]
        return allowed

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
    data, _, reasons = _encode_indexed(list(records), encoder)
    return data, Counter(r for r in reasons if r is not None)


def _encode_indexed(records: list[Record], encoder: Encoder) -> tuple[DecisionSet, np.ndarray, list[tuple[str, str] | None]]:
    """``encode_records`` keeping track of each record: ``(set, row, reasons)`` where ``row``
    (int64[R]) is each record's row in the set (-1: not trainable) and ``reasons[i]`` the
    ``(reason, detail)`` of a non-trainable record (None for a trainable one)."""
    rows: list[Record] = []
    labels: list[int] = []
    partial: dict[int, np.ndarray] = {}
    reasons: list[tuple[str, str] | None] = []
    where = np.full(len(records), -1, dtype=np.int64)
    unlabelled = getattr(encoder, "unlabelled", lambda rec: ("unlabelled", ""))
    for i, rec in enumerate(records):
        label = encoder.label(rec)
        if label is None:
            allowed = unlabelled(rec)
            if isinstance(allowed, tuple):
                reasons.append(allowed)
                continue
            partial[len(rows)], label = allowed, -1
        reasons.append(None)
        where[i] = len(rows)
        rows.append(rec)
        labels.append(label)
    if not rows:
        return empty_set(encoder.obs_dim, encoder.num_actions), where, reasons
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
    return DecisionSet(obs, masks, label_arr, values, sources, game_ids, targets, policy), where, reasons


def fictitious_weights(source_weights: dict[str, float], policies: float) -> dict[str, float]:
    """``source_weights`` with the ``ppo`` weight multiplied by ``policies`` (``train.average: fictitious``).

    Args:
        source_weights: source -> mixture weight (``train.source_weights``).
        policies: the PPO batches' total weight, each batch one policy (``load_ppo``'s ``ppo_policies``).

    Returns:
        The weights the student's sample is drawn with: with ``{sim: 1, ppo: 1}`` and n equal batches,
        the teacher data and each batch hold 1/(n+1) each, fictitious play's uniform average
        (Heinrich et al. 2015, "Fictitious Self-Play in Extensive-Form Games").
    """
    return {**source_weights, "ppo": source_weights.get("ppo", 0.0) * policies}


def sample_mixture(data: DecisionSet, source_weights: dict[str, float], n: int, rng: np.random.Generator) -> np.ndarray:
    """Row indices of a training sample whose source shares follow ``source_weights``.

    Each of the ``n`` draws first picks a source with probability ``w_s / sum(w)`` over
    the sources that have data, then a row of that source (with replacement): uniformly, or
    in proportion to ``data.weight`` where a source's rows weigh differently (recency).
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
    if missing:  # normal in generation 0 (no PPO data yet); once per process, not once per epoch
        log_once(logger, logging.INFO, "source_weights names %s but the dataset has no such decisions; renormalising", missing)
    present = {s: rows for s, rows in present.items() if len(rows)}
    if not present:
        raise ValueError(f"no training data for any source with positive weight {source_weights}")
    names = sorted(present)
    weights = np.asarray([source_weights[s] for s in names], dtype=np.float64)
    choice = rng.choice(len(names), size=n, p=weights / weights.sum())
    out = np.empty(n, dtype=np.int64)
    for i, s in enumerate(names):
        slots, rows = np.flatnonzero(choice == i), present[s]
        w = data.row_weight[rows]
        if (w == w[0]).all():  # uniform: the draws of every run before row weights existed
            out[slots] = rows[rng.integers(0, len(rows), size=len(slots))]
        else:
            out[slots] = rows[rng.choice(len(rows), size=len(slots), p=w / w.sum())]
    return out
