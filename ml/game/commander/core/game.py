"""The Commander core as a batched ``ml.game.protocol.Game``: rows of Commander pods.

From the same seed a row deals the game the tests' object engine (``ml.game.commander.reference``)
deals in ``ReferencePodEnv.reset(seed=seed)`` (game index 0, so the same ``game_id``), its
scripted seats choose as that engine's ``HeuristicPlayer(seed * 7 + seat)`` and
``RandomPlayer(seed * 7 + seat)`` would, and its observations, masks, rewards, records and
results equal that env's (``tests/test_core_agreement.py``, ``tests/test_runner.py``). ``ml.game.commander.env.CommanderPodEnv``
is the AEC view of one row.
"""

from __future__ import annotations

import numbers
from collections.abc import Mapping, Sequence

import numpy as np

from ml.base.io import JSONObject
from ml.game.commander import core
from ml.game.commander.actions import (
    CAST_COMMANDER,
    CAST_REMOVAL,
    FIRST_ATTACK,
    HOLD_MANA,
    MACRO_ACTIONS,
    MAX_POD,
    MIN_POD,
    NUM_ACTIONS,
    PASS,
    IllegalActionError,
)
from ml.game.commander.core import kernels
from ml.game.commander.core.warmup import warm_up
from ml.game.commander.features import OBS_DIM
from ml.game.protocol import PLAYER_SEED_STRIDE

SCRIPTED_KINDS = {"teacher": core.SEAT_HEURISTIC, "random": core.SEAT_RANDOM}
"""Controller kind -> the core's ``seat_kind`` code."""
RAW_MAX_CHARS = 200
"""Forge's ``action.raw`` is at most 200 characters (shared/docs/forge-decision-format.md)."""


def action_object(kind: str, card: str, target: str, raw: str, action: int) -> JSONObject:
    """A record's ``action`` object (shared/docs/forge-decision-format.md "Record"):
    ``{"type", "card", "target", "raw", "macro_action", "action_idx"}``, ``raw`` cut to
    ``RAW_MAX_CHARS``, ``macro_action`` named from ``action`` (an index into ``MACRO_ACTIONS``)."""
    return {
        "type": kind,
        "card": card,
        "target": target,
        "raw": raw[:RAW_MAX_CHARS],
        "macro_action": MACRO_ACTIONS[action],
        "action_idx": int(action),
    }


