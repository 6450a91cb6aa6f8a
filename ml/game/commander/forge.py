"""Labels for real Forge records of the commander: the user card table and :class:`ForgeEncoder`.

Forge files (``shared/docs/forge-decision-format.md``) are commander decision records;
``python loop.py import-forge`` (``ml.driver.forge_import``) copies their good lines into
``data/forge/`` with a user card table ``cards.yaml`` (``card name: kind``, :data:`CARD_TABLE`)
that extends the built-in pool for labels only. The train and gate stages read them through
:func:`teacher_encoder`.

Labels (:class:`ForgeEncoder`): a Forge ``attack`` has no target, so its label is partial
(attacking any opponent still in the game; ``ml.data.decisions.DecisionSet.targets``). A record
that stays non-trainable gets a reason (``land_drop``, ``unknown_card`` and the card, ...),
counted in ``metrics/train.json``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
from ruamel.yaml.error import YAMLError
from ruamel.yaml.nodes import MappingNode, ScalarNode

from ml.base.io import DataFileError
from ml.config.yaml_file import safe_yaml
from ml.game.commander.cards import KINDS, Card
from ml.game.commander.encoding import RecordEncoder, attack_target_mask, label_record
from ml.game.commander.forge_record import DecisionRecord
from ml.game.record import RecordLike
from ml.game.spec import Encoder

CARD_TABLE = "cards.yaml"
"""The user card table inside the Forge folder (``data/forge``): ``card name: kind``
(kinds of ``ml.game.commander.cards.KINDS``)."""


# --------------------------------------------------------------------------- the card table


def load_card_table(path: str | Path, pool: Mapping[str, Card]) -> dict[str, str]:
    """Read a card table (YAML mapping ``card name: kind``) and check it against the built-in pool.

    Args:
        path: the table (an absent file is an empty table).
        pool: the built-in card pool (``RecordEncoder().pool``), which the table may extend
            but not change.

    Returns:
        ``{card name: kind}`` with kinds from ``ml.game.commander.cards.KINDS``.

    Raises:
        DataFileError: not a readable file (a folder), not YAML, not a mapping, a card listed
            twice, a kind that is not a card kind, or a built-in card given another kind; the
            message names file, line and card.
    """
    path = Path(path)
    if not path.exists():
        return {}
    try:
        root = safe_yaml().compose(path.read_text(encoding="utf-8-sig"))
    except (YAMLError, UnicodeDecodeError) as e:
        mark = getattr(e, "problem_mark", None)
        raise DataFileError(path, mark.line + 1 if mark else None, None, f"not a YAML card table ({e})") from None
    except OSError as e:  # a folder, no permission
        raise DataFileError(path, None, None, f"cannot read the card table: {e.strerror or e}") from None
    if root is None:
        return {}
    if not isinstance(root, MappingNode):
        raise DataFileError(path, root.start_mark.line + 1, None, "expected a mapping of card name to kind")
    table: dict[str, str] = {}
    lines: dict[str, int] = {}
    for key, value in root.value:
        line, name, kind = key.start_mark.line + 1, str(key.value), value.value
        if name in lines:  # YAML keys are unique; a plain load would keep the last silently
            raise DataFileError(path, line, name, f"listed twice (first on line {lines[name]}); give each card one kind")
        lines[name] = line
        if not isinstance(value, ScalarNode) or kind not in KINDS:
            raise DataFileError(path, line, name, f"kind must be one of {', '.join(KINDS)}, got {kind!r}")
        if name in pool and pool[name].kind != kind:
            raise DataFileError(path, line, name, f"a built-in card of kind {pool[name].kind!r}; the table cannot change it")
        table[name] = kind
    return table


def merge_card_tables(current: dict[str, str], new: dict[str, str], new_path: Path, current_path: Path) -> dict[str, str]:
    """``current`` extended by ``new``; a card both give different kinds is refused.

    Raises:
        DataFileError: naming ``new_path`` and the card (edit ``current_path`` by hand to change a kind).
    """
    for name, kind in new.items():
        if current.get(name, kind) != kind:
            raise DataFileError(
                new_path, None, name, f"kind {kind!r}, but {current_path} has {current[name]!r} (edit that file to change it)"
            )
    return {**current, **new}


# --------------------------------------------------------------------------- labels


class ForgeEncoder:
    """The commander's ``RecordEncoder`` with the labels real Forge records need.

    Features (``encode_batch``, ``action_mask``, ``obs_dim``, ``num_actions``) are the wrapped
    encoder's, untouched; only labels change: casts of cards in the card table get the
    label of their kind, an untargeted attack gets a partial label, and every record left
    without a label gets a reason (:meth:`unlabelled`, read by ``ml.data.decisions.encode_records``).

    Args:
        encoder: the commander's encoder.
        card_kinds: the user card table, ``{card name: kind}`` (see :func:`load_card_table`).
    """

    def __init__(self, encoder: RecordEncoder, card_kinds: Mapping[str, str] | None = None) -> None:
        self.encoder = encoder
        self.obs_dim, self.num_actions = encoder.obs_dim, encoder.num_actions
        extra = {n: Card(n, k, 0) for n, k in (card_kinds or {}).items() if n not in encoder.pool}
        self.label_pool = {**encoder.pool, **extra}

    def __call__(self, record: RecordLike) -> np.ndarray:
        """float32[obs_dim], as the wrapped encoder."""
        return self.encoder(record)

    def encode_batch(self, records: Sequence[RecordLike]) -> np.ndarray:
        """float32[N, obs_dim], as the wrapped encoder."""
        return self.encoder.encode_batch(records)

    def action_mask(self, record: RecordLike) -> np.ndarray:
        """bool[num_actions], as the wrapped encoder."""
        return self.encoder.action_mask(record)

    def label(self, record: RecordLike) -> int | None:
        """Macro-action index (``label_record`` over the pool extended by the card table), or None."""
        return label_record(record, self.label_pool)

    def unlabelled(self, record: DecisionRecord) -> np.ndarray | tuple[str, str]:
        """For a record without a label: its partial label, or why it is not trainable.

        Returns:
            bool[num_actions], the actions any of which the record allows (an attack without
            target: attacking each opponent not eliminated), or ``(reason, detail)``:
            ``("land_drop", "")``, ``("unknown_card", card)``, ``("attack_bad_target", target)``,
            ``("attack_no_opponent", "")``, ``("action_type", type)``.
        """
        action = record.action
        if action.type == "land" or (
            action.type == "cast" and getattr(self.label_pool.get(action.card), "kind", "") == "land"
        ):
            return ("land_drop", "")
        if action.type == "cast":
            return ("unknown_card", action.card)
        if action.type != "attack":
            return ("action_type", action.type)
        if action.target:
            return ("attack_bad_target", action.target)
        allowed = attack_target_mask(record) & self.action_mask(record)
        return allowed if allowed.any() else ("attack_no_opponent", "")


def teacher_encoder(encoder: Encoder, forge_dir: Path | None) -> Encoder:
    """The encoder the dataset builder labels teacher data with.

    Args:
        encoder: the game's encoder (``make_game(...).encoder()``).
        forge_dir: the imported Forge folder (its ``cards.yaml`` is the card table), or None.

    Returns:
        A :class:`ForgeEncoder` around the commander's ``RecordEncoder``; any other game's
        encoder as it is (Forge files are commander records).

    Raises:
        DataFileError: a bad card table (see :func:`load_card_table`).
    """
    if not isinstance(encoder, RecordEncoder):
        return encoder
    cards = load_card_table(forge_dir / CARD_TABLE, encoder.pool) if forge_dir is not None else {}
    return ForgeEncoder(encoder, cards)
