"""The batched Commander core: N games as arrays, stepped, scripted and encoded by compiled kernels.

The compiled code is ``kernels.py`` (numba ``njit``, ``cache=True``; ``NUMBA_DISABLE_JIT=1``
runs the same code as plain Python). This module is the Python face: the card and deck
tables, allocation, and thin wrappers that check shapes and dtypes once per batched call.
The core is the product's one rules engine. The tests keep a Python object engine as its
oracle (``ml.game.commander.reference``): from the same seed the core deals the same game (it
carries Python's Mersenne Twister per game and per scripted seat), and from the same actions
it reaches the same states, masks, observations, rewards and scripted choices
(``tests/test_core_agreement.py``).

Typical use (N games, 4 seats, seat 0 played by a network, the rest by the heuristic)::

    tables = load_tables()
    st = new_state(n)
    reset(st, tables, seeds, pod_size=4, max_turns=30, seat_kind=kinds, player_seeds=pseeds)
    while not st.done.all():
        encode(st, tables, st.active.astype(np.int64), obs)   # float32[N, OBS_DIM]
        mask = st.legal                                        # bool[N, NUM_ACTIONS]
        step(st, tables, actions, rewards)                     # rewards float32[N, MAX_POD]
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, TypedDict

import numpy as np

from ml.base.io import JSONObject
from ml.game.commander.actions import MAX_POD, NUM_ACTIONS
from ml.game.commander.cards import DECK_SIZE, KEYWORDS, KINDS, Card, Deck, load_card_pool, load_decks
from ml.game.commander.core import kernels
from ml.game.commander.core.kernels import CoreState, RecordView, Tables
from ml.game.commander.features import OBS_DIM, PHASES

if TYPE_CHECKING:
    from typing_extensions import Unpack

__all__ = [
    "OBS_DIM",
    "SEAT_EXTERNAL",
    "SEAT_HEURISTIC",
    "SEAT_RANDOM",
    "CoreState",
    "CoreTables",
    "RecordView",
    "SeatArrays",
    "apply_actions",
    "choose_scripted",
    "decision_record",
    "encode",
    "load_tables",
    "new_state",
    "reset",
    "step",
]

MAX_TURNS = int(np.iinfo(np.int16).max)
"""The largest round cap: the state's round counter and cap are int16 (``kernels.allocate``)."""
MAX_SEED = (int(np.iinfo(np.int64).max) - MAX_POD) // 7
"""The largest game seed magnitude: a scripted seat's seed, ``seed * 7 + seat``, must fit int64."""
SEAT_EXTERNAL, SEAT_HEURISTIC, SEAT_RANDOM = 0, 1, 2
"""``seat_kind`` codes: a seat whose actions the caller gives, the teacher, uniform random play."""
MAX_SAMPLED_DECKS = 21
"""``random.sample`` draws by its pool method (the one the kernels implement) for populations up to 21."""


class CoreTables:
    """The card pool and decks as kernel tables, with the names records need.

    Attributes:
        nb: the ``kernels.Tables`` passed to every kernel (int64 arrays).
        card_names: card id -> name (pool file order).
        card_id: name -> card id.
        deck_names, deck_archetypes, deck_commanders: per deck index (decks file order).
        is_land: card id -> the card is a land (records count lands).
        creature_id: name -> card id of the pool's creatures (a record's battlefield creatures).
    """

    def __init__(self, pool: dict[str, Card], decks: dict[str, Deck]) -> None:
        if len(decks) > MAX_SAMPLED_DECKS:
            raise ValueError(f"the core samples decks from at most {MAX_SAMPLED_DECKS} decks, got {len(decks)}")
        cards = list(pool.values())
        self.card_names = [c.name for c in cards]
        self.card_id = {name: i for i, name in enumerate(self.card_names)}
        self.deck_names = list(decks)
        self.deck_archetypes = [d.archetype for d in decks.values()]
        self.deck_commanders = [d.commander for d in decks.values()]
        kw = [sum(1 << KEYWORDS.index(k) for k in c.keywords) for c in cards]
        self.is_land = [c.kind == KINDS[0] for c in cards]
        self.creature_id = {c.name: i for i, c in enumerate(cards) if c.kind == KINDS[1]}

        def col(values: list[int]) -> np.ndarray:
            return np.asarray(values, dtype=np.int64)

        base = dict(
            kind=col([KINDS.index(c.kind) for c in cards]),
            mv=col([c.mana_value for c in cards]),
            power=col([c.power for c in cards]),
            tough=col([c.toughness for c in cards]),
            kw=col(kw),
            nkw=col([len(c.keywords) for c in cards]),
            instant=col([int(c.instant) for c in cards]),
            amount=col([c.amount for c in cards]),
            deck_cards=np.asarray([[self.card_id[n] for n in d.cards] for d in decks.values()], np.int64).reshape(
                -1, DECK_SIZE
            ),
            deck_cmdr=col([self.card_id[d.commander] for d in decks.values()]),
        )
        rank = np.zeros((2, len(cards), len(cards)), np.int8)
        kernels.favourable_ranks(Tables(**base, rank=np.zeros((2, 0, 0), np.int8)), rank)
        self.nb = Tables(**base, rank=rank)