class CoreGame:
    """``num_games`` Commander pods of ``pod_size`` seats and ``max_turns`` rounds (``ml.game.protocol.Game``).

    Raises:
        ValueError: ``pod_size`` outside 2..MAX_POD, ``max_turns`` outside 1..``core.MAX_TURNS`` or ``num_games`` < 1.
    """

    def __init__(self, num_games: int, pod_size: int, max_turns: int) -> None:
        if num_games < 1 or not MIN_POD <= pod_size <= MAX_POD or not 1 <= max_turns <= core.MAX_TURNS:
            raise ValueError(
                f"CoreGame needs num_games >= 1, pod_size in {MIN_POD}..{MAX_POD}, max_turns in 1..{core.MAX_TURNS}; "
                f"got {num_games}, {pod_size}, {max_turns}"
            )
        self.num_games, self.num_players = num_games, pod_size
        self.obs_dim, self.num_actions = OBS_DIM, NUM_ACTIONS
        self.max_turns = max_turns
        warm_up()  # once per process: numba's compile or cache load, logged
        self.tables = core.load_tables()
        self.st = core.new_state(num_games)
        self.obs = np.zeros((num_games, OBS_DIM), np.float32)
        self.mask = np.zeros((num_games, NUM_ACTIONS), bool)
        self._rewards = np.zeros((num_games, MAX_POD), np.float64)
        self._rewards32 = np.zeros((num_games, MAX_POD), np.float32)  # the kernels' (one compiled signature)
        self._elim0 = np.zeros(num_games, np.int64)
        self.rewards = self._rewards[:, :pod_size]
        self.done = self.st.done
        self.to_act = self.st.active
        self.decisions = self.st.decisions
        self.st.done[:] = True  # no game dealt yet
        self._kinds = np.zeros((num_games, MAX_POD), np.int8)  # the scripted kinds of surfaced rows
        self._surfaced = np.zeros(num_games, bool)
        self._seats = np.full(num_games, -1, np.int64)
        self._choice = np.full(num_games, -1, np.int64)

    def reset(
        self,
        row: int,
        seed: int,
        scripted: Mapping[int, str],
        surfaced: bool,
        decks: Sequence[int] | None = None,
        index: int = 0,
        *,
        game_index: int = 0,
    ) -> None:
        """Deal ``row`` (``ml.game.protocol.Game.reset``; ``decks`` index ``CoreTables.deck_names``,
        as ``rules.new_game(deck_names=...)`` names them; ``index`` is unused). The game's id is
        ``game-<game_index>-<seed>``: by default ``game-0-<seed>``, as a fresh env's first game
        names it; ``CommanderPodEnv`` passes the number of its earlier resets."""
        if isinstance(seed, bool) or not isinstance(seed, numbers.Integral) or not -core.MAX_SEED <= seed <= core.MAX_SEED:
            raise ValueError(
                f"seed must be an int in -{core.MAX_SEED}..{core.MAX_SEED} (its seats' seeds, seed * 7 + seat, fit int64), got {seed!r}"
            )
        n = self.num_games
        choice = np.full((n, MAX_POD), -1, np.int64)
        if decks is not None:
            if len(decks) != self.num_players:
                raise ValueError(f"decks: {len(decks)} decks for {self.num_players} seats")
            choice[row, : self.num_players] = decks
        kinds = np.zeros((n, MAX_POD), np.int8)
        pseeds = np.zeros((n, MAX_POD), np.int64)
        for s, kind in scripted.items():
            if kind not in SCRIPTED_KINDS:
                raise ValueError(f"no scripted player of kind {kind!r}; use teacher or random")
            kinds[row, s] = SCRIPTED_KINDS[kind]
            pseeds[row, s] = seed * PLAYER_SEED_STRIDE + s
        seeds = np.zeros(n, np.int64)
        seeds[row] = seed
        which = np.zeros(n, bool)
        which[row] = True
        core.reset(self.st, self.tables, seeds, self.num_players, self.max_turns, game_index=np.full(n, game_index, np.int64),
                   deck_choice=choice, seat_kind=kinds, player_seeds=pseeds, games=which)  # fmt: skip
        self._surfaced[row] = surfaced
        if surfaced:  # the kernels stop at every seat; scripted_actions restores the kinds to choose
            self._kinds[row] = kinds[row]
            self.st.seat_kind[row] = core.SEAT_EXTERNAL

    def step(self, actions: np.ndarray) -> int:
        """The batched step (``ml.game.protocol.Game.step``); raises ValueError on an illegal action.

        The kernels write float32 rewards; the rows where they are nonzero (an elimination or the
        game's end) get the float64 values of ``kernels._rewards``' formula here, so each equals the
        Python float the tests' ``ReferencePodEnv`` gives.
        """
        self._elim0[:] = self.st.elim_n
        applied = core.step(self.st, self.tables, actions, self._rewards32)
        self._rewards[:] = 0.0
        for g in np.flatnonzero(self._rewards32.any(axis=1)).tolist():
            self._exact_rewards(g, int(self._elim0[g]))
        return applied

    def _exact_rewards(self, g: int, e0: int) -> None:
        """``kernels._rewards`` in float64 for game ``g`` (``e0``: its eliminations before the step)."""
        st, out = self.st, self._rewards[g]
        n, e = int(st.pod[g]), int(st.elim_n[g])
        loss = -1.0 / (n - 1)
        for j in range(e0, e):
            out[st.elim_order[g, j]] += loss
        if st.done[g]:
            if st.winner[g] >= 0:
                out[st.winner[g]] += 1.0
            else:
                for s in range(n):
                    if not st.eliminated[g, s]:
                        out[s] += -loss * e / (n - e)

    def observe(self, rows: np.ndarray) -> None:
        """Observation and mask of the seat to act in ``rows``; the other rows' ``obs`` become zeros."""
        self._seats[:] = -1
        self._seats[rows] = self.st.active[rows]
        core.encode(self.st, self.tables, self._seats, self.obs)
        self.mask[rows] = self.st.legal[rows]

    def is_scripted(self, row: int) -> bool:
        """The seat to act in ``row`` is scripted (only surfaced rows stop at one after ``step``)."""
        kinds = self._kinds if self._surfaced[row] else self.st.seat_kind
        return bool(kinds[row, self.st.active[row]] != core.SEAT_EXTERNAL)

    def scripted_actions(self, rows: np.ndarray) -> np.ndarray:
        """The surfaced scripted seats' choices in ``rows`` (call after ``step``: every other row
        then waits on an external seat, so the kernel draws for ``rows`` only)."""
        self.st.seat_kind[rows] = self._kinds[rows]
        try:
            core.choose_scripted(self.st, self.tables, self._choice)
        finally:
            self.st.seat_kind[rows] = core.SEAT_EXTERNAL
        chosen: np.ndarray = self._choice[rows].copy()
        return chosen

    def teacher_policy(self, row: int) -> list[float]:
        """``ml.game.protocol.Game.teacher_policy``: the commander's heuristic keeps no distribution.

        Raises:
            ValueError: always.
        """
        raise ValueError("the commander's heuristic teacher keeps no distribution to label a decision with")

    def record(self, row: int, action: int) -> JSONObject:
        """``core.decision_record`` of ``row`` with ``action`` set to :meth:`describe_action` (before ``step``)."""
        rec = core.decision_record(self.st, self.tables, row)
        rec["action"] = self.describe_action(row, action)
        return rec

    def describe_action(self, row: int, action: int) -> JSONObject:
        """The record's ``action`` object (:func:`action_object`) of ``action`` by the seat to act in ``row``.

        Raises:
            IllegalActionError: the game is over or ``action`` is not legal now.
        """
        st, t, g = self.st, self.tables, row
        if st.done[g] or not 0 <= action < NUM_ACTIONS or not st.legal[g, action]:
            raise IllegalActionError(f"action {action} is not legal now in game {g}")
        names = t.card_names
        s = int(st.active[g])
        cmdr = t.deck_commanders[st.deck[g, s]]
        who = f"Seat {s} ({cmdr})"
        card = target = ""
        if action >= FIRST_ATTACK:
            d = (s + action - FIRST_ATTACK + 1) % int(st.pod[g])
            kind, target = "attack", f"seat {d}"
            ready = [names[st.crt[g, s, i]] for i in range(st.crt_n[g, s]) if _can_attack(st, t, g, s, i)]
            raw = f"{who} attacks seat {d} with {', '.join(ready)}"
        elif action == PASS:
            kind = "pass"
            raw = f"{who} declares no attackers" if st.phase[g] == kernels.COMBAT else f"{who} passes"
        elif action == HOLD_MANA:
            kind, raw = "hold", f"{who} passes holding {int(st.mana[g, s])} mana open"
        elif action == CAST_COMMANDER:
            cost = int(t.nb.mv[t.nb.deck_cmdr[st.deck[g, s]]]) + kernels.TAX_STEP * int(st.casts[g, s])
            kind, card = "cast_commander", cmdr
            raw = f"{who} cast {card} from the command zone for {cost}"
        else:
            kind = "cast"
            i = kernels.choose_card(st, t.nb, g, s, action + 1)  # cast action k casts card kind k + 1
            card = names[st.hand[g, s, i]]
            raw = f"{who} cast {card}"
            if action == CAST_REMOVAL:
                owner, slot = kernels.removal_target(st, t.nb, g, s)
                target = f"seat {owner}"
                raw += f" targeting {names[st.crt[g, owner, slot]]} ({target})"
        return action_object(kind, card, target, raw, action)

    def result(self, row: int) -> tuple[str, str, int | None, list[int]]:
        """``(game_id, outcome, winner, ranking)``: ranking is the winner, then the seats still in (by
        life, higher first, then seat), then the eliminated, last out first."""
        st, g = self.st, row
        winner = int(st.winner[g])
        n = int(st.pod[g])
        out = [] if winner < 0 else [winner]
        alive = [s for s in range(n) if not st.eliminated[g, s] and s != winner]
        out += sorted(alive, key=lambda s: (-int(st.life[g, s]), s))
        out += [int(s) for s in st.elim_order[g, : st.elim_n[g]][::-1]]
        game_id = f"game-{int(st.game_index[g])}-{int(st.seed[g])}"
        return game_id, "draw" if winner < 0 else f"win_seat_{winner}", None if winner < 0 else winner, out


def _can_attack(st: core.CoreState, t: core.CoreTables, g: int, s: int, i: int) -> bool:
    """``Permanent.can_attack`` of creature slot ``i``: untapped, and not sick or with haste."""
    return not st.crt_tapped[g, s, i] and (not st.crt_sick[g, s, i] or bool(t.nb.kw[st.crt[g, s, i]] & kernels.KW_HASTE))
