"""Compiled kernels of the batched Commander core: every ``@njit`` function of the core, in one module.

All kernels of the core live here because numba's cache entry of a function is keyed by the
file that defines it: an edit to a callee in another file would not be seen (house style
7.10). Constant tables (cards, decks) are arguments (:class:`Tables`); the few module
constants the kernels freeze are written out below and checked at import against the
modules they mirror (``actions``, ``features``, ``pod_rules``, ``cards``), so a change there
fails the import instead of running a stale cache. The rules' own numbers (mulligans, the
threat bonus, the heuristic player's thresholds) are defined here.

These kernels are the product's one rules engine (spec: ``shared/docs/commander-pod.md``).
The tests hold a Python object engine with the same semantics, statement for statement,
including the order of every random draw (``ml.game.commander.reference``, the oracle of
``tests/test_core_agreement.py``): each game and each scripted seat owns a Mersenne Twister
state (MT19937, the generator of Python's ``random``, seeded the way ``random.Random(int)``
seeds it), so the core deals the same games as the oracle's ``rules.new_game`` from the
same seed (the kernels' docstrings name the oracle's function each one mirrors: ``engine.*``,
``rules.*``, ``combat.*``, ``players.*``). The encoder
(:func:`encode_kernel`) is the project's one observation encoder, of live games and of
decision records alike (the layout in ``observation.py``; records reach it as arrays through
``observation.record_arrays`` and :class:`RecordView`); ``tests/test_encoding.py`` checks it
bit for bit against a Python oracle of the arithmetic (``tests/encoding_oracle.py``).

Array layout (N games, ``S_MAX`` seats, zones of capacity ``CAP``; ``CoreState``):

==================  ==================  ==================================================
field               dtype, shape        meaning
==================  ==================  ==================================================
seed, game_index    int64[N]            ``game_id`` is ``game-<index>-<seed>``
pod, max_turns      int8[N], int16[N]   seats in the game, round cap
turn, phase         int16[N], int8[N]   round (1-based), phase code (``PHASES`` order)
active              int8[N]             the seat to act (active = current seat)
done, winner        bool[N], int8[N]    game over; winning seat or -1
elim_order, elim_n  int8[N,S], int8[N]  seats eliminated, first out first
decisions           int32[N]            decisions applied so far
legal               bool[N,A]           legal actions of the seat to act (all False if done)
deck, seat_kind     int8[N,S]           deck index; 0 external, 1 heuristic, 2 random
life ... casts      int16[N,S]          life, mana, mana_sources, commander casts
cmdr_dmg            int16[N,S,S]        [g, defender, source] combat damage from commanders
eliminated,holding  bool[N,S]           out; holding mana (instant removal in combat)
in_cz               bool[N,S]           the commander is in the command zone
last_attacker       int8[N,S]           seat that attacked this seat last, -1 if none
lib/hand/grave/perm int16[N,S,CAP] + _n  card ids in order (library top last); perm = lands
                                        and rocks
crt + flags         int16/bool[N,S,CAP] creatures in battlefield order, tapped, sick, cmdr
rng, prng           uint32[N,625],      MT19937 state + index: the game's, and each
                    uint32[N,S,625]     scripted seat's
==================  ==================  ==================================================
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np
from numba import njit

from ml.game.commander import actions as _actions
from ml.game.commander import features as _features
from ml.game.commander import pod_rules as _pod_rules
from ml.game.commander.cards import DECK_SIZE, KEYWORDS, KINDS

# ---------------------------------------------------------------------------- frozen constants

S_MAX = 6
CAP = 100
"""Zone capacity: a library of 99 plus the commander can never overflow a zone."""
NUM_ACTIONS = 13
CAST_CREATURE, CAST_REMOVAL, CAST_DRAW, CAST_RAMP, CAST_WIPE, CAST_COMMANDER, HOLD_MANA, PASS = range(8)
FIRST_ATTACK = 8
MAIN_1, COMBAT, MAIN_2, END = 0, 1, 2, 3
LAND, CREATURE, REMOVAL, DRAW, RAMP, WIPE, UNKNOWN = 0, 1, 2, 3, 4, 5, 6
KW_FLYING, KW_HASTE, KW_TRAMPLE, KW_DEATHTOUCH, KW_LIFELINK, KW_VIGILANCE = 1, 2, 4, 8, 16, 32
STARTING_LIFE, HAND_SIZE, TAX_STEP, LETHAL_CMDR = 40, 7, 2, 21

# Rules defined here, by the core (the one rules engine; shared/docs/commander-pod.md).
MULL_MIN, MULL_MAX = 2, 5
"""Opening hands outside this land range are mulliganed (Forge AI keep rule, approximately)."""
MAX_MULL = 2
"""Free redraws at most (Commander free mulligan, rule 103.5c; no bottoming modelled)."""
THREAT_BONUS = 6
"""Extra threat of a commander (the threat rule): its damage counts toward the 21-point loss (rule 903.10a)."""

# The heuristic player (the teacher; shared/docs/commander-pod.md "Players (policies)").
EARLY_MANA = 6
"""Ramp takes priority over creatures while the seat has fewer mana sources (Forge AI ramps early)."""
REMOVAL_MIN_THREAT = 9
"""Smallest threat worth a removal spell before creatures (e.g. a 3/3 with one keyword)."""
WIPE_POWER_GAP = 8
"""Cast a wipe when an opponent's board power exceeds ours by this much (clearly behind)."""
WIPE_COUNT_GAP = 3
"""... and opponents' creatures outnumber ours by this many."""
SWAP_PROB = 0.15
"""Seeded tie-break noise: probability of preferring card draw over a creature (varied data)."""
LOSS_WEIGHT = 1.5
"""Attack score: weight of our creatures' value lost against damage dealt (life points)."""
RETALIATE_BONUS = 10.0
"""Attack score bonus for the opponent that attacked us last (its removal already points at us)."""
DANGER_FRACTION = 1.0
"""Keep blockers when one opponent's counterattack could deal this fraction of our life (the
kernels compare with the life itself: a value other than 1.0 fails the import)."""

# Observation layout (``features.py``): global block, seat blocks, hand block.
OBS_DIM, GLOBAL_DIM, SEAT_DIM, SEATS_START, HAND_START = 229, 7, 34, 7, 211
G_TURN, G_POD, G_LIVING = 4, 5, 6
(F_PRESENT, F_ALIVE, F_LIFE, F_MANA, F_SOURCES, F_TAX, F_CREATURES, F_POWER, F_TOUGH, F_FLYING, F_MAXPOW, F_LANDS,
 F_HAND, F_GRAVE, F_LIB, F_CZ, F_ACTOR, F_MAXCMDR, F_TOTCMDR, F_UNTAPPED, F_UNTAPPED_POW, F_ATT_DMG, F_ATT_LETHAL,
 F_ATT_LOST, F_BLK_LOST, F_CTR_DMG, F_CTR_LETHAL, F_ATTACKED_LAST, F_CMDR_FROM) = range(29)  # fmt: skip
H_KIND, H_AFFORD, H_INSTANTS, H_BEST_POW, H_CMDR_COST, H_CMDR_AFF = 0, 7, 14, 15, 16, 17


