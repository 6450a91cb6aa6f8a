"""Card pool and deck lists of the built-in Commander pod.

Data live in ``ml/game/commander/data/cards.yaml`` and ``ml/game/commander/data/decks.yaml``
(spec: ``shared/docs/commander-pod.md``, "Players and decks"). Loading validates every entry
and raises ``ValueError`` naming the file and the entry. Default loads are cached on first
use; importing this module reads nothing.
"""

from __future__ import annotations

import functools
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ml.config.yaml_file import safe_yaml

logger = logging.getLogger(__name__)

DATA_DIR = Path(__file__).resolve().parent / "data"
CARDS_PATH = DATA_DIR / "cards.yaml"
DECKS_PATH = DATA_DIR / "decks.yaml"

KINDS: tuple[str, ...] = ("land", "creature", "removal", "draw", "ramp", "wipe")
"""Card kinds (shared/docs/commander-pod.md "Main phases"; one per cast macro action, plus land)."""
KEYWORDS: tuple[str, ...] = ("flying", "haste", "trample", "deathtouch", "lifelink", "vigilance")
"""Keywords the rules implement (shared/docs/commander-pod.md "Players and decks")."""
ARCHETYPES: tuple[str, ...] = ("aggro", "midrange", "control", "ramp")
DECK_SIZE = 99
"""Library size without the commander (Commander rules 903.5a)."""

_CARD_KEYS = frozenset({"name", "kind", "mv", "pt", "kw", "instant", "amount", "legendary"})
_DECK_KEYS = frozenset({"name", "archetype", "commander", "cards"})


@dataclass(frozen=True)
class Card:
    """One card of the pool.

    Attributes:
        name: card name, unique in the pool.
        kind: one of ``KINDS``.
        mana_value: mana value (mana), >= 0.
        power: creature power (damage), 0 for non-creatures.
        toughness: creature toughness (damage), 0 for non-creatures.
        keywords: subset of ``KEYWORDS``.
        instant: removal castable during an opponent's combat (after ``hold_mana``).
        amount: cards drawn (``draw``) or permanent mana added (``ramp``).
        legendary: legendary creature (may be a commander).
    """

    name: str
    kind: str
    mana_value: int
    power: int = 0
    toughness: int = 0
    keywords: frozenset[str] = frozenset()
    instant: bool = False
    amount: int = 0
    legendary: bool = False


@dataclass(frozen=True)
class Deck:
    """One Commander deck.

    Attributes:
        name: deck name, unique among decks.
        archetype: one of ``ARCHETYPES``.
        commander: card name of a legendary creature (kept in the command zone).
        cards: the 99 library card names, in file order (repeats allowed).
    """

    name: str
    archetype: str
    commander: str
    cards: tuple[str, ...]


def _read_yaml(path: Path, key: str) -> list[Any]:
    """Read ``path`` and return the list under top-level ``key``.

    Raises:
        ValueError: the file is not a mapping with a list under ``key``.
    """
    data = safe_yaml().load(Path(path).read_text(encoding="utf-8"))
    if not isinstance(data, dict) or not isinstance(data.get(key), list):
        raise ValueError(f"{path}: expected a mapping with a list under '{key}'")
    items: list[Any] = data[key]
    return items


def _parse_card(path: Path, i: int, entry: Any) -> Card:
    """Validate one ``cards.yaml`` entry and build its ``Card``.

    Raises:
        ValueError: naming the file and the entry, on any invalid field.
    """
    where = f"{path}: cards[{i}]"
    if not isinstance(entry, dict) or not isinstance(entry.get("name"), str):
        raise ValueError(f"{where}: expected a mapping with a string 'name'")
    where = f"{where} ({entry['name']!r})"
    unknown = sorted(set(entry) - _CARD_KEYS)
    if unknown:
        raise ValueError(f"{where}: unknown keys {unknown}")
    kind = entry.get("kind")
    if kind not in KINDS:
        raise ValueError(f"{where}: kind {kind!r} not in {KINDS}")
    mv = entry.get("mv", 0)
    amount = entry.get("amount", 0)
    if not isinstance(mv, int) or mv < 0 or not isinstance(amount, int) or amount < 0:
        raise ValueError(f"{where}: mv and amount must be non-negative integers")
    pt = entry.get("pt", [0, 0])
    if kind == "creature" and (not isinstance(pt, list) or len(pt) != 2 or not all(isinstance(v, int) for v in pt)):
        raise ValueError(f"{where}: creature needs pt: [power, toughness]")
    if kind == "creature" and pt[1] < 1:
        raise ValueError(f"{where}: creature toughness must be >= 1")
    kw = entry.get("kw", [])
    bad = [k for k in kw if k not in KEYWORDS]
    if bad:
        raise ValueError(f"{where}: unknown keywords {bad}; allowed {KEYWORDS}")
    if kind in ("draw", "ramp") and amount < 1:
        raise ValueError(f"{where}: {kind} needs amount >= 1")
    return Card(
        name=entry["name"],
        kind=kind,
        mana_value=mv,
        power=pt[0] if kind == "creature" else 0,
        toughness=pt[1] if kind == "creature" else 0,
        keywords=frozenset(kw),
        instant=bool(entry.get("instant", False)),
        amount=amount,
        legendary=bool(entry.get("legendary", False)),
    )


