"""Seat-relative observation encoding and macro-action labels of decision records.

:class:`RecordEncoder` encodes decision records (the Forge decision format) through the one
compiled encoder of live games and records (``ml.game.commander.observation``, which describes
the layout and loads records as arrays), and labels records with macro actions.

Labels (``label_record``): PPO records carry their own ``action_idx``; land drops are not
a policy decision and are non-trainable (``None``); Forge attacks without a target cannot
be labelled either.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ml.game.commander.actions import (
    ACTION_INDEX,
    ACTION_OF_KIND,
    CAST_COMMANDER,
    FIRST_ATTACK,
    HOLD_MANA,
    MAX_POD,
    NUM_ACTIONS,
    PASS,
    attack_action,
)
from ml.game.commander.cards import Card, load_card_pool
from ml.game.commander.core import CoreTables, load_tables
from ml.game.commander.features import OBS_DIM
from ml.game.commander.observation import encode_records, seat_eliminated
from ml.game.record import RecordLike, record_field

__all__ = [
    "OBS_DIM",
    "RecordEncoder",
    "attack_target_mask",
    "label_record",
    "record_action_mask",
    "record_legal_mask",
    "seat_eliminated",
]


class RecordEncoder:
    """Encodes decision records as seat-relative observation vectors, and labels them.

    Records are loaded as arrays, one row each (``observation.record_arrays``), and encoded by
    the compiled encoder that self-play's live games go through (``core.encode``), so the feature
    layout has one definition. ``tests/test_encoding.py`` checks the output bit for bit against
    a Python oracle of the arithmetic (``tests/encoding_oracle.py``) on every decision of many
    games, the Forge fixtures and records at the schema's bounds.

    Attributes:
        obs_dim: length of the observation vector (``OBS_DIM``).
        num_actions: size of the action space (``NUM_ACTIONS``).
        pool: card name -> Card, used for card attributes.
        tables: the pool as the encoder's card tables (``core.CoreTables``).
    """

    obs_dim = OBS_DIM
    num_actions = NUM_ACTIONS

    def __init__(self, pool: dict[str, Card] | None = None) -> None:
        self.pool = pool if pool is not None else load_card_pool()
        self.tables = load_tables() if pool is None else CoreTables(pool, {})

    def label(self, record: RecordLike) -> int | None:
        """Macro-action index of the record's action, or None if not trainable (``label_record``)."""
        return label_record(record, self.pool)

    def action_mask(self, record: RecordLike) -> np.ndarray:
        """bool[NUM_ACTIONS] legal actions of the record (``record_action_mask``)."""
        return record_action_mask(record)

    def __call__(self, record: RecordLike) -> np.ndarray:
        """Encode one record. Returns float32[OBS_DIM]."""
        row: np.ndarray = self.encode_batch([record])[0]
        return row

    def encode_batch(self, records: Sequence[RecordLike]) -> np.ndarray:
        """Encode many records at once (``observation.encode_records``). Returns float32[N, OBS_DIM].

        Raises:
            ValueError: a record outside the schema's shape (``observation.record_arrays``).
        """
        return encode_records(records, self.tables, np.zeros((len(records), OBS_DIM), dtype=np.float32))

    def encode_into(self, record: RecordLike, out: np.ndarray) -> None:
        """Write the encoding of ``record`` into ``out`` (float32[OBS_DIM])."""
        out[:] = self.encode_batch([record])[0]


def label_record(record: RecordLike, pool: dict[str, Card]) -> int | None:
    """Macro-action index of a record's action, or None if it is not trainable.

    Args:
        record: decision record (dict or ``ml.game.commander.forge_record.DecisionRecord``).
        pool: card pool used to classify cast cards by kind.

    Returns:
        Index into ``ml.game.commander.actions.MACRO_ACTIONS``, or None for land drops, casts of cards
        outside the pool, and attacks whose target is not recorded (real Forge data).
    """
    action = record_field(record, "action")
    idx = record_field(action, "action_idx")
    if idx is not None:
        return int(idx)
    macro = record_field(action, "macro_action")
    if macro:
        return ACTION_INDEX[macro]
    kind = record_field(action, "type")
    card_name = record_field(action, "card") or ""
    if kind == "cast_commander" or (kind == "cast" and card_name and card_name == record_field(record, "commander")):
        return CAST_COMMANDER
    if kind == "cast":
        card = pool.get(card_name)
        return ACTION_OF_KIND.get(card.kind) if card is not None else None
    if kind == "attack":
        target = record_field(action, "target") or ""
        if not target.startswith("seat "):
            return None
        n = len(record_field(record, "players"))
        offset = (int(target.split()[1]) - int(record_field(record, "active_seat"))) % n
        return attack_action(offset) if offset else None
    if kind == "pass":
        return PASS
    if kind == "hold":
        return HOLD_MANA
    return None


def record_action_mask(record: RecordLike) -> np.ndarray:
    """Legal-action mask stored with a record, or all-ones when the record has none (Forge).

    Returns:
        bool[NUM_ACTIONS].
    """
    mask = record_field(record, "action_mask")
    if mask is None:
        return np.ones(NUM_ACTIONS, dtype=bool)
    return np.asarray(mask, dtype=bool)


def attack_target_mask(record: RecordLike) -> np.ndarray:
    """The attacks a record allows by its seats: ``attack_opponent_k`` for each opponent present and not eliminated.

    Returns:
        bool[NUM_ACTIONS], true only at attack actions (``attack_opponent_k`` attacks seat
        ``(active_seat + k) % pod size``, ``ml.game.commander.actions``).
    """
    players = record_field(record, "players")
    seats = {int(record_field(p, "seat")): p for p in players}
    n, actor = len(players), int(record_field(record, "active_seat"))
    out = np.zeros(NUM_ACTIONS, dtype=bool)
    for offset in range(1, min(n, MAX_POD)):
        p = seats.get((actor + offset) % n)
        if p is not None and not seat_eliminated(p):
            out[attack_action(offset)] = True
    return out


def record_legal_mask(record: RecordLike) -> np.ndarray:
    """Legal actions of a record to be answered: its ``action_mask`` (every action when it has none,
    as in Forge files), less the attacks on seats the pod lacks or that are out
    (:func:`attack_target_mask`), whatever the sent mask says.

    Training reads a record without mask as all actions legal (:func:`record_action_mask`); an answer
    must not name an attack on a missing or eliminated seat.

    Returns:
        bool[NUM_ACTIONS].
    """
    sent = record_field(record, "action_mask") is not None
    mask = record_action_mask(record).copy() if sent else np.ones(NUM_ACTIONS, dtype=bool)
    mask[FIRST_ATTACK:] &= attack_target_mask(record)[FIRST_ATTACK:]
    return mask