def _check_frozen() -> None:
    """The frozen constants equal the definitions they mirror (raises AssertionError naming the first that differs)."""
    f, a = _features, _actions
    checks = {
        "MAX_POD": (S_MAX, a.MAX_POD),
        "NUM_ACTIONS": (NUM_ACTIONS, a.NUM_ACTIONS),
        "actions": ((CAST_CREATURE, CAST_REMOVAL, CAST_DRAW, CAST_RAMP, CAST_WIPE, CAST_COMMANDER, HOLD_MANA, PASS, FIRST_ATTACK),
                    (a.CAST_CREATURE, a.CAST_REMOVAL, a.CAST_DRAW, a.CAST_RAMP, a.CAST_WIPE, a.CAST_COMMANDER, a.HOLD_MANA, a.PASS, a.FIRST_ATTACK)),
        "kind of cast action": (tuple(KINDS[i + 1] for i in range(5)), tuple(a.KIND_OF_ACTION[i] for i in range(5))),
        "phases": (("main_1", "combat", "main_2", "end"), f.PHASES),
        "kinds": (("land", "creature", "removal", "draw", "ramp", "wipe"), KINDS),
        "keywords": (("flying", "haste", "trample", "deathtouch", "lifelink", "vigilance"), KEYWORDS),
        "pod rules": ((STARTING_LIFE, HAND_SIZE, TAX_STEP, LETHAL_CMDR),
                      (_pod_rules.STARTING_LIFE, _pod_rules.HAND_SIZE, _pod_rules.COMMANDER_TAX_STEP, _pod_rules.COMMANDER_DAMAGE_LETHAL)),
        "danger fraction": (1.0, DANGER_FRACTION),
        "dims": ((OBS_DIM, GLOBAL_DIM, SEAT_DIM, SEATS_START, HAND_START), (f.OBS_DIM, f.GLOBAL_DIM, f.SEAT_DIM, f.SEATS_START, f.HAND_START)),
        "global": ((0, 1, 2, 3, G_TURN, G_POD, G_LIVING), tuple(f.G[k] for k in (*(f"phase_{p}" for p in f.PHASES), "turn", "pod_size", "living_players"))),
        "seat": (tuple(range(F_CMDR_FROM + 6)), tuple(f.S[k] for k in f.SEAT_FEATURE_NAMES)),
        "seat aliases": ((F_ATT_DMG, F_ATT_LETHAL), (f.S["ready_attackers"], f.S["ready_power"])),
        "hand": ((H_KIND, H_AFFORD, H_INSTANTS, H_BEST_POW, H_CMDR_COST, H_CMDR_AFF),
                 (f.H["hand_land"], f.H["affordable_land"], f.H["instants"], f.H["best_affordable_power"], f.H["commander_cost"], f.H["commander_affordable"])),
        "kinds in features": ((*KINDS, "unknown"), f.KINDS),
        "unknown kind": (UNKNOWN, f.KINDS.index("unknown")),
        "scales": ((30.0, 6, 40.0, 10.0, 10.0, 20.0, 10.0, 20.0, 10.0, 30.0, 99.0, 21.0, 42.0, 1.5),
                   (f.TURN_SCALE, f.POD_SCALE, f.LIFE_SCALE, f.MANA_SCALE, f.CREATURE_COUNT_SCALE, f.BOARD_POWER_SCALE, f.CREATURE_POWER_SCALE,
                    f.LANDS_SCALE, f.CARD_COUNT_SCALE, f.GRAVEYARD_SCALE, f.LIBRARY_SCALE, f.CMDR_DAMAGE_SCALE, f.TOTAL_CMDR_DAMAGE_SCALE, f.PREVIEW_DAMAGE_CAP)),
        "deck size": (CAP - 1, DECK_SIZE),
    }  # fmt: skip
    for name, (frozen, source) in checks.items():
        assert frozen == source, f"ml/game/commander/core/kernels.py: frozen {name} {frozen} != {source}; update the kernels"


_check_frozen()


class Tables(NamedTuple):
    """Constant tables the kernels read (int64 arrays; card ids are indices into the card pool, file order).

    Attributes: ``kind, mv, power, tough, kw`` (keyword bits ``KW_*``), ``nkw`` (keyword count),
    ``instant`` (0/1), ``amount`` over cards, int64[C]; ``deck_cards`` int64[D, 99] card ids
    in file order; ``deck_cmdr`` int64[D] the commander's card id; ``rank`` int8[2, C, C], the
    block planner's rank of blocker card ``b`` against attacker card ``a``, ``rank[cmdr, a, b]``
    (``cmdr``: the blocker is a commander), filled by :func:`favourable_ranks` from the others.
    """

    kind: np.ndarray
    mv: np.ndarray
    power: np.ndarray
    tough: np.ndarray
    kw: np.ndarray
    nkw: np.ndarray
    instant: np.ndarray
    amount: np.ndarray
    deck_cards: np.ndarray
    deck_cmdr: np.ndarray
    rank: np.ndarray


class CoreState(NamedTuple):
    """N games as fixed-capacity arrays (the module docstring's table)."""

    seed: np.ndarray
    game_index: np.ndarray
    pod: np.ndarray
    max_turns: np.ndarray
    turn: np.ndarray
    phase: np.ndarray
    active: np.ndarray
    done: np.ndarray
    winner: np.ndarray
    elim_order: np.ndarray
    elim_n: np.ndarray
    decisions: np.ndarray
    legal: np.ndarray
    deck: np.ndarray
    seat_kind: np.ndarray
    life: np.ndarray
    mana: np.ndarray
    mana_sources: np.ndarray
    casts: np.ndarray
    cmdr_dmg: np.ndarray
    eliminated: np.ndarray
    holding: np.ndarray
    in_cz: np.ndarray
    last_attacker: np.ndarray
    lib: np.ndarray
    lib_n: np.ndarray
    hand: np.ndarray
    hand_n: np.ndarray
    grave: np.ndarray
    grave_n: np.ndarray
    perm: np.ndarray
    perm_n: np.ndarray
    crt: np.ndarray
    crt_n: np.ndarray
    crt_tapped: np.ndarray
    crt_sick: np.ndarray
    crt_cmdr: np.ndarray
    rng: np.ndarray
    prng: np.ndarray


def allocate(n: int) -> CoreState:
    """Zeroed arrays for ``n`` games (``CoreState``; fill with :func:`reset_kernel`)."""
    s, c = S_MAX, CAP
    z = np.zeros
    return CoreState(
        seed=z(n, np.int64), game_index=z(n, np.int64), pod=z(n, np.int8), max_turns=z(n, np.int16), turn=z(n, np.int16),
        phase=z(n, np.int8), active=z(n, np.int8), done=z(n, np.bool_), winner=z(n, np.int8), elim_order=z((n, s), np.int8),
        elim_n=z(n, np.int8), decisions=z(n, np.int32), legal=z((n, NUM_ACTIONS), np.bool_), deck=z((n, s), np.int8),
        seat_kind=z((n, s), np.int8), life=z((n, s), np.int16), mana=z((n, s), np.int16), mana_sources=z((n, s), np.int16),
        casts=z((n, s), np.int16), cmdr_dmg=z((n, s, s), np.int16), eliminated=z((n, s), np.bool_), holding=z((n, s), np.bool_),
        in_cz=z((n, s), np.bool_), last_attacker=z((n, s), np.int8), lib=z((n, s, c), np.int16), lib_n=z((n, s), np.int16),
        hand=z((n, s, c), np.int16), hand_n=z((n, s), np.int16), grave=z((n, s, c), np.int16), grave_n=z((n, s), np.int16),
        perm=z((n, s, c), np.int16), perm_n=z((n, s), np.int16), crt=z((n, s, c), np.int16), crt_n=z((n, s), np.int16),
        crt_tapped=z((n, s, c), np.bool_), crt_sick=z((n, s, c), np.bool_), crt_cmdr=z((n, s, c), np.bool_),
        rng=z((n, 625), np.uint32), prng=z((n, s, 625), np.uint32),
    )  # fmt: skip


# ---------------------------------------------------------------------------- compilation

_KERNEL_OPTIONS: dict[str, Any] = {"cache": True, "_nrt": False}
kernel = njit(**_KERNEL_OPTIONS)
"""Every kernel's decorator: nopython, cached, and without numba's reference counting (NRT).

The kernels allocate nothing (the caller owns every buffer, the scratch rows included), so
they need no NRT; with it, every read of a state array in a branch (``a and b`` included)
costs an incref/decref pair per array of the 39-array ``CoreState`` (measured: 1 us for a
``not tapped and (not sick or haste)`` test, 1 ns without). ``_nrt`` is numba's own jit
option (numba is pinned in constraints.txt); an unknown option would fail at import.
"""
helper = njit(**_KERNEL_OPTIONS, inline="always")
"""Helpers, inlined into their callers by numba: a call that is not inlined passes the whole
state (39 arrays, about 350 machine words) by value, about 150 ns a call (measured).
The encoder's whole call chain (``encode_one``, ``_combat``, ``_plan_blocks``) is helpers,
inlined into ``encode_kernel``: with kernels in it, numba's cached code ran it 2x slower than
the same code freshly compiled (see :func:`combat`). So is the rules' chain of one decision
(``scripted_action`` and the heuristic it runs, ``_apply``, ``_cast``, ``_attack``,
``_advance``, ``_compute_legal``, ``_end_turn``, ``_rewards``), each called from one place in
:func:`step_kernel`: the rules-only bench went from 847,000 to 1,590,000 decisions/s and the
cold compile from 42 to 59 s (docs/measurements.md). A helper called from two places is two
copies to compile (81 s with ``_apply`` at two sites of ``step_kernel``)."""

# ---------------------------------------------------------------------------- MT19937 (Python's random)

_M32 = 0xFFFFFFFF