@functools.lru_cache(maxsize=1)
def load_tables() -> CoreTables:
    """Tables of the built-in card pool and decks (``cards.load_card_pool``/``load_decks``), cached."""
    return CoreTables(load_card_pool(), load_decks())


def scratch(width: int = kernels.CAP) -> np.ndarray:
    """The kernels' scratch rows (int64[kernels.N_ROWS, max(width, kernels.CAP)]); every batched call takes one
    (``width``: the most creatures of one seat, for records beyond a zone's capacity)."""
    return np.zeros((kernels.N_ROWS, max(width, kernels.CAP)), np.int64)


def new_state(n: int) -> CoreState:
    """Zeroed state arrays for ``n`` games (``kernels.CoreState``); fill with :func:`reset`."""
    return kernels.allocate(n)


def _per_game(value: int | np.ndarray, n: int, dtype: type, name: str) -> np.ndarray:
    """``value`` as a C-contiguous, writeable ``dtype[n]`` (a scalar repeated; such an array as it is: the kernels
    only read it).

    Raises:
        ValueError: neither a scalar nor shape ``(n,)``.
    """
    if isinstance(value, np.ndarray) and value.dtype == dtype and value.shape == (n,):
        if value.flags.c_contiguous and value.flags.writeable:  # numba's one compiled type (else a new compile)
            return value
    if isinstance(value, int):
        return np.full(n, value, dtype)
    arr: np.ndarray = np.asarray(value, dtype=dtype)
    if arr.shape not in ((), (n,)):
        raise ValueError(f"{name} must be a scalar or shape ({n},), got {np.shape(value)}")
    out: np.ndarray = np.broadcast_to(arr, (n,)).copy()
    return out


def _outside(value: int | np.ndarray, arr: np.ndarray, lo: int, hi: int) -> bool:
    """Some game's ``value`` (a scalar, or ``arr``, its int64[N] form) lies outside ``lo..hi``."""
    if isinstance(value, int):
        return not lo <= value <= hi
    return bool(arr.min() < lo or arr.max() > hi)


class SeatArrays(TypedDict, total=False):
    """The per-seat arrays of :func:`reset` (keyword arguments; each absent or None takes its default)."""

    deck_choice: np.ndarray | None
    seat_kind: np.ndarray | None
    player_seeds: np.ndarray | None