def _load_card_pool(path: Path) -> dict[str, Card]:
    pool: dict[str, Card] = {}
    for i, entry in enumerate(_read_yaml(path, "cards")):
        card = _parse_card(path, i, entry)
        if card.name in pool:
            raise ValueError(f"{path}: cards[{i}] ({card.name!r}): duplicate card name")
        pool[card.name] = card
    logger.debug("loaded %d cards from %s", len(pool), path)
    return pool


@functools.lru_cache(maxsize=1)
def _default_card_pool() -> dict[str, Card]:
    return _load_card_pool(CARDS_PATH)


def load_card_pool(path: str | Path | None = None) -> dict[str, Card]:
    """Load and validate the card pool.

    Args:
        path: a ``cards.yaml``; None reads (once, cached) ``ml/game/commander/data/cards.yaml``.

    Returns:
        Card name -> ``Card``, in file order. The cached default must not be mutated.

    Raises:
        ValueError: naming the file and the entry, on a bad kind, keyword, field or duplicate.
        OSError: the file cannot be read.
    """
    if path is None:
        return _default_card_pool()
    return _load_card_pool(Path(path))


def _parse_deck(path: Path, i: int, entry: Any, pool: dict[str, Card]) -> Deck:
    """Validate one ``decks.yaml`` entry against ``pool`` and build its ``Deck``.

    Raises:
        ValueError: naming the file and the entry, on any invalid field or card name.
    """
    where = f"{path}: decks[{i}]"
    if not isinstance(entry, dict) or not isinstance(entry.get("name"), str):
        raise ValueError(f"{where}: expected a mapping with a string 'name'")
    where = f"{where} ({entry['name']!r})"
    unknown = sorted(set(entry) - _DECK_KEYS)
    if unknown:
        raise ValueError(f"{where}: unknown keys {unknown}")
    if entry.get("archetype") not in ARCHETYPES:
        raise ValueError(f"{where}: archetype {entry.get('archetype')!r} not in {ARCHETYPES}")
    commander = pool.get(entry.get("commander"))  # type: ignore[arg-type]
    if commander is None or commander.kind != "creature" or not commander.legendary:
        raise ValueError(f"{where}: commander {entry.get('commander')!r} is not a legendary creature of the pool")
    counts = entry.get("cards")
    if not isinstance(counts, dict):
        raise ValueError(f"{where}: 'cards' must be a mapping {{card name: count}}")
    names: list[str] = []
    for name, count in counts.items():
        if name not in pool:
            raise ValueError(f"{where}: unknown card name {name!r}")
        if not isinstance(count, int) or count < 1:
            raise ValueError(f"{where}: count of {name!r} must be a positive integer, got {count!r}")
        names.extend([name] * count)
    if len(names) != DECK_SIZE:
        raise ValueError(f"{where}: deck has {len(names)} cards, expected {DECK_SIZE}")
    return Deck(name=entry["name"], archetype=entry["archetype"], commander=commander.name, cards=tuple(names))


def _load_decks(path: Path, pool: dict[str, Card]) -> dict[str, Deck]:
    decks: dict[str, Deck] = {}
    for i, entry in enumerate(_read_yaml(path, "decks")):
        deck = _parse_deck(path, i, entry, pool)
        if deck.name in decks:
            raise ValueError(f"{path}: decks[{i}] ({deck.name!r}): duplicate deck name")
        decks[deck.name] = deck
    logger.debug("loaded %d decks from %s", len(decks), path)
    return decks


@functools.lru_cache(maxsize=1)
def _default_decks() -> dict[str, Deck]:
    return _load_decks(DECKS_PATH, _default_card_pool())


def load_decks(path: str | Path | None = None, pool: dict[str, Card] | None = None) -> dict[str, Deck]:
    """Load and validate the deck lists.

    Args:
        path: a ``decks.yaml``; None reads ``ml/game/commander/data/decks.yaml``.
        pool: the card pool to check names against; None uses ``load_card_pool()``.
            With both None the result is cached.

    Returns:
        Deck name -> ``Deck``, in file order. The cached default must not be mutated.

    Raises:
        ValueError: naming the file and the entry, on an unknown card name, a deck size other
            than 99, a bad archetype or commander, or a duplicate deck name.
        OSError: the file cannot be read.
    """
    if path is None and pool is None:
        return _default_decks()
    return _load_decks(Path(path) if path is not None else DECKS_PATH, pool if pool is not None else load_card_pool())