@kernel
def mt_seed(mt, seed):
    """Seed ``mt`` (uint32[625]: 624 words + index) as ``random.Random(seed)`` does (init_by_array of |seed|'s 32-bit words)."""
    if seed < 0:
        seed = -seed
    mt[0] = 19650218
    for i in range(1, 624):
        prev = np.int64(mt[i - 1])
        mt[i] = (1812433253 * (prev ^ (prev >> 30)) + i) & _M32
    k0 = seed & _M32
    k1 = (seed >> 32) & _M32
    klen = 2 if k1 != 0 else 1
    i = 1
    j = 0
    for _ in range(624):
        prev = np.int64(mt[i - 1])
        key = k0 if j == 0 else k1
        mt[i] = ((np.int64(mt[i]) ^ ((prev ^ (prev >> 30)) * 1664525)) + key + j) & _M32
        i += 1
        j += 1
        if i >= 624:
            mt[0] = mt[623]
            i = 1
        if j >= klen:
            j = 0
    for _ in range(623):
        prev = np.int64(mt[i - 1])
        mt[i] = ((np.int64(mt[i]) ^ ((prev ^ (prev >> 30)) * 1566083941)) - i) & _M32
        i += 1
        if i >= 624:
            mt[0] = mt[623]
            i = 1
    mt[0] = 0x80000000
    mt[624] = 624


@kernel
def mt_next(mt):
    """The next 32-bit output of ``mt`` (genrand_uint32), as int64."""
    idx = np.int64(mt[624])
    if idx >= 624:
        for kk in range(624):
            y = (np.int64(mt[kk]) & 0x80000000) | (np.int64(mt[(kk + 1) % 624]) & 0x7FFFFFFF)
            v = np.int64(mt[(kk + 397) % 624]) ^ (y >> 1)
            if y & 1:
                v ^= 0x9908B0DF
            mt[kk] = v
        idx = 0
    y = np.int64(mt[idx])
    mt[624] = idx + 1
    y ^= y >> 11
    y ^= (y << 7) & 0x9D2C5680
    y ^= (y << 15) & 0xEFC60000
    y ^= y >> 18
    return y


@kernel
def mt_random(mt):
    """``random.random()``: a float in [0, 1) from two outputs (genrand_res53)."""
    a = mt_next(mt) >> 5
    b = mt_next(mt) >> 6
    return (a * 67108864.0 + b) * (1.0 / 9007199254740992.0)


@kernel
def mt_below(mt, n):
    """``random._randbelow(n)`` (n >= 1): getrandbits(n.bit_length()) until below n."""
    k = 0
    while (n >> k) > 0:
        k += 1
    r = mt_next(mt) >> (32 - k)
    while r >= n:
        r = mt_next(mt) >> (32 - k)
    return r


@kernel
def _shuffle(mt, arr, n):
    """``random.shuffle`` of ``arr[:n]``."""
    for i in range(n - 1, 0, -1):
        j = mt_below(mt, i + 1)
        t = arr[i]
        arr[i] = arr[j]
        arr[j] = t


# ---------------------------------------------------------------------------- card facts


@helper
def _threat(T, c, cmdr):
    t = 2 * T.power[c] + T.tough[c] + 2 * T.nkw[c]
    return t + THREAT_BONUS if cmdr else t


@helper
def _board_value(T, c):
    return T.power[c] + T.tough[c] + T.nkw[c]


@helper
def _has(T, c, bit):
    return (T.kw[c] & bit) != 0


@helper
def _kills(T, src, dst, damage):
    return damage > 0 and (damage >= T.tough[dst] or _has(T, src, KW_DEATHTOUCH))


@helper
def _trample_excess(T, a, b):
    if not _has(T, a, KW_TRAMPLE):
        return 0
    needed = 1 if _has(T, a, KW_DEATHTOUCH) else T.tough[b]
    return max(0, T.power[a] - needed)


@helper
def _can_block(T, b, a):
    return not _has(T, a, KW_FLYING) or _has(T, b, KW_FLYING)


# ---------------------------------------------------------------------------- combat (shared by rules, heuristic, encoder)

# Rows of the scratch array ``scr`` (int64[N_ROWS, CAP]): inputs and outputs of combat().
ATT_CARD, ATT_CMDR, BLK_CARD, BLK_CMDR, BLK_TAPPED, BLOCKS, ORDER, POOL, DEAD_ATT, DEAD_BLK, ATT_SLOT, REMOVED, KEY = range(13)
N_ROWS = 13


@helper
def _unblocked(T, scr, na):
    total = 0
    cmdr = 0
    for i in range(na):
        a = scr[ATT_CARD, i]
        b = scr[BLOCKS, i]
        dmg = T.power[a] if b < 0 else _trample_excess(T, a, scr[BLK_CARD, b])
        total += dmg
        if scr[ATT_CMDR, i] and dmg > cmdr:
            cmdr = dmg
    return total, cmdr


@helper
def _sort_by_key(scr, items, n):
    """Stable insertion sort of ``scr[items, :n]`` by ``scr[KEY, :n]`` (keys move with their items)."""
    for i in range(1, n):
        x, kx = scr[items, i], scr[KEY, i]
        j = i - 1
        while j >= 0 and scr[KEY, j] > kx:
            scr[items, j + 1] = scr[items, j]
            scr[KEY, j + 1] = scr[KEY, j]
            j -= 1
        scr[items, j + 1] = x
        scr[KEY, j + 1] = kx


@helper
def _pool_remove(scr, pp, pool_n):
    for q in range(pp, pool_n - 1):
        scr[POOL, q] = scr[POOL, q + 1]
    return pool_n - 1


@helper
def _rank_of(T, a, bc, cmdr):
    """``combat._favourable_blocker``'s rank of blocker card ``bc`` (a commander if ``cmdr``) against
    attacker card ``a``: 0 eat, 1 wall, 2 trade, -1 none."""
    if not _can_block(T, bc, a):
        return -1
    survives = not _kills(T, a, bc, T.power[a])
    kills = _kills(T, bc, a, T.power[bc])
    if survives:
        return 0 if kills else 1
    if kills and not cmdr and T.mv[bc] <= T.mv[a]:
        return 2
    return -1


@kernel
def favourable_ranks(T, out):
    """``out[cmdr, a, b]`` = :func:`_rank_of` for every pair of cards (int8[2, C, C]; ``Tables.rank``).

    The planner reads the table: one load for the card tests each (attacker, blocker) pair
    costs, the inner loop of every combat the rules and the encoder plan."""
    n = T.power.shape[0]
    for cmdr in range(2):
        for a in range(n):
            for b in range(n):
                out[cmdr, a, b] = _rank_of(T, a, b, cmdr)


@helper
def _plan_blocks(T, scr, na, pool_n, life, taken):
    """``combat.plan_blocks`` over the scratch rows (pool = untapped blocker indices, in order)."""
    for i in range(na):  # attackers by threat, biggest first (stable)
        scr[ORDER, i] = i
        scr[KEY, i] = -_threat(T, scr[ATT_CARD, i], scr[ATT_CMDR, i])
    _sort_by_key(scr, ORDER, na)
    for oi in range(na):
        i = scr[ORDER, oi]
        a = scr[ATT_CARD, i]
        best = -1
        best_rank = 0
        best_mv = 0
        for pp in range(pool_n):
            b = scr[POOL, pp]
            rank = np.int64(T.rank[scr[BLK_CMDR, b], a, scr[BLK_CARD, b]])  # _rank_of(T, a, card, cmdr)
            if rank < 0:
                continue
            mv = T.mv[scr[BLK_CARD, b]]
            if best < 0 or rank < best_rank or (rank == best_rank and mv < best_mv):
                best, best_rank, best_mv = pp, rank, mv
        if best >= 0:
            scr[BLOCKS, i] = scr[POOL, best]
            pool_n = _pool_remove(scr, best, pool_n)
    total, cmdr = _unblocked(T, scr, na)
    if total < life and taken + cmdr < LETHAL_CMDR:
        return
    for pp in range(pool_n):  # chump blockers: cheapest first, then least threat (stable)
        b = scr[POOL, pp]
        scr[KEY, pp] = T.mv[scr[BLK_CARD, b]] * 100000 + _threat(T, scr[BLK_CARD, b], scr[BLK_CMDR, b])
    _sort_by_key(scr, POOL, pool_n)
    for i in range(na):  # attackers by power, biggest first (stable)
        scr[ORDER, i] = i
        scr[KEY, i] = -T.power[scr[ATT_CARD, i]]
    _sort_by_key(scr, ORDER, na)
    for oi in range(na):
        i = scr[ORDER, oi]
        if scr[BLOCKS, i] >= 0:
            continue
        for pp in range(pool_n):
            b = scr[POOL, pp]
            if _can_block(T, scr[BLK_CARD, b], scr[ATT_CARD, i]):
                scr[BLOCKS, i] = b
                pool_n = _pool_remove(scr, pp, pool_n)
                break
        total, cmdr = _unblocked(T, scr, na)
        if total < life and taken + cmdr < LETHAL_CMDR:
            break


