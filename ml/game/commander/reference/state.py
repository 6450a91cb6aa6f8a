"""Game-state containers of the built-in Commander pod (no rules here, see ``rules.py``).

Plain classes with ``__slots__`` and small lists; nothing here hashes strings or iterates over
sets (PYTHONHASHSEED independence: the oracle deals and plays as the core does).
"""

from __future__ import annotations

import random

from ml.game.commander.cards import Card
from ml.game.commander.pod_rules import COMMANDER_TAX_STEP, STARTING_LIFE


class Permanent:
    """One permanent on the battlefield.

    Attributes:
        card: the card.
        tapped: tapped (an attacking creature without vigilance taps until its controller's untap).
        sick: summoning sick (entered since its controller's last untap); haste ignores it.
        is_commander: this creature is its controller's commander.
    """

    __slots__ = ("card", "is_commander", "sick", "tapped")

    def __init__(self, card: Card, *, tapped: bool = False, sick: bool = True, is_commander: bool = False) -> None:
        self.card = card
        self.tapped = tapped
        self.sick = sick
        self.is_commander = is_commander

    def can_attack(self) -> bool:
        """Untapped and either not summoning sick or with haste."""
        return not self.tapped and (not self.sick or "haste" in self.card.keywords)

    def __repr__(self) -> str:
        flags = ("T" if self.tapped else "") + ("S" if self.sick else "") + ("C" if self.is_commander else "")
        return f"Permanent({self.card.name!r}{', ' + flags if flags else ''})"


class PlayerState:
    """One seat's zones and counters.

    Attributes:
        seat: 0-based seat index.
        deck_name, archetype, commander_name: the seat's deck.
        life: life total (life points).
        library: cards, top of library last (``pop()`` draws).
        hand: cards in hand, in the order drawn.
        creatures: creature permanents (including the commander when on the battlefield).
        permanents: non-creature permanents (lands and mana rocks).
        graveyard: cards, oldest first.
        command_zone: the commander card when it is there.
        mana_sources: total mana the seat's lands and rocks produce per turn (mana).
        mana: mana still available this turn cycle ("untapped mana now"; mana).
        commander_casts: previous casts of the commander from the command zone.
        cmdr_dmg: combat damage taken from each source seat's commander, int[pod_size].
        eliminated: the seat has lost and left the game.
        holding_mana: the seat ended its last main phase with ``hold_mana`` and responds
            with instant removal during opponents' combats until its next turn.
        last_attacker: the seat that attacked this seat most recently, -1 if none yet (the
            caster-relative removal rule aims at it first).
    """

    __slots__ = (
        "archetype",
        "cmdr_dmg",
        "command_zone",
        "commander_casts",
        "commander_name",
        "creatures",
        "deck_name",
        "eliminated",
        "graveyard",
        "hand",
        "holding_mana",
        "last_attacker",
        "library",
        "life",
        "mana",
        "mana_sources",
        "permanents",
        "seat",
    )

    def __init__(self, seat: int, pod_size: int, deck_name: str, archetype: str, commander: Card) -> None:
        self.seat = seat
        self.deck_name = deck_name
        self.archetype = archetype
        self.commander_name = commander.name
        self.life = STARTING_LIFE
        self.library: list[Card] = []
        self.hand: list[Card] = []
        self.creatures: list[Permanent] = []
        self.permanents: list[Permanent] = []
        self.graveyard: list[Card] = []
        self.command_zone: list[Card] = [commander]
        self.mana_sources = 0
        self.mana = 0
        self.commander_casts = 0
        self.cmdr_dmg = [0] * pod_size
        self.eliminated = False
        self.holding_mana = False
        self.last_attacker = -1

    @property
    def commander_tax(self) -> int:
        """Commander tax (mana): 2 per previous cast from the command zone."""
        return COMMANDER_TAX_STEP * self.commander_casts

    @property
    def battlefield(self) -> list[Permanent]:
        """All permanents: lands and rocks first, then creatures (a new list)."""
        return self.permanents + self.creatures

    @property
    def lands(self) -> int:
        """Number of lands on the battlefield."""
        return sum(1 for p in self.permanents if p.card.kind == "land")


class GameState:
    """The whole game; mutated in place by ``rules.apply_action``.

    Attributes:
        game_id: ``game-<index>-<seed>`` (shared/docs/forge-decision-format.md ``game_id``).
        seed: the game seed.
        pod_size: number of seats, 2..MAX_POD.
        max_turns: round cap; the game is a draw after round ``max_turns``.
        turn: 1-based round number (every living seat takes one turn per round).
        phase: one of ``PHASES``.
        active_seat: the seat whose turn it is.
        current_seat: the seat that must decide now (equals ``active_seat`` during play).
        done: the game is over.
        winner: the winning seat, or None (draw, or not over).
        players: per-seat state, in seat order.
        rng: the game's own random generator (shuffles); never the global one.
        legal: legal action indices at the current decision point (rules-internal cache).
        elimination_order: seats in the order they were eliminated (first out first).
    """

    __slots__ = (
        "active_seat",
        "current_seat",
        "done",
        "elimination_order",
        "game_id",
        "legal",
        "max_turns",
        "phase",
        "players",
        "pod_size",
        "rng",
        "seed",
        "turn",
        "winner",
    )

    def __init__(self, seed: int, pod_size: int, max_turns: int, game_index: int, players: list[PlayerState]) -> None:
        self.game_id = f"game-{game_index}-{seed}"
        self.seed = seed
        self.pod_size = pod_size
        self.max_turns = max_turns
        self.turn = 1
        self.phase = "main_1"
        self.active_seat = 0
        self.current_seat = 0
        self.done = False
        self.winner: int | None = None
        self.players = players
        self.rng = random.Random(seed)
        self.legal: list[int] = []
        self.elimination_order: list[int] = []

    def ranking(self) -> list[int]:
        """Seats from first place to last: the winner, then the players still in the game (a
        turn-cap draw: by life, higher first, then seat), then the eliminated, last out first."""
        out = [] if self.winner is None else [self.winner]
        alive = [p for p in self.players if not p.eliminated and p.seat != self.winner]
        out += [p.seat for p in sorted(alive, key=lambda p: (-p.life, p.seat))]
        return out + self.elimination_order[::-1]

    def living_seats(self) -> list[int]:
        """Seats not eliminated, in seat order."""
        return [p.seat for p in self.players if not p.eliminated]
