"""The commander's observation: its layout, and decision records as the arrays its one encoder reads.

One compiled encoder (``ml.game.commander.core.kernels.encode_kernel``) fills every
observation: of a live game of the batched core (``core.encode`` on the ``CoreState``), and of
decision records (a plain ``dict`` in the Forge decision format,
``shared/docs/forge-decision-format.md``, or a validated record), which :func:`record_arrays`
loads as one row each (a ``CoreState`` of the encoder's fields and a ``kernels.RecordView`` of
what a record states outright: ``lands``, ``cmdr_tax``, ``creatures``, the commander damage
entries). Teacher files, PPO batches, real Forge files, the policy endpoint, the ONNX sidecar's
features and live self-play are encoded by the same arithmetic
(``ml.game.commander.encoding.RecordEncoder`` is the records' entry point).

Layout of the observation, ``float32[OBS_DIM]`` (every slot is named in the feature table
``ml.game.commander.features``; the kernels' slot constants are checked against it at import):

* global (``GLOBAL_DIM``): phase one-hot (main_1, combat, main_2, end), turn / 30,
  pod size / 6, living players / 6;
* ``MAX_POD`` seat blocks of ``SEAT_DIM`` each, seat-relative: slot 0 is the acting player,
  slot k the seat ``(actor + k) % pod_size`` (opponents in turn order); slots beyond the pod
  are zeros. Each block holds public facts of that seat plus the commander damage it took
  from each source seat, also seat-relative to the actor (rule 903.10a: 21 from a single
  commander is lethal, so damage is kept per source);
* the acting player's own hand (``HAND_DIM``): card counts by kind and how many of each it
  can afford now. Opponents' hands enter only as their sizes.

Combat features (``COMBAT_FEATURES``, after the seat's public facts) come from the public,
fixed block rule (``ml.game.commander.combat``) applied to the creatures of the record, with their
tapped and summoning-sick states (our record extras ``tapped``/``sick``; a Forge file has
none, read as all untapped and ready): the seat's untapped creatures (count, power); for the
actor's slot its creatures able to attack (count, power); for an opponent's slot the preview
of the actor attacking it with all of them (damage as a fraction of its life, lethal,
attackers' and blockers' value lost) and of it attacking the actor with all its creatures
while the actor's attackers are tapped (damage as a fraction of the actor's life, lethal),
and whether it attacked the actor last (our extra ``last_attacker``: the teacher retaliates,
and its removal aims at that seat). These are what the teacher's attack choice weighs
(``ml.game.commander.players``).

What a record holds that a live game never does: cards outside the built-in pool (real Forge
data) count in the ``unknown`` hand kind, and a battlefield creature outside the pool only in
``creatures`` (the record's count, at least the pool creatures listed); ``lands`` and
``cmdr_tax`` are the record's; a missing ``library`` reads 0; commander damage of an unknown
source (Forge's sum) counts in the max and the total only; a phase outside ``PHASES`` leaves the
one-hot empty. Seats may be listed in any order (the last entry of a seat wins); ``pod size`` is
the number of entries.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from pydantic import BaseModel

from ml.game.commander.actions import MAX_POD
from ml.game.commander.core import CoreTables, encode, kernels
from ml.game.commander.core.kernels import CoreState, RecordView
from ml.game.commander.features import OBS_DIM, PHASES
from ml.game.record import RecordLike, record_field

CHUNK = 512
"""Records loaded and encoded at once: the zone arrays are as wide as the chunk's longest list (a
hostile record of 1000 creatures makes a 512-record chunk about 15 MB)."""
PHASE_CODE = {phase: i for i, phase in enumerate(PHASES)}
_I16 = np.iinfo(np.int16)


def seat_eliminated(player: object) -> bool:
    """Whether a record's player is out: its ``eliminated`` flag, or life 0 or less when it has none."""
    flag = record_field(player, "eliminated")
    return bool(flag) if flag is not None else int(record_field(player, "life")) <= 0