@helper
def _combat(T, scr, na, nb, life, taken):
    """Block rule and damage of one attack (``combat.plan_blocks`` + ``combat.resolve_damage``).

    Inputs in ``scr``: attackers ``ATT_CARD/ATT_CMDR[:na]``, blockers
    ``BLK_CARD/BLK_CMDR/BLK_TAPPED[:nb]``. Writes ``BLOCKS[:na]`` (blocker index or -1),
    ``DEAD_ATT[:na]``, ``DEAD_BLK[:na]`` (attacker i's blocker dies).

    Returns:
        (damage to the player, part of it from the commander, attacker's lifelink gain,
        defender's lifelink gain), in life points.
    """
    pool_n = 0
    for b in range(nb):
        if not scr[BLK_TAPPED, b]:
            scr[POOL, pool_n] = b
            pool_n += 1
    for i in range(na):
        scr[BLOCKS, i] = -1
    if pool_n > 0:
        _plan_blocks(T, scr, na, pool_n, life, taken)
    pd = cd = ag = dg = 0
    for i in range(na):
        scr[DEAD_ATT, i] = 0
        scr[DEAD_BLK, i] = 0
        a = scr[ATT_CARD, i]
        bi = scr[BLOCKS, i]
        if bi < 0:
            dealt = to_player = T.power[a]
        else:
            b = scr[BLK_CARD, bi]
            to_player = _trample_excess(T, a, b)
            dealt = T.power[a]
            if _kills(T, a, b, dealt - to_player):
                scr[DEAD_BLK, i] = 1
            if _kills(T, b, a, T.power[b]):
                scr[DEAD_ATT, i] = 1
            if _has(T, b, KW_LIFELINK):
                dg += T.power[b]
        pd += to_player
        if scr[ATT_CMDR, i]:
            cd += to_player
        if _has(T, a, KW_LIFELINK):
            ag += dealt
    return pd, cd, ag, dg


@kernel
def combat(T, scr, na, nb, life, taken):
    """:func:`_combat` as one compiled function (int64 arguments), for the rules' call sites.

    The encoder inlines ``_combat`` instead: numba's cached code of a kernel calling another
    kernel ran the encoder 2x slower than the same code freshly compiled (1,250 against 600 ns
    an observation); inlined, both run alike. Inlined at the rules' call sites too, the first
    compile took 98 s against 67 s (one run each), so the rules keep this compiled function.
    """
    return _combat(T, scr, na, nb, life, taken)


@helper
def _lost_values(T, scr, na):
    """Board value of the dead attackers and of the dead blockers after combat()."""
    lost = killed = 0
    for i in range(na):
        if scr[DEAD_ATT, i]:
            lost += _board_value(T, scr[ATT_CARD, i])
        if scr[DEAD_BLK, i]:
            killed += _board_value(T, scr[BLK_CARD, scr[BLOCKS, i]])
    return lost, killed


@helper
def _can_attack(st, T, g, s, i):
    return not st.crt_tapped[g, s, i] and (not st.crt_sick[g, s, i] or _has(T, st.crt[g, s, i], KW_HASTE))


@helper
def _gather_ready(st, T, g, s, scr):
    """The seat's creatures able to attack into the attacker rows (and their slots); returns their count."""
    na = 0
    for i in range(st.crt_n[g, s]):
        if _can_attack(st, T, g, s, i):
            scr[ATT_CARD, na] = st.crt[g, s, i]
            scr[ATT_CMDR, na] = st.crt_cmdr[g, s, i]
            scr[ATT_SLOT, na] = i
            na += 1
    return na


@helper
def _gather_all_attackers(st, g, s, scr):
    """All the seat's creatures as untapped, ready attackers (the counterattack previews)."""
    n = np.int64(st.crt_n[g, s])
    for i in range(n):
        scr[ATT_CARD, i] = st.crt[g, s, i]
        scr[ATT_CMDR, i] = st.crt_cmdr[g, s, i]
    return n


@helper
def _gather_blockers(st, g, s, scr):
    n = np.int64(st.crt_n[g, s])
    for i in range(n):
        scr[BLK_CARD, i] = st.crt[g, s, i]
        scr[BLK_CMDR, i] = st.crt_cmdr[g, s, i]
        scr[BLK_TAPPED, i] = st.crt_tapped[g, s, i]
    return n


@helper
def _gather_kept(st, T, g, s, scr):
    """The seat's creatures left home by an all-out attack (cannot attack, or vigilance) into the blocker rows."""
    nk = 0
    for i in range(st.crt_n[g, s]):
        c = st.crt[g, s, i]
        if not _can_attack(st, T, g, s, i) or _has(T, c, KW_VIGILANCE):
            scr[BLK_CARD, nk] = c
            scr[BLK_CMDR, nk] = st.crt_cmdr[g, s, i]
            scr[BLK_TAPPED, nk] = st.crt_tapped[g, s, i]
            nk += 1
    return nk


# ---------------------------------------------------------------------------- zones and turn flow


@helper
def _hand_pop(st, g, s, i):
    c = st.hand[g, s, i]
    n = st.hand_n[g, s]
    for j in range(i, n - 1):
        st.hand[g, s, j] = st.hand[g, s, j + 1]
    st.hand_n[g, s] = n - 1
    return np.int64(c)


@helper
def _to_grave(st, g, s, c):
    st.grave[g, s, st.grave_n[g, s]] = c
    st.grave_n[g, s] += 1


@helper
def _to_perm(st, g, s, c):
    st.perm[g, s, st.perm_n[g, s]] = c
    st.perm_n[g, s] += 1


@helper
def _add_creature(st, g, s, c, cmdr):
    i = st.crt_n[g, s]
    st.crt[g, s, i] = c
    st.crt_tapped[g, s, i] = False
    st.crt_sick[g, s, i] = True
    st.crt_cmdr[g, s, i] = cmdr
    st.crt_n[g, s] = i + 1


@kernel
def _destroy(st, g, s, i):
    """Creature slot ``i`` of seat ``s`` dies: to the graveyard, a commander to the command zone."""
    c = st.crt[g, s, i]
    cmdr = st.crt_cmdr[g, s, i]
    n = st.crt_n[g, s]
    for j in range(i, n - 1):
        st.crt[g, s, j] = st.crt[g, s, j + 1]
        st.crt_tapped[g, s, j] = st.crt_tapped[g, s, j + 1]
        st.crt_sick[g, s, j] = st.crt_sick[g, s, j + 1]
        st.crt_cmdr[g, s, j] = st.crt_cmdr[g, s, j + 1]
    st.crt_n[g, s] = n - 1
    if cmdr:
        st.in_cz[g, s] = True
    else:
        _to_grave(st, g, s, c)


@helper
def _eliminate(st, g, s):
    if st.eliminated[g, s]:
        return
    st.eliminated[g, s] = True
    st.elim_order[g, st.elim_n[g]] = s
    st.elim_n[g] += 1
    st.crt_n[g, s] = 0
    st.perm_n[g, s] = 0
    st.mana[g, s] = 0
    st.mana_sources[g, s] = 0
    st.holding[g, s] = False
    living = 0
    last = -1
    for q in range(st.pod[g]):
        if not st.eliminated[g, q]:
            living += 1
            if last < 0:
                last = q
    if living <= 1:
        st.done[g] = True
        st.winner[g] = last


@kernel
def _draw(st, g, s, n):
    for _ in range(n):
        ln = st.lib_n[g, s]
        if ln == 0:
            _eliminate(st, g, s)
            return False
        st.hand[g, s, st.hand_n[g, s]] = st.lib[g, s, ln - 1]
        st.hand_n[g, s] += 1
        st.lib_n[g, s] = ln - 1
    return True


@helper
def _begin_turn(st, T, g, s, skip_draw):
    st.active[g] = s
    st.phase[g] = MAIN_1
    for i in range(st.crt_n[g, s]):
        st.crt_tapped[g, s, i] = False
        st.crt_sick[g, s, i] = False
    st.mana[g, s] = st.mana_sources[g, s]
    st.holding[g, s] = False
    if not skip_draw and not _draw(st, g, s, 1):
        return
    for i in range(st.hand_n[g, s]):
        if T.kind[st.hand[g, s, i]] == LAND:
            _to_perm(st, g, s, _hand_pop(st, g, s, i))
            st.mana_sources[g, s] += 1
            st.mana[g, s] += 1
            break