def reset(
    st: CoreState,
    tables: CoreTables,
    seeds: np.ndarray,
    pod_size: int | np.ndarray = 4,
    max_turns: int | np.ndarray = 30,
    game_index: np.ndarray | None = None,
    games: np.ndarray | None = None,
    **seat_arrays: Unpack[SeatArrays],
) -> None:
    """Deal every game as ``rules.new_game(seeds[g], pod_size, max_turns, game_index[g], deck_names)`` does.

    Args:
        st: the state (N games), overwritten.
        tables: ``load_tables()``.
        seeds: int64[N] game seeds (Python ``random.Random`` seeds).
        pod_size, max_turns: per game (scalar or int[N]); 2..MAX_POD seats, 1..MAX_TURNS rounds.
        game_index: int64[N] for ``game_id``; None: 0..N-1.
        games: bool[N], the games to deal (the others are left as they are); None: all.
        seat_arrays: the :class:`SeatArrays` keywords (an unknown keyword is a TypeError):
        deck_choice: int[N, MAX_POD] deck indices per seat before the seat shuffle; -1 in
            column 0 (or None) draws the decks from the seed.
        seat_kind: int8[N, MAX_POD] ``SEAT_*`` codes; None: every seat external.
        player_seeds: int64[N, MAX_POD] seeds of the scripted seats' generators
            (``HeuristicPlayer(seed)``/``RandomPlayer(seed)``); None: zeros.

    No seat acts: the games stop at their first decision (call :func:`step` with all -1 to
    let scripted seats play up to the first external decision).

    Raises:
        ValueError: a bad pod size, round cap or shape.
        TypeError: a keyword that is not a parameter or a ``SeatArrays`` key.
    """
    n = st.seed.shape[0]
    seeds = _per_game(seeds, n, np.int64, "seeds")
    pods = _per_game(pod_size, n, np.int64, "pod_size")
    turns = _per_game(max_turns, n, np.int64, "max_turns")
    if _outside(pod_size, pods, 2, MAX_POD) or _outside(max_turns, turns, 1, MAX_TURNS):
        raise ValueError(f"pod_size must be in 2..{MAX_POD} and max_turns in 1..{MAX_TURNS}")
    index = np.arange(n, dtype=np.int64) if game_index is None else _per_game(game_index, n, np.int64, "game_index")
    unknown = set(seat_arrays) - set(SeatArrays.__annotations__)
    if unknown:
        raise TypeError(f"reset() got unexpected keyword arguments {sorted(unknown)}")
    deck_choice, seat_kind, player_seeds = (
        seat_arrays.get("deck_choice"),
        seat_arrays.get("seat_kind"),
        seat_arrays.get("player_seeds"),
    )
    decks = np.full((n, MAX_POD), -1, np.int64) if deck_choice is None else np.asarray(deck_choice, np.int64)
    kinds = np.zeros((n, MAX_POD), np.int8) if seat_kind is None else np.asarray(seat_kind, np.int8)
    pseeds = np.zeros((n, MAX_POD), np.int64) if player_seeds is None else np.asarray(player_seeds, np.int64)
    for name, arr in (("deck_choice", decks), ("seat_kind", kinds), ("player_seeds", pseeds)):
        if arr.shape != (n, MAX_POD):
            raise ValueError(f"{name} must have shape ({n}, {MAX_POD}), got {arr.shape}")
    which = np.ones(n, bool) if games is None else np.asarray(games, bool)
    if which.shape != (n,):
        raise ValueError(f"games must be bool[{n}], got shape {which.shape}")
    kernels.reset_kernel(st, tables.nb, kernels.Deal(which, seeds, index, pods, turns, decks, pseeds, kinds), scratch())


def step(st: CoreState, tables: CoreTables, actions: np.ndarray, rewards: np.ndarray) -> int:
    """The batched step (``kernels.step_kernel``).

    Args:
        actions: int64[N]; the action of the external seat to act in each game, -1 for none.
        rewards: float32[N, MAX_POD], overwritten with each seat's reward over this step.

    Returns:
        Decisions applied (external and scripted).

    Raises:
        ValueError: an action outside its game's legal mask.
    """
    return int(kernels.step_kernel(st, tables.nb, np.asarray(actions, np.int64), rewards, scratch()))


def apply_actions(st: CoreState, tables: CoreTables, actions: np.ndarray, rewards: np.ndarray) -> None:
    """One decision per game with ``actions[g] >= 0``, whatever the seat's kind; ``rewards`` as in :func:`step`.

    :func:`step` with every seat external for the call (``seat_kind`` restored after it, also when it
    raises): the step plays the action, then stops at the next seat to act. One rules kernel, so a
    cold cache compiles the rules once (a kernel of its own took 12 s of a 70 s compile).

    Raises:
        ValueError: an action outside its game's legal mask.
    """
    kinds = st.seat_kind.copy()
    st.seat_kind[:] = SEAT_EXTERNAL
    try:
        step(st, tables, actions, rewards)
    finally:
        st.seat_kind[:] = kinds


def choose_scripted(st: CoreState, tables: CoreTables, out: np.ndarray) -> np.ndarray:
    """int64[N]: the scripted seat's choice in each game (-1 where the seat to act is external or the game is over).

    Draws from the seat's generator as the object player's ``act`` would.
    """
    kernels.choose_kernel(st, tables.nb, out, scratch())
    return out


