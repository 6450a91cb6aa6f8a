"""PettingZoo AEC env of the built-in Commander pod (``commander_pod_v0``): one game of the compiled core.

``CommanderPodEnv`` is a thin single-game view over one row of ``CoreGame``
(``ml.game.commander.core.game``, the numba core every stage plays through). From the same
seed and the same actions it gives what the tests' object engine's ``ReferencePodEnv``
(``ml/game/commander/reference/reference_env.py``) gives: observations, masks, rewards, terminations,
truncations, records and results (``tests/test_env.py``).

==================== ================================================================
Import               ``from ml.game.commander.env import CommanderPodEnv``
Actions              Discrete(NUM_ACTIONS), the macro actions of ``ml.game.commander.actions``
Parallel API         no (``is_parallelizable: False``)
Agents               ``player_0 .. player_{pod_size-1}`` (seat index)
Observation          Dict(observation: Box(float32[obs_dim]), action_mask: Box(int8[NUM_ACTIONS]))
Observation values   the core's encoder (``core.encode``, the one ``RecordEncoder`` encodes records
                     with) when the encoder is ``RecordEncoder`` or None; any other encoder gets the seat's
                     decision record (``core.decision_record``)
Rewards              zero-sum: winner +1, every other seat -1/(n-1) (given when eliminated)
Termination          elimination, or the game's win; truncation: the turn-cap draw
Scripted choices     ``scripted_action()``: the teacher's (``teacher``: the heuristic) or uniform random
                     (``random``) choice of the seat to act, the kind per seat set by
                     ``reset(options={"scripted": {seat: kind}})`` (default: every seat
                     ``teacher``), from the seat's own generator seeded
                     ``seed * PLAYER_SEED_STRIDE + seat``, drawn when asked at each of the seat's
                     decisions. No ``state`` object: the game is the core's arrays.
Core                 ``env.core``: the one-row ``CoreGame`` (row 0) holding the game's arrays
==================== ================================================================

Rewards on a turn-cap draw: with no eliminations, 0 for all; seats eliminated earlier keep
their -1/(n-1) and the survivors share the opposite amount equally, so every game's rewards
sum to 0. Eliminated agents are stepped once with ``None`` and removed (the AEC "dead step"
convention, ``AECEnv._was_dead_step``). Game ids are ``game-<k>-<seed>`` for the env's k-th
reset (from 0).

Version History:
    v0: first version.
"""

from __future__ import annotations

import numbers
from collections.abc import Mapping

import numpy as np

from ml.base.io import JSONObject
from ml.game.commander import core
from ml.game.commander.actions import NUM_ACTIONS, IllegalActionError
from ml.game.commander.core.game import SCRIPTED_KINDS, CoreGame
from ml.game.commander.pod_env import PodEnvBase
from ml.game.spec import Encoder

_ROW = np.zeros(1, np.int64)  # the view's one row of the core