@helper
def _discard_index(st, T, g, s):
    lands = 0
    last_land = -1
    best = -1
    best_mv = -1
    for i in range(st.hand_n[g, s]):
        c = st.hand[g, s, i]
        if T.kind[c] == LAND:
            lands += 1
            last_land = i
        if T.mv[c] >= best_mv:
            best, best_mv = i, T.mv[c]
    return last_land if lands > 3 else best


@helper
def _end_turn(st, T, g):
    a = np.int64(st.active[g])
    while st.hand_n[g, a] > HAND_SIZE:
        _to_grave(st, g, a, _hand_pop(st, g, a, _discard_index(st, T, g, a)))
    n = np.int64(st.pod[g])
    nxt = a
    for _ in range(n):
        nxt = (nxt + 1) % n
        if not st.eliminated[g, nxt]:
            break
    if nxt <= a:
        st.turn[g] += 1
        if st.turn[g] > st.max_turns[g]:
            st.turn[g] = st.max_turns[g]
            st.phase[g] = END
            st.done[g] = True
            st.winner[g] = -1
            return
    _begin_turn(st, T, g, nxt, False)


@helper
def _after_pass(st, g):
    if st.phase[g] == COMBAT:
        return MAIN_2
    st.holding[g, st.active[g]] = False
    return COMBAT if st.phase[g] == MAIN_1 else END


@helper
def _biggest_slot(st, T, g, s):
    best = 0
    best_t = _threat(T, st.crt[g, s, 0], st.crt_cmdr[g, s, 0])
    for i in range(1, st.crt_n[g, s]):
        t = _threat(T, st.crt[g, s, i], st.crt_cmdr[g, s, i])
        if t > best_t:
            best, best_t = i, t
    return best


@kernel
def removal_target(st, T, g, s):
    """``engine.removal_target``: (seat, creature slot) of the biggest threat to ``s``, or (-1, -1)."""
    n = np.int64(st.pod[g])
    last = np.int64(st.last_attacker[g, s])
    if last >= 0 and not st.eliminated[g, last] and st.crt_n[g, last] > 0:
        return last, _biggest_slot(st, T, g, last)
    best_s = -1
    best_i = -1
    best_t = -1
    for k in range(1, n):
        o = (s + k) % n
        if st.eliminated[g, o]:
            continue
        for i in range(st.crt_n[g, o]):
            t = _threat(T, st.crt[g, o, i], st.crt_cmdr[g, o, i])
            if t > best_t:
                best_s, best_i, best_t = o, i, t
    return best_s, best_i


@helper
def _combat_legal(st, T, g, s, n):
    """The combat half of ``engine.compute_legal``: pass, and an attack on each living opponent if a creature can attack."""
    st.legal[g, PASS] = True
    ready = False
    for i in range(st.crt_n[g, s]):
        if _can_attack(st, T, g, s, i):
            ready = True
            break
    if not ready:
        return 1
    count = 1
    for k in range(1, n):
        if not st.eliminated[g, (s + k) % n]:
            st.legal[g, FIRST_ATTACK + k - 1] = True
            count += 1
    return count


@helper
def _wipe_has_targets(st, g, n):
    for q in range(n):
        if st.crt_n[g, q] > 0:
            return True
    return False


@helper
def _compute_legal(st, T, g):
    """``engine.compute_legal`` into ``st.legal[g]``; returns the number of legal actions."""
    for a in range(NUM_ACTIONS):
        st.legal[g, a] = False
    s = np.int64(st.active[g])
    n = np.int64(st.pod[g])
    if st.phase[g] == COMBAT:
        return _combat_legal(st, T, g, s, n)
    mana = st.mana[g, s]
    affordable = 0
    instant = False
    for i in range(st.hand_n[g, s]):
        c = st.hand[g, s, i]
        if T.mv[c] <= mana:
            affordable |= 1 << T.kind[c]
            if T.instant[c]:
                instant = True
    count = 0
    for action in range(5):
        if not affordable & (1 << (action + 1)):
            continue
        if action == CAST_REMOVAL and removal_target(st, T, g, s)[0] < 0:
            continue
        if action == CAST_WIPE and not _wipe_has_targets(st, g, n):
            continue
        st.legal[g, action] = True
        count += 1
    if st.in_cz[g, s] and T.mv[T.deck_cmdr[st.deck[g, s]]] + TAX_STEP * st.casts[g, s] <= mana:
        st.legal[g, CAST_COMMANDER] = True
        count += 1
    if instant:
        st.legal[g, HOLD_MANA] = True
        count += 1
    st.legal[g, PASS] = True
    return count + 1


@helper
def _advance(st, T, g):
    while not st.done[g]:
        if st.eliminated[g, st.active[g]] or st.phase[g] == END:
            _end_turn(st, T, g)
            continue
        if _compute_legal(st, T, g) > 1:
            return
        st.phase[g] = _after_pass(st, g)
    for a in range(NUM_ACTIONS):
        st.legal[g, a] = False


# ---------------------------------------------------------------------------- card effects


@helper
def choose_card(st, T, g, s, kind):
    """``engine.choose_card``: hand index of the card a cast of ``kind`` casts, or -1."""
    m = st.mana[g, s]
    best = -1
    k1 = 0
    k2 = 0
    for i in range(st.hand_n[g, s]):
        c = st.hand[g, s, i]
        if T.kind[c] != kind or T.mv[c] > m:
            continue
        if kind == CREATURE:
            a, b = -T.mv[c], 0
        elif kind == REMOVAL:
            a, b = T.mv[c], T.instant[c]
        elif kind == DRAW or kind == RAMP:
            a, b = -T.amount[c], T.mv[c]
        else:
            a, b = T.mv[c], 0
        if best < 0 or a < k1 or (a == k1 and b < k2):
            best, k1, k2 = i, a, b
    return best


@helper
def _cheapest_instant(st, T, g, s):
    best = -1
    best_mv = 0
    for i in range(st.hand_n[g, s]):
        c = st.hand[g, s, i]
        if T.instant[c] and T.mv[c] <= st.mana[g, s] and (best < 0 or T.mv[c] < best_mv):
            best, best_mv = i, T.mv[c]
    return best


@helper
def _cast(st, T, g, s, action):
    if action == CAST_COMMANDER:
        c = T.deck_cmdr[st.deck[g, s]]
        st.in_cz[g, s] = False
        st.mana[g, s] -= T.mv[c] + TAX_STEP * st.casts[g, s]
        st.casts[g, s] += 1
        _add_creature(st, g, s, c, True)
        return
    c = _hand_pop(st, g, s, choose_card(st, T, g, s, action + 1))
    st.mana[g, s] -= T.mv[c]
    if action == CAST_CREATURE:
        _add_creature(st, g, s, c, False)
        return
    if action == CAST_RAMP:
        _to_perm(st, g, s, c)
        st.mana_sources[g, s] += T.amount[c]
        st.mana[g, s] += T.amount[c]
        return
    _to_grave(st, g, s, c)
    if action == CAST_REMOVAL:
        ts, ti = removal_target(st, T, g, s)
        _destroy(st, g, ts, ti)
    elif action == CAST_DRAW:
        _draw(st, g, s, T.amount[c])
    else:
        for q in range(st.pod[g]):
            while st.crt_n[g, q] > 0:
                _destroy(st, g, q, 0)


@helper
def _instant_response(st, T, g, s, d, scr, na):
    """A holding defender casts its cheapest affordable instant removal on the biggest attacker; returns the attackers left."""
    ii = _cheapest_instant(st, T, g, d)
    if ii < 0:
        return na
    c = _hand_pop(st, g, d, ii)
    st.mana[g, d] -= T.mv[c]
    _to_grave(st, g, d, c)
    bj = 0
    bt = _threat(T, scr[ATT_CARD, 0], scr[ATT_CMDR, 0])
    for j in range(1, na):
        t = _threat(T, scr[ATT_CARD, j], scr[ATT_CMDR, j])
        if t > bt:
            bj, bt = j, t
    removed = scr[ATT_SLOT, bj]
    for j in range(bj, na - 1):
        scr[ATT_SLOT, j] = scr[ATT_SLOT, j + 1]
        scr[ATT_CARD, j] = scr[ATT_CARD, j + 1]
        scr[ATT_CMDR, j] = scr[ATT_CMDR, j + 1]
    na -= 1
    for j in range(na):
        if scr[ATT_SLOT, j] > removed:
            scr[ATT_SLOT, j] -= 1
    _destroy(st, g, s, removed)
    return na