def encode(
    st: CoreState, tables: CoreTables, seats: np.ndarray, out: np.ndarray, view: RecordView = kernels.NO_RECORD
) -> np.ndarray:
    """Observations of ``seats[g]`` (int64[N], -1 for zeros) into ``out`` (float32[N, OBS_DIM]): the one
    encoder of live games and of decision records (the layout of ``ml.game.commander.observation``).

    Args:
        st: N live games, or N records as ``observation.record_arrays`` loads them.
        view: ``kernels.NO_RECORD`` for live games; the records' ``RecordView``.

    Raises:
        ValueError: ``out`` is not float32[N, OBS_DIM].
    """
    n = st.pod.shape[0]
    if out.shape != (n, OBS_DIM) or out.dtype != np.float32:
        raise ValueError(f"out must be float32[{n}, {OBS_DIM}], got {out.dtype}{list(out.shape)}")
    width = st.crt.shape[2] if view.listed.shape[0] else kernels.CAP
    kernels.encode_kernel(st, tables.nb, view, np.asarray(seats, np.int64), out, scratch(width))
    return out


def decision_record(st: CoreState, tables: CoreTables, g: int, seat: int | None = None) -> JSONObject:
    """``rules.decision_record`` of game ``g`` from the arrays (same keys, order and values).

    Reads each of the game's arrays once (``tolist``): element reads of numpy arrays cost about
    100 ns each, and a record reads hundreds of them.
    """
    names = tables.card_names
    is_land = tables.is_land
    n = int(st.pod[g])
    active = int(st.active[g])
    seat = active if seat is None else seat
    life, mana, sources, casts = st.life[g].tolist(), st.mana[g].tolist(), st.mana_sources[g].tolist(), st.casts[g].tolist()
    dmg, elim, in_cz, last = (
        st.cmdr_dmg[g].tolist(),
        st.eliminated[g].tolist(),
        st.in_cz[g].tolist(),
        st.last_attacker[g].tolist(),
    )
    lib_n, hand_n, grave_n, perm_n, crt_n = (a[g].tolist() for a in (st.lib_n, st.hand_n, st.grave_n, st.perm_n, st.crt_n))
    deck = st.deck[g].tolist()
    hand, grave, perm = st.hand[g, :n].tolist(), st.grave[g, :n].tolist(), st.perm[g, :n].tolist()
    crt_ids, crt_tapped, crt_sick = st.crt[g, :n].tolist(), st.crt_tapped[g, :n].tolist(), st.crt_sick[g, :n].tolist()
    players = []
    for s in range(n):
        k = crt_n[s]
        crt = [names[c] for c in crt_ids[s][:k]]
        tapped, sick = crt_tapped[s][:k], crt_sick[s][:k]
        perm_ids = perm[s][: perm_n[s]]
        cmdr = tables.deck_commanders[deck[s]]
        players.append({
            "seat": s,
            "life": life[s],
            "cmdr_dmg": {str(src): dmg[s][src] for src in range(n) if dmg[s][src]},
            "mana": mana[s],
            "cmdr_tax": 2 * casts[s],
            "creatures": k,
            "lands": sum(1 for c in perm_ids if is_land[c]),
            "hand": [names[c] for c in hand[s][: hand_n[s]]],
            "battlefield": [names[c] for c in perm_ids] + crt,
            "graveyard": [names[c] for c in grave[s][: grave_n[s]]],
            "command_zone": [cmdr] if in_cz[s] else [],
            "library": lib_n[s],
            "mana_sources": sources[s],
            "eliminated": elim[s],
            "commander_name": cmdr,
            "tapped": [c for c, t in zip(crt, tapped, strict=True) if t],
            "sick": [c for c, t in zip(crt, sick, strict=True) if t],
            "last_attacker": last[s],
        })  # fmt: skip
    mask = [int(x) for x in st.legal[g].tolist()] if seat == active else [0] * NUM_ACTIONS
    d = deck[seat]
    return {
        "game_id": f"game-{int(st.game_index[g])}-{int(st.seed[g])}",
        "turn": int(st.turn[g]),
        "phase": PHASES[int(st.phase[g])],
        "active_seat": seat,
        "game_outcome": "",
        "deck_name": tables.deck_names[d],
        "commander": tables.deck_commanders[d],
        "archetype": tables.deck_archetypes[d],
        "players": players,
        "action_mask": mask,
    }