class CommanderPodEnv(PodEnvBase):
    """The Commander pod as a PettingZoo AEC environment over one game of the compiled core.

    Args:
        pod_size: seats, 2..MAX_POD.
        max_turns: round cap (rounds); reaching it truncates (a draw).
        encoder: object with ``obs_dim`` (int) and ``__call__(record: dict) -> float32[obs_dim]``;
            None, or a ``ml.game.commander.encoding.RecordEncoder``, uses the core's encoder.

    Raises:
        ValueError: bad ``pod_size`` or ``max_turns``.
    """

    def __init__(self, pod_size: int = 4, max_turns: int = 30, encoder: Encoder | None = None) -> None:
        super().__init__(pod_size, max_turns, encoder, max_turns_cap=core.MAX_TURNS)
        from ml.game.commander.encoding import RecordEncoder

        self._core_encodes = type(self.encoder) is RecordEncoder  # as GameSpec.batched decides
        self._core: CoreGame | None = None

    @property
    def core(self) -> CoreGame:
        """The one-row ``CoreGame`` holding the game (row 0).

        Raises:
            RuntimeError: before the first ``reset``.
        """
        if self._core is None:
            raise RuntimeError("call reset() first")
        return self._core

    # ------------------------------------------------------------------ AEC API

    def reset(self, seed: int | None = None, options: dict[str, object] | None = None) -> None:
        """Start a new game.

        Args:
            seed: game seed; later seedless resets draw their seeds from a generator seeded
                with it. None with no earlier seed draws from OS entropy.
            options: ``{"scripted": {seat: "teacher" | "random"}}``, the kinds
                :meth:`scripted_action` chooses by (default: every seat ``teacher``); other
                keys are ignored.

        Raises:
            ValueError: a seed that is not an int within ``core.MAX_SEED``, a scripted seat
                outside the pod or an unknown kind (the env is left as it was).
        """
        if seed is not None and (isinstance(seed, bool) or not isinstance(seed, numbers.Integral)
                                 or not -core.MAX_SEED <= seed <= core.MAX_SEED):  # fmt: skip
            raise ValueError(f"seed must be an int in -{core.MAX_SEED}..{core.MAX_SEED} or None, got {seed!r}")
        scripted = (options or {}).get("scripted", dict.fromkeys(range(self.pod_size), "teacher"))
        if not isinstance(scripted, Mapping) or any(not isinstance(s, int) or not 0 <= s < self.pod_size for s in scripted):
            got = sorted(scripted, key=repr) if isinstance(scripted, Mapping) else scripted
            raise ValueError(f"options['scripted']: seats must be in 0..{self.pod_size - 1}, got {got!r}")
        unknown = sorted({repr(k) for k in scripted.values() if k not in SCRIPTED_KINDS})
        if unknown:
            raise ValueError(f"options['scripted']: no scripted player of kind {', '.join(unknown)}; use teacher or random")
        game_seed = self._seeds.next(seed)
        if self._core is None:
            self._core = CoreGame(1, self.pod_size, self.max_turns)
        self._core.reset(0, game_seed, scripted, True, game_index=self._games)  # surfaced: every seat stops
        self._games += 1
        self._start_agents(int(self._core.st.active[0]))
        self._settle()

    def step(self, action: int | None) -> None:
        """Apply ``action`` for ``agent_selection`` (``None`` for a dead agent).

        Raises:
            IllegalActionError: an action that is not an int or outside the mask.
            ValueError: a non-None action for a dead agent.
            RuntimeError: before the first ``reset``, or after the game ended and every agent was stepped out.
        """
        agent = self._agent_to_step()
        if self.terminations[agent] or self.truncations[agent]:
            self._was_dead_step(action)
            return
        g = self.core
        if isinstance(action, bool) or not isinstance(action, numbers.Integral):
            raise IllegalActionError(f"action must be an int (an action index), got {action!r}")
        if g.st.done[0] or not 0 <= action < NUM_ACTIONS or not g.st.legal[0, action]:
            legal = np.flatnonzero(g.st.legal[0]).tolist()
            raise IllegalActionError(f"action {action} is not legal now (legal: {legal})")
        self._clear_rewards_of_step(agent)
        g.step(np.array([action], np.int64))
        for a in self.agents:
            self.rewards[a] += float(g.rewards[0, self.agent_name_mapping[a]])
        self._settle()

    def _settle(self) -> None:
        """Terminate eliminated seats, end the game, accumulate rewards, pick the next agent."""
        st = self.core.st
        for a in self.agents:
            if st.eliminated[0, self.agent_name_mapping[a]]:
                self.terminations[a] = True
        if st.done[0]:
            winner = int(st.winner[0])
            if winner >= 0:
                self.terminations[self.possible_agents[winner]] = True
            else:
                for a in self.agents:
                    if not self.terminations[a]:
                        self.truncations[a] = True
            outcome = self.core.result(0)[1]
            for a in self.agents:
                self.infos[a] = {"outcome": outcome}
        self._accumulate_rewards()
        if not st.done[0]:
            self.agent_selection = self.possible_agents[int(st.active[0])]
        self._deads_step_first()

    def observe(self, agent: str) -> dict[str, np.ndarray]:
        """Observation of ``agent`` from its own point of view.

        Returns:
            ``{"observation": float32[obs_dim], "action_mask": int8[NUM_ACTIONS]}``; the mask is
            all zeros unless ``agent`` is to act.
        """
        seat = self.agent_name_mapping[agent]
        g = self.core
        if self._core_encodes:
            out = np.zeros((1, core.OBS_DIM), np.float32)
            obs = core.encode(g.st, g.tables, np.array([seat], np.int64), out)[0]
        else:
            obs = np.asarray(self.encoder(core.decision_record(g.st, g.tables, 0, seat)), dtype=np.float32)
        mask = np.zeros(NUM_ACTIONS, dtype=np.int8)
        if not g.st.done[0] and seat == g.st.active[0]:
            mask[g.st.legal[0]] = 1
        return {"observation": obs, "action_mask": mask}

    # ------------------------------------------------------------------ scripted seats

    def scripted_action(self) -> int:
        """The scripted choice of the seat to act, by the kind ``reset`` gave it (``teacher``:
        the teacher, ``random``: uniform over the legal actions), from the seat's own generator.

        Asked at each of a seat's decisions, the choices are those the core's scripted seats
        make inside ``CoreGame.step`` (the tests' object players ``HeuristicPlayer`` and
        ``RandomPlayer`` seeded ``seed * PLAYER_SEED_STRIDE + seat`` make the same); it does not step.

        Raises:
            ValueError: the game is over, or the seat to act has no scripted kind.
        """
        g = self.core
        if g.st.done[0]:
            raise ValueError("the game is over")
        if not g.is_scripted(0):
            raise ValueError(f"seat {int(g.st.active[0])} has no scripted kind (reset options['scripted'])")
        return int(g.scripted_actions(_ROW)[0])

    # ------------------------------------------------------------------ records

    def decision_record(self) -> JSONObject:
        """Forge-format record of the decision the current agent is about to make (``core.decision_record``)."""
        g = self.core
        return core.decision_record(g.st, g.tables, 0)

    def describe_action(self, action: int) -> JSONObject:
        """The record's ``action`` object for ``action`` by the current agent (call before ``step``).

        Raises:
            IllegalActionError: the action is not legal now.
        """
        return self.core.describe_action(0, action)

    def game_result(self) -> tuple[str, str, int | None, list[int]]:
        """``(game_id, outcome, winner, ranking)`` of the finished game (``CoreGame.result``)."""
        return self.core.result(0)