@helper
def _attack(st, T, g, s, d, scr):
    """``engine.attack``: seat ``s`` attacks ``d`` with every creature able to; responses, blocks, damage."""
    na = _gather_ready(st, T, g, s, scr)
    st.last_attacker[g, d] = s
    for j in range(na):
        i = scr[ATT_SLOT, j]
        if not _has(T, st.crt[g, s, i], KW_VIGILANCE):
            st.crt_tapped[g, s, i] = True
    if st.holding[g, d]:
        na = _instant_response(st, T, g, s, d, scr, na)
    nb = _gather_blockers(st, g, d, scr)
    pd, cd, ag, dg = combat(T, scr, np.int64(na), np.int64(nb), np.int64(st.life[g, d]), np.int64(st.cmdr_dmg[g, d, s]))
    st.life[g, d] += dg - pd
    st.life[g, s] += ag
    st.cmdr_dmg[g, d, s] += cd
    gone = 0
    for j in range(na):  # attacker slots ascend: each death shifts the later ones by one
        if scr[DEAD_ATT, j]:
            _destroy(st, g, s, scr[ATT_SLOT, j] - gone)
            gone += 1
    nr = 0
    for j in range(na):  # dead blockers in attacker order, as combat.resolve_damage lists them
        if scr[DEAD_BLK, j]:
            b = scr[BLOCKS, j]
            shift = 0
            for r in range(nr):
                if scr[REMOVED, r] < b:
                    shift += 1
            _destroy(st, g, d, b - shift)
            scr[REMOVED, nr] = b
            nr += 1
    if st.life[g, d] <= 0 or st.cmdr_dmg[g, d, s] >= LETHAL_CMDR:
        _eliminate(st, g, d)


@helper
def _apply(st, T, g, action, scr):
    """``rules.apply_action`` of a legal ``action`` for the seat to act in game ``g``."""
    s = np.int64(st.active[g])
    n = np.int64(st.pod[g])
    if st.phase[g] == COMBAT:
        if action != PASS:
            _attack(st, T, g, s, (s + action - FIRST_ATTACK + 1) % n, scr)
        st.phase[g] = MAIN_2
    elif action == PASS:
        st.phase[g] = _after_pass(st, g)
    elif action == HOLD_MANA:
        st.holding[g, s] = True
        st.phase[g] = COMBAT if st.phase[g] == MAIN_1 else END
    else:
        _cast(st, T, g, s, action)
    st.decisions[g] += 1
    _advance(st, T, g)


# ---------------------------------------------------------------------------- setup (rules.new_game)


@kernel
def _deal_opening_hand(st, T, g, s, mt):
    for _ in range(MAX_MULL + 1):
        lands = 0
        st.hand_n[g, s] = 0
        for _k in range(HAND_SIZE):
            _draw(st, g, s, 1)
        for i in range(HAND_SIZE):
            if T.kind[st.hand[g, s, i]] == LAND:
                lands += 1
        if MULL_MIN <= lands <= MULL_MAX:
            return
        for i in range(HAND_SIZE):
            st.lib[g, s, st.lib_n[g, s]] = st.hand[g, s, i]
            st.lib_n[g, s] += 1
        st.hand_n[g, s] = 0
        _shuffle(mt, st.lib[g, s], st.lib_n[g, s])
    for _k in range(HAND_SIZE):
        _draw(st, g, s, 1)


@kernel
def reset_kernel(st, T, deal, scr):
    """``rules.new_game`` for every game of ``deal`` (a :class:`Deal`): deal from ``seeds[g]`` and advance to the first decision.

    ``deck_choice[g, 0] < 0`` draws decks as ``new_game(deck_names=None)`` (sample without
    repeats while the pool allows, else with); otherwise ``deck_choice[g, :pod]`` are deck
    indices before the seat shuffle. Only games with ``which[g]`` are dealt. Scripted seats (``seat_kind`` 1 or 2) seed their own
    generator from ``player_seeds[g, s]``. No scripted seat acts here.
    """
    which, seeds, game_index, pods, max_turns, deck_choice, player_seeds, seat_kind = deal
    n_decks = T.deck_cards.shape[0]
    chosen = scr[ORDER]
    names = scr[POOL]
    for g in range(seeds.shape[0]):
        if not which[g]:
            continue
        n = np.int64(pods[g])
        st.seed[g] = seeds[g]
        st.game_index[g] = game_index[g]
        st.pod[g] = n
        st.max_turns[g] = max_turns[g]
        st.turn[g] = 1
        st.phase[g] = MAIN_1
        st.active[g] = 0
        st.done[g] = False
        st.winner[g] = -1
        st.elim_n[g] = 0
        st.decisions[g] = 0
        st.legal[g, :] = False
        st.cmdr_dmg[g, :, :] = 0
        for s in range(S_MAX):
            st.seat_kind[g, s] = seat_kind[g, s]
            st.life[g, s] = STARTING_LIFE if s < n else 0
            st.mana[g, s] = 0
            st.mana_sources[g, s] = 0
            st.casts[g, s] = 0
            st.eliminated[g, s] = False
            st.holding[g, s] = False
            st.in_cz[g, s] = s < n
            st.last_attacker[g, s] = -1
            st.lib_n[g, s] = 0
            st.hand_n[g, s] = 0
            st.grave_n[g, s] = 0
            st.perm_n[g, s] = 0
            st.crt_n[g, s] = 0
            st.deck[g, s] = -1
        mt = st.rng[g]
        mt_seed(mt, seeds[g])
        if deck_choice[g, 0] < 0:
            if n <= n_decks:
                for i in range(n_decks):
                    names[i] = i
                for i in range(n):
                    j = mt_below(mt, n_decks - i)
                    chosen[i] = names[j]
                    names[j] = names[n_decks - i - 1]
            else:
                for i in range(n):
                    chosen[i] = mt_below(mt, n_decks)
        else:
            for i in range(n):
                chosen[i] = deck_choice[g, i]
        _shuffle(mt, chosen, n)
        for s in range(n):
            d = chosen[s]
            st.deck[g, s] = d
            for i in range(CAP - 1):
                st.lib[g, s, i] = T.deck_cards[d, i]
            st.lib_n[g, s] = CAP - 1
            _shuffle(mt, st.lib[g, s], CAP - 1)
            _deal_opening_hand(st, T, g, s, mt)
            if seat_kind[g, s] != 0:
                mt_seed(st.prng[g, s], player_seeds[g, s])
        _begin_turn(st, T, g, 0, True)
        _advance(st, T, g)


# ---------------------------------------------------------------------------- scripted players


@helper
def _behind(st, g, s, T):
    mine = 0
    for i in range(st.crt_n[g, s]):
        mine += T.power[st.crt[g, s, i]]
    theirs = 0
    count = 0
    for o in range(st.pod[g]):
        if o != s and not st.eliminated[g, o]:
            p = 0
            for i in range(st.crt_n[g, o]):
                p += T.power[st.crt[g, o, i]]
            theirs = max(theirs, p)
            count += st.crt_n[g, o]
    return theirs >= mine + WIPE_POWER_GAP and count >= st.crt_n[g, s] + WIPE_COUNT_GAP


@helper
def _heuristic_main(st, T, g, s):
    legal = st.legal[g]
    if legal[CAST_COMMANDER]:
        return CAST_COMMANDER
    if legal[CAST_RAMP] and st.mana_sources[g, s] < EARLY_MANA:
        return CAST_RAMP
    if legal[CAST_WIPE] and _behind(st, g, s, T):
        return CAST_WIPE
    if legal[CAST_REMOVAL]:
        ts, ti = removal_target(st, T, g, s)
        if ts >= 0 and (_threat(T, st.crt[g, ts, ti], st.crt_cmdr[g, ts, ti]) >= REMOVAL_MIN_THREAT or st.crt_cmdr[g, ts, ti]):
            return CAST_REMOVAL
    first, second = CAST_CREATURE, CAST_DRAW
    if mt_random(st.prng[g, s]) < SWAP_PROB:
        first, second = CAST_DRAW, CAST_CREATURE
    if legal[first]:
        return first
    if legal[second]:
        return second
    if legal[CAST_RAMP]:
        return CAST_RAMP
    if legal[CAST_REMOVAL]:
        return CAST_REMOVAL
    return PASS


@helper
def _threatened(st, T, g, s, scr):
    nk = _gather_kept(st, T, g, s, scr)
    life = np.int64(st.life[g, s])
    for o in range(st.pod[g]):
        if o == s or st.eliminated[g, o] or st.crt_n[g, o] == 0:
            continue
        power = 0
        cmdr = 0
        for i in range(st.crt_n[g, o]):
            p = T.power[st.crt[g, o, i]]
            power += p
            if st.crt_cmdr[g, o, i] and p > cmdr:
                cmdr = p
        taken = np.int64(st.cmdr_dmg[g, s, o])
        if power >= life or taken + cmdr >= LETHAL_CMDR:
            na = _gather_all_attackers(st, g, o, scr)
            pd, cd, _ag, _dg = combat(T, scr, np.int64(na), np.int64(nk), life, taken)
            if pd >= life or taken + cd >= LETHAL_CMDR:
                return True
    return False