def _getter(obj: Any) -> Any:
    """``key -> value or None`` of a record part: a mapping's ``get``, a model's field dict's (pydantic keeps
    fields in ``__dict__``: a dict lookup instead of ``getattr``)."""
    if type(obj) is dict:
        return obj.get
    if isinstance(obj, BaseModel):
        return obj.__dict__.get
    if isinstance(obj, Mapping):
        return obj.get
    fields = getattr(obj, "__dict__", None)
    return fields.get if fields is not None else lambda key: getattr(obj, key, None)


def _creatures(get: Any, creature_id: dict[str, int]) -> list[tuple[int, bool, bool, bool]]:
    """A record seat's creatures of the pool as ``(card id, tapped, sick, commander)``, in battlefield order.

    ``tapped`` and ``sick`` list names, so copies of one card are told apart by the rules'
    order (``ml.game.commander.engine``): creatures enter at the end of the battlefield and
    are all sick until their controller's untap, so the sick copies are the *last* ones;
    an attack taps every copy able to attack, which precede the sick ones, so the tapped
    copies are the *first* ones. Read so, a record gives the live state's flags exactly.
    """
    named = [(cid, name) for name in get("battlefield") or [] if (cid := creature_id.get(name)) is not None]
    if not named:
        return []
    tapped_left = list(get("tapped") or [])
    sick_left = list(get("sick") or [])
    commander = get("commander_name")
    tapped = []
    for _, name in named:
        t = name in tapped_left
        if t:
            tapped_left.remove(name)
        tapped.append(t)
    sick = [False] * len(named)
    if sick_left:
        for i in range(len(named) - 1, -1, -1):
            if named[i][1] in sick_left:
                sick[i] = True
                sick_left.remove(named[i][1])
    return [(cid, tapped[i], sick[i], name == commander) for i, (cid, name) in enumerate(named)]


def _damage(value: Any) -> list[tuple[int, int]]:
    """Commander damage entries ``(source seat, amount)`` in record order: Forge's int is one entry of
    source -1 (unknown; none when 0), a per-source mapping one entry per key (zeros kept)."""
    if value is None:
        return []
    if isinstance(value, int):
        return [(-1, value)] if value else []
    return [(int(k), int(v)) for k, v in value.items()]


class _Rows:
    """What :func:`record_arrays` gathers of a chunk, as lists of int tuples (converted once)."""

    def __init__(self, n: int) -> None:
        self.seats = np.zeros(n, np.int64)
        self.games: list[tuple[int, int, int, int]] = []  # pod, turn, phase, living
        self.seat_rows: list[tuple[int, ...]] = []  # g, seat, then _ROW_COLUMNS and listed (1)
        self.damage: list[tuple[int, int, int, int, int]] = []  # g, seat, entry, source, amount
        self.creatures: list[tuple[int, int, int, int, bool, bool, bool]] = []  # g, seat, slot, card id, flags
        self.hands: list[tuple[int, int, int]] = []  # g, slot, card id (the acting seat's cards)

    def add_seat(self, g: int, seat: int, actor: int, get: Any, eliminated: bool, tables: CoreTables) -> None:
        mine = _creatures(get, tables.creature_id)
        self.creatures.extend((g, seat, i, *c) for i, c in enumerate(mine))
        damage = _damage(get("cmdr_dmg"))
        self.damage.extend((g, seat, j, *entry) for j, entry in enumerate(damage))
        hand = get("hand") or []
        if seat == actor:
            self.hands.extend((g, i, tables.card_id.get(name, -1)) for i, name in enumerate(hand))
        command_zone = get("command_zone") or []
        lands = int(get("lands") or 0)
        sources, library, last = get("mana_sources"), get("library"), get("last_attacker")
        self.seat_rows.append((
            g, seat, int(get("life")), int(get("mana") or 0), int(sources) if sources is not None else lands,
            int(get("cmdr_tax") or 0), lands, max(len(mine), int(get("creatures") or 0)), len(hand),
            len(get("graveyard") or []), int(library) if library is not None else -1, bool(command_zone),
            eliminated, int(last) if last is not None else -1,
            tables.card_id.get(command_zone[0], -1) if command_zone else -1, len(mine), len(damage), 1,
        ))  # fmt: skip

    def add_record(self, g: int, record: Any, tables: CoreTables) -> None:
        get = _getter(record)
        players = get("players") or []
        actor = int(get("active_seat"))
        if not 1 <= len(players) <= MAX_POD or not 0 <= actor < MAX_POD:
            raise ValueError(
                f"record {g}: {len(players)} players and active_seat {actor}; "
                f"the schema allows 2..{MAX_POD} players and seats 0..{MAX_POD - 1}"
            )
        self.seats[g] = actor
        by_seat: dict[int, tuple[Any, bool]] = {}
        living = 0
        for p in players:
            pget = _getter(p)
            seat = int(pget("seat"))
            if not 0 <= seat < MAX_POD:
                raise ValueError(f"record {g}: seat {seat} outside 0..{MAX_POD - 1}")
            flag = pget("eliminated")  # seat_eliminated
            eliminated = bool(flag) if flag is not None else int(pget("life")) <= 0
            by_seat[seat] = pget, eliminated
            living += not eliminated
        self.games.append((len(players), int(get("turn")), PHASE_CODE.get(get("phase"), -1), living))
        for seat, (pget, eliminated) in by_seat.items():
            self.add_seat(g, seat, actor, pget, eliminated, tables)