@helper
def _heuristic_combat(st, T, g, s, scr):
    n = np.int64(st.pod[g])
    best = PASS
    best_score = 0.0
    for action in range(FIRST_ATTACK, NUM_ACTIONS):
        if not st.legal[g, action]:
            continue
        d = (s + action - FIRST_ATTACK + 1) % n
        na = _gather_ready(st, T, g, s, scr)
        nb = _gather_blockers(st, g, d, scr)
        life = np.int64(st.life[g, d])
        taken = np.int64(st.cmdr_dmg[g, d, s])
        pd, cd, _ag, dg = combat(T, scr, np.int64(na), np.int64(nb), life, taken)
        if life + dg - pd <= 0 or taken + cd >= LETHAL_CMDR:
            return action
        lost, killed = _lost_values(T, scr, na)
        vulnerability = 40.0 / max(life, 1)
        score = pd * vulnerability + killed - LOSS_WEIGHT * lost
        if score > 0 and d == st.last_attacker[g, s]:
            score += RETALIATE_BONUS
        score += mt_random(st.prng[g, s]) * 0.5
        if score > best_score:
            best, best_score = action, score
    if best != PASS and _threatened(st, T, g, s, scr):
        return PASS
    return best


@helper
def scripted_action(st, T, g, scr):
    """The scripted player's choice for the seat to act (``HeuristicPlayer.act``/``RandomPlayer.act``), -1 if none."""
    if st.done[g]:
        return -1
    s = np.int64(st.active[g])
    kind = st.seat_kind[g, s]
    count = 0
    only = -1
    for a in range(NUM_ACTIONS):
        if st.legal[g, a]:
            count += 1
            only = a
    if kind == 2:
        r = mt_below(st.prng[g, s], count)
        for a in range(NUM_ACTIONS):
            if st.legal[g, a]:
                if r == 0:
                    return a
                r -= 1
    if kind != 1:
        return -1
    if count == 1:
        return only
    if st.phase[g] == COMBAT:
        return _heuristic_combat(st, T, g, s, scr)
    return _heuristic_main(st, T, g, s)


# ---------------------------------------------------------------------------- batched entry points


@helper
def _rewards(st, g, e0, rewards):
    """Zero-sum rewards of what happened since ``elim_n`` was ``e0`` (``env.CommanderPodEnv`` rules)."""
    n = np.int64(st.pod[g])
    loss = -1.0 / (n - 1)
    for j in range(e0, st.elim_n[g]):
        rewards[g, st.elim_order[g, j]] += loss
    if st.done[g]:
        if st.winner[g] >= 0:
            rewards[g, st.winner[g]] += 1.0
        else:
            live = n - st.elim_n[g]
            eliminated = np.int64(st.elim_n[g])
            for s in range(n):
                if not st.eliminated[g, s]:
                    rewards[g, s] += -loss * eliminated / live


@helper
def _check(st, g, a):
    if a < 0 or a >= NUM_ACTIONS or not st.legal[g, a]:
        raise ValueError("an action outside the legal mask of its game")


@kernel
def step_kernel(st, T, actions, rewards, scr):
    """The batched step: the external seat to act plays ``actions[g]`` (skipped if < 0), then
    scripted seats play until an external seat is to act or the game ends; ``rewards[g]``
    sums what each seat got in between. Returns the number of decisions applied."""
    total = 0
    for g in range(actions.shape[0]):
        rewards[g, :] = 0.0
        if st.done[g]:
            continue
        e0 = st.elim_n[g]
        before = st.decisions[g]
        a = actions[g]
        if a >= 0 and st.seat_kind[g, st.active[g]] == 0:
            _check(st, g, a)
        else:
            a = -1
        while True:  # one call site of _apply and of scripted_action: each inlined copy adds seconds to the compile
            if a < 0:
                if st.done[g] or st.seat_kind[g, st.active[g]] == 0:
                    break
                a = scripted_action(st, T, g, scr)
            _apply(st, T, g, a, scr)
            a = -1
        total += st.decisions[g] - before
        _rewards(st, g, e0, rewards)
    return total


@kernel
def choose_kernel(st, T, out, scr):
    """``out[g]``: the scripted choice of the seat to act in every game (-1 for external seats and finished games)."""
    for g in range(out.shape[0]):
        out[g] = scripted_action(st, T, g, scr)


# ---------------------------------------------------------------------------- observation (records and live games)


class Deal(NamedTuple):
    """What :func:`reset_kernel` deals, per game ``g`` of N (``core.reset`` builds it): ``which`` bool[N] (deal
    game ``g``), ``seeds`` int64[N], ``game_index`` int64[N], ``pods`` int64[N] (players), ``max_turns`` int64[N],
    ``deck_choice`` int64[N, S_MAX] (-1 in column 0: drawn), ``player_seeds`` int64[N, S_MAX] (the scripted
    seats' generators), ``seat_kind`` int8[N, S_MAX] (0 network, 1 heuristic, 2 random)."""

    which: np.ndarray
    seeds: np.ndarray
    game_index: np.ndarray
    pods: np.ndarray
    max_turns: np.ndarray
    deck_choice: np.ndarray
    player_seeds: np.ndarray
    seat_kind: np.ndarray


class RecordView(NamedTuple):
    """What a decision record states outright that the live state derives, one row per record, by seat.

    The record path (``observation.record_arrays``) fills a ``CoreState`` holding the encoder's
    fields plus this view; the live path passes :data:`NO_RECORD` (zero rows), and the encoder
    reads the view only when it has rows. Fields (N records, ``S_MAX`` seats):

    ==================  ==================  ==================================================
    field               dtype, shape        meaning
    ==================  ==================  ==================================================
    listed              bool[N,S]           the seat is in ``players`` (the last entry wins)
    living              int16[N]            entries of ``players`` not eliminated
    tax, lands          int16[N,S]          ``cmdr_tax``, ``lands`` as the record gives them
    creatures           int16[N,S]          ``creatures``, at least the pool creatures listed
    cmdr_card           int16[N,S]          card id of the command zone's first card, -1 if
                                            none or outside the pool
    dmg_src, dmg_amt    int8/int16[N,S,S]   commander damage entries in record order: source
                                            seat (-1 unknown: Forge's sum), amount
    dmg_n               int8[N,S]           entries
    ==================  ==================  ==================================================
    """

    listed: np.ndarray
    living: np.ndarray
    tax: np.ndarray
    lands: np.ndarray
    creatures: np.ndarray
    cmdr_card: np.ndarray
    dmg_src: np.ndarray
    dmg_amt: np.ndarray
    dmg_n: np.ndarray


def allocate_view(n: int) -> RecordView:
    """Zeroed :class:`RecordView` rows for ``n`` records (``n = 0``: :data:`NO_RECORD`)."""
    s, z = S_MAX, np.zeros
    return RecordView(
        listed=z((n, s), np.bool_), living=z(n, np.int16), tax=z((n, s), np.int16), lands=z((n, s), np.int16),
        creatures=z((n, s), np.int16), cmdr_card=z((n, s), np.int16), dmg_src=z((n, s, s), np.int8),
        dmg_amt=z((n, s, s), np.int16), dmg_n=z((n, s), np.int8),
    )  # fmt: skip


NO_RECORD = allocate_view(0)
"""The view of live games: no rows, so the encoder derives every count from the state."""
EMPTY_STATE = allocate(0)
"""Zero-size arrays of every ``CoreState`` field; a record batch (``observation.record_arrays``) replaces the
fields the encoder reads of a record, so both paths share one compiled encoder (same dtypes and ranks).
Never written: shared by every record batch."""


@helper
def _tenths(count):
    """``count`` additions of 1.0 / 10.0 from 0.0 (the accumulation of one count per card, rounding included)."""
    v = 0.0
    for _ in range(count):
        v += 1.0 / 10.0
    return v


@helper
def _encode_seat(st, T, ov, g, p, actor, o):
    """Seat ``p``'s block ``o`` (the view of its slots): every feature but the previews (one pass over its creatures)."""
    rec = ov.listed.shape[0] > 0
    n = np.int64(st.pod[g])
    power = tough = flying = max_power = untapped = untapped_power = ready = ready_power = 0
    for i in range(st.crt_n[g, p]):
        c = st.crt[g, p, i]
        pw = T.power[c]
        power += pw
        tough += T.tough[c]
        if pw > max_power:
            max_power = pw
        if _has(T, c, KW_FLYING):
            flying += pw
        if not st.crt_tapped[g, p, i]:
            untapped += 1
            untapped_power += pw
            if not st.crt_sick[g, p, i] or _has(T, c, KW_HASTE):
                ready += 1
                ready_power += pw
    if rec:
        lands = np.int64(ov.lands[g, p])
        tax = np.int64(ov.tax[g, p])
        creatures = np.int64(ov.creatures[g, p])
        entries = np.int64(ov.dmg_n[g, p])
    else:
        lands = 0
        for i in range(st.perm_n[g, p]):
            if T.kind[st.perm[g, p, i]] == LAND:
                lands += 1
        tax = TAX_STEP * np.int64(st.casts[g, p])
        creatures = np.int64(st.crt_n[g, p])
        entries = n
    o[F_PRESENT] = 1.0
    o[F_ALIVE] = 0.0 if st.eliminated[g, p] else 1.0
    o[F_LIFE] = st.life[g, p] / 40.0
    o[F_MANA] = st.mana[g, p] / 10.0
    o[F_SOURCES] = st.mana_sources[g, p] / 10.0
    o[F_TAX] = tax / 10.0
    o[F_CREATURES] = creatures / 10.0
    o[F_POWER] = power / 20.0
    o[F_TOUGH] = tough / 20.0
    o[F_FLYING] = flying / 20.0
    o[F_MAXPOW] = max_power / 10.0
    o[F_LANDS] = lands / 20.0
    o[F_HAND] = st.hand_n[g, p] / 10.0
    o[F_GRAVE] = st.grave_n[g, p] / 30.0
    o[F_LIB] = st.lib_n[g, p] / 99.0 if st.lib_n[g, p] >= 0 else 0.0
    o[F_CZ] = 1.0 if st.in_cz[g, p] else 0.0
    o[F_ACTOR] = 1.0 if p == actor else 0.0
    top = 0
    total = 0
    for j in range(entries):  # a record's entries in its order (a later one wins a shared slot); a live game's by source
        if rec:
            src = np.int64(ov.dmg_src[g, p, j])
            dmg = np.int64(ov.dmg_amt[g, p, j])
        else:
            src = j
            dmg = np.int64(st.cmdr_dmg[g, p, j])
            if dmg == 0:  # a live game's sources are distinct slots: a zero leaves its slot as it is
                continue
        top = max(top, dmg)
        total += dmg
        if src >= 0:  # -1: an unknown source (Forge's sum) counts in the max and the total only
            o[F_CMDR_FROM + (src - actor) % n] = dmg / 21.0
    if total:
        o[F_MAXCMDR] = top / 21.0
        o[F_TOTCMDR] = total / 42.0
    o[F_UNTAPPED] = untapped / 10.0
    o[F_UNTAPPED_POW] = untapped_power / 20.0
    if p == actor:
        o[F_ATT_DMG] = ready / 10.0
        o[F_ATT_LETHAL] = ready_power / 20.0


@helper
def _encode_hand(st, T, ov, g, me, o, scr):
    """The hand block ``o`` (the view of its slots) of seat ``me``."""
    rec = ov.listed.shape[0] > 0
    mana = st.mana[g, me]
    kinds = scr[ORDER, :14]
    kinds[:] = 0
    instants = 0
    best = 0
    for i in range(st.hand_n[g, me]):
        c = st.hand[g, me, i]
        if c < 0:  # a record's card outside the pool
            kinds[UNKNOWN] += 1
            continue
        k = T.kind[c]
        kinds[k] += 1
        if k != LAND and T.mv[c] <= mana:
            kinds[7 + k] += 1
            if k == CREATURE:
                best = max(best, T.power[c])
        if T.instant[c]:
            instants += 1
    for k in range(14):
        o[k] = _tenths(kinds[k])
    o[H_INSTANTS] = instants / 10.0
    o[H_BEST_POW] = best / 10.0
    if st.in_cz[g, me]:
        if rec:
            card = np.int64(ov.cmdr_card[g, me])
            cost = (T.mv[card] if card >= 0 else 0) + np.int64(ov.tax[g, me])
        else:
            cost = T.mv[T.deck_cmdr[st.deck[g, me]]] + TAX_STEP * np.int64(st.casts[g, me])
        o[H_CMDR_COST] = cost / 10.0
        o[H_CMDR_AFF] = 1.0 if cost <= mana else 0.0


@helper
def _encode_previews(st, T, g, me, p, o, base, scr):
    """Attack previews each way between the actor ``me`` and opponent ``p`` (the same combat() as the rules).

    One call site of ``_combat`` for both ways (a loop of two): each inlined copy adds
    seconds to the first compile.
    """
    for counter in range(2):
        if counter == 0:  # my ready creatures into p's blockers
            na = _gather_ready(st, T, g, me, scr)
            if na == 0:
                continue
            life = max(np.int64(st.life[g, p]), 1)
            taken = np.int64(st.cmdr_dmg[g, p, me])
            nb = _gather_blockers(st, g, p, scr)
        else:  # all of p's creatures into the ones I keep home
            if st.crt_n[g, p] == 0:
                continue
            life = max(np.int64(st.life[g, me]), 1)
            taken = np.int64(st.cmdr_dmg[g, me, p])
            nb = _gather_kept(st, T, g, me, scr)
            na = _gather_all_attackers(st, g, p, scr)
        pd, cd, _ag, dg = _combat(T, scr, na, nb, life, taken)
        if counter == 0:
            dealt = pd - dg
            o[base + F_ATT_DMG] = min(dealt / life, 1.5)
            o[base + F_ATT_LETHAL] = 1.0 if (dealt >= life or taken + cd >= LETHAL_CMDR) else 0.0
            lost, killed = _lost_values(T, scr, na)
            o[base + F_ATT_LOST] = lost / 20.0
            o[base + F_BLK_LOST] = killed / 20.0
        else:
            o[base + F_CTR_DMG] = min(pd / life, 1.5)
            o[base + F_CTR_LETHAL] = 1.0 if (pd >= life or taken + cd >= LETHAL_CMDR) else 0.0


@helper
def encode_one(st, T, ov, g, actor, o, scr):
    """The observation of seat ``actor`` in game or record ``g`` into ``o`` (float32[OBS_DIM], every slot
    written; the layout of ``observation.py``). ``ov``: the records' :class:`RecordView`, or
    :data:`NO_RECORD` for live games."""
    for i in range(OBS_DIM):
        o[i] = 0.0
    rec = ov.listed.shape[0] > 0
    n = np.int64(st.pod[g])
    if st.phase[g] >= 0:  # a record's phase outside PHASES: no one-hot
        o[st.phase[g]] = 1.0
    o[G_TURN] = st.turn[g] / 30.0
    o[G_POD] = n / 6
    if rec:
        living = np.int64(ov.living[g])
        me_listed = ov.listed[g, actor]
    else:
        living = 0
        for s in range(n):
            if not st.eliminated[g, s]:
                living += 1
        me_listed = True
    o[G_LIVING] = living / 6
    for k in range(min(n, S_MAX)):
        p = (actor + k) % n
        if rec and not ov.listed[g, p]:
            continue
        base = SEATS_START + k * SEAT_DIM
        _encode_seat(st, T, ov, g, p, actor, o[base : base + SEAT_DIM])
        if k == 0:
            if p != actor:  # a record whose active seat is beyond its pod: slot 0 shows another seat, with my attackers
                ready = ready_power = 0
                if me_listed:
                    for i in range(st.crt_n[g, actor]):
                        if _can_attack(st, T, g, actor, i):
                            ready += 1
                            ready_power += T.power[st.crt[g, actor, i]]
                o[base + F_ATT_DMG] = ready / 10.0
                o[base + F_ATT_LETHAL] = ready_power / 20.0
        elif me_listed and not st.eliminated[g, p]:
            _encode_previews(st, T, g, actor, p, o, base, scr)
            o[base + F_ATTACKED_LAST] = 1.0 if st.last_attacker[g, actor] == p else 0.0
    if me_listed:
        _encode_hand(st, T, ov, g, actor, o[HAND_START:], scr)


@kernel
def encode_kernel(st, T, ov, seats, out, scr):
    """``out[g]`` = the observation of ``seats[g]`` in game (or record) ``g``; zeros where ``seats[g] < 0``.

    ``ov``: :data:`NO_RECORD` for live games, the records' :class:`RecordView` for records
    (``scr``'s width then at least their most creatures a seat).
    """
    for g in range(seats.shape[0]):
        if seats[g] < 0:
            out[g, :] = 0.0
        else:
            encode_one(st, T, ov, g, np.int64(seats[g]), out[g], scr)