def record_arrays(records: Sequence[RecordLike], tables: CoreTables) -> tuple[CoreState, RecordView, np.ndarray]:
    """Records as the encoder's arrays, one row each: a ``CoreState`` whose fields the encoder reads of a record
    have one row per record (hands: the acting seat's card ids, -1 outside the pool; ``lib_n`` -1 when the
    library is not given), the others the zero-size ``kernels.EMPTY_STATE`` arrays, and the ``RecordView``.

    Args:
        records: decision records (dicts or validated models; ``action`` and the rest unread).
        tables: the card tables the records' card names are looked up in (``CoreTables``).

    Returns:
        ``(state, view, seats)``: the ``CoreState`` of the encoder's fields, the ``RecordView``,
        int64[N] each record's ``active_seat``; ``core.encode(state, tables, seats, out, view)``
        encodes them.

    Raises:
        ValueError: a record outside the schema's shape (``ml.game.commander.forge_record``): 1 to
            ``MAX_POD`` players, seats and ``active_seat`` in ``0..MAX_POD-1``, a count beyond int16.
    """
    rows = _Rows(len(records))
    for g, record in enumerate(records):
        rows.add_record(g, record, tables)
    crt_cap = 1 + max((c[2] for c in rows.creatures), default=0)
    hand_cap = 1 + max((h[1] for h in rows.hands), default=0)
    n, s = len(records), MAX_POD
    glob = np.asarray(rows.games, np.int64).reshape(n, 4)
    table = np.asarray(rows.seat_rows, np.int64).reshape(len(rows.seat_rows), 2 + len(_ROW_COLUMNS) + 1)
    if n and max(glob.max(), -glob.min(), table.max(), -table.min()) > _I16.max:
        raise ValueError(f"a record's count lies beyond int16 ({_I16.min}..{_I16.max}); the schema's bounds are far inside")
    # The per-seat values scattered once into (record, seat) and cast to one block per dtype; every field is a
    # C-contiguous view of a block (few allocations and scatters: a one-record call is the endpoint's)
    gathered = np.zeros((len(_SEAT_ORDER), n, s), np.int64)
    gathered[:, table[:, 0], table[:, 1]] = table.T[_SEAT_ORDER]
    per_seat = {dtype: gathered[rows_of].astype(dtype) for dtype, rows_of in _SEAT_SLICES.items()}
    cubes, flags = np.zeros((2, n, s, s), np.int16), np.zeros((3, n, s, crt_cap), np.bool_)
    g8, g16 = np.zeros((2, n), np.int8), np.zeros((2, n), np.int16)
    fields = {name: block[i] for dtype, block in per_seat.items() for i, name in enumerate(_SEAT_BLOCKS[dtype])}
    fields.update(pod=g8[0], phase=g8[1], turn=g16[0], living=g16[1], cmdr_dmg=cubes[0], dmg_amt=cubes[1])
    fields.update(crt_tapped=flags[0], crt_sick=flags[1], crt_cmdr=flags[2], dmg_src=np.zeros((n, s, s), np.int8))
    fields.update(crt=np.zeros((n, s, crt_cap), np.int16), hand=np.zeros((n, s, hand_cap), np.int16))
    view = RecordView(**{name: fields.pop(name) for name in RecordView._fields})
    st = kernels.EMPTY_STATE._replace(**fields)
    if not records:
        return st, view, rows.seats
    g8[:] = glob[:, [0, 2]].T  # pod, phase
    g16[:] = glob[:, [1, 3]].T  # turn, living
    if rows.damage:
        d = np.asarray(rows.damage, np.int64)
        at = (d[:, 0] * s + d[:, 1]) * s
        view.dmg_src.reshape(-1)[at + d[:, 2]] = d[:, 3]
        view.dmg_amt.reshape(-1)[at + d[:, 2]] = d[:, 4]
        known = d[:, 3] >= 0
        st.cmdr_dmg.reshape(-1)[at[known] + d[known, 3]] = d[known, 4]
    if rows.creatures:
        c = np.asarray(rows.creatures, np.int64)
        at = (c[:, 0] * s + c[:, 1]) * crt_cap + c[:, 2]
        st.crt.reshape(-1)[at] = c[:, 3]
        flags.reshape(3, -1)[:, at] = c[:, 4:7].T
    if rows.hands:
        h = np.asarray(rows.hands, np.int64)
        st.hand.reshape(-1)[(h[:, 0] * s + rows.seats[h[:, 0]]) * hand_cap + h[:, 1]] = h[:, 2]
    return st, view, rows.seats


_ROW_COLUMNS = ("life", "mana", "mana_sources", "tax", "lands", "creatures", "hand_n", "grave_n", "lib_n", "in_cz",
                "eliminated", "last_attacker", "cmdr_card", "crt_n", "dmg_n")  # fmt: skip
"""The per-seat values :func:`_Rows.add_seat` gathers after (record, seat), by their field in the state or the view."""
_SEAT_BLOCKS: dict[np.dtype[Any], tuple[str, ...]] = {
    np.dtype(np.int16): ("life", "mana", "mana_sources", "tax", "lands", "creatures", "hand_n", "grave_n", "lib_n",
                         "cmdr_card", "crt_n"),
    np.dtype(np.int8): ("last_attacker", "dmg_n"),
    np.dtype(np.bool_): ("in_cz", "eliminated", "listed"),
}  # fmt: skip
"""The per-seat fields by dtype (the dtypes of ``kernels.allocate`` and ``kernels.allocate_view``)."""
_SEAT_ORDER = np.array([2 + (*_ROW_COLUMNS, "listed").index(name) for names in _SEAT_BLOCKS.values() for name in names])
"""The columns of the gathered rows, block after block (``listed``: a column of ones appended to each row)."""
_SEAT_SLICES: dict[np.dtype[Any], slice] = {}
"""Each block's rows of the gathered values, in ``_SEAT_ORDER``."""
for _dtype, _names in _SEAT_BLOCKS.items():
    _start = sum(s.stop - s.start for s in _SEAT_SLICES.values())
    _SEAT_SLICES[_dtype] = slice(_start, _start + len(_names))


def encode_records(records: Sequence[RecordLike], tables: CoreTables, out: np.ndarray) -> np.ndarray:
    """The observations of ``records`` (each its ``active_seat``'s) into ``out`` (float32[N, OBS_DIM]), in
    chunks of :data:`CHUNK` records through :func:`record_arrays` and the compiled encoder.

    Raises:
        ValueError: as :func:`record_arrays`; ``out`` is not float32[N, OBS_DIM].
    """
    if out.shape != (len(records), OBS_DIM) or out.dtype != np.float32:
        raise ValueError(f"out must be float32[{len(records)}, {OBS_DIM}], got {out.dtype}{list(out.shape)}")
    for start in range(0, len(records), CHUNK):
        st, view, seats = record_arrays(records[start : start + CHUNK], tables)
        encode(st, tables, seats, out[start : start + CHUNK], view)
    return out
