"""The object engine's PettingZoo AEC env of the Commander pod: the reference the core is tested against.

``ReferencePodEnv`` plays through the object engine (``rules.py``, ``state.py``'s
``GameState``, acted on by ``players.py``); the product plays through the compiled core
(``ml.game.commander.core``), and its AEC env is the N=1 view over it,
``ml.game.commander.env.CommanderPodEnv``. This env is the oracle of the agreement tests
(``tests/test_env.py``, ``tests/test_core_agreement.py``) and, in rows of an ``EnvGame``
(:func:`ml.game.commander.reference.objects_game`), of ``tests/test_runner.py``.

==================== ================================================================
Import               ``from ml.game.commander.reference.reference_env import ReferencePodEnv``
Actions              Discrete(NUM_ACTIONS), the macro actions of ``ml.game.commander.actions``
Parallel API         no (``is_parallelizable: False``)
Agents               ``player_0 .. player_{pod_size-1}`` (seat index)
Observation          Dict(observation: Box(float32[obs_dim]), action_mask: Box(int8[NUM_ACTIONS]))
Observation values   ``encoder(record)`` of the seat's decision record (``rules.decision_record``):
                     the compiled encoder of ``RecordEncoder``, the one the core's live games use
Rewards              zero-sum: winner +1, every other seat -1/(n-1) (given when eliminated)
Termination          elimination, or the game's win; truncation: the turn-cap draw
==================== ================================================================

Rewards on a turn-cap draw: with no eliminations, 0 for all; seats eliminated earlier keep
their -1/(n-1) and the survivors share the opposite amount equally, so every game's rewards
sum to 0. Eliminated agents are stepped once with ``None`` and removed (the AEC "dead step"
convention, ``AECEnv._was_dead_step``).

Same metadata, spaces, agents, rewards and records as ``CommanderPodEnv``; in addition,
``state`` is the ``GameState`` the object players act on.
"""

from __future__ import annotations

import logging

import numpy as np

from ml.base.io import JSONObject
from ml.game.commander.actions import NUM_ACTIONS
from ml.game.commander.pod_env import PodEnvBase
from ml.game.commander.reference import rules
from ml.game.commander.reference.state import GameState
from ml.game.spec import Encoder

logger = logging.getLogger(__name__)


class ReferencePodEnv(PodEnvBase):
    """The Commander pod as a PettingZoo AEC environment over the object engine (the reference).

    Args:
        pod_size: seats, 2..MAX_POD.
        max_turns: round cap (rounds); reaching it truncates (a draw).
        encoder: object with ``obs_dim`` (int) and ``__call__(record: dict) -> float32[obs_dim]``;
            None uses ``ml.game.commander.encoding.RecordEncoder()``.

    Raises:
        ValueError: bad ``pod_size`` or ``max_turns``.
    """

    def __init__(self, pod_size: int = 4, max_turns: int = 30, encoder: Encoder | None = None) -> None:
        super().__init__(pod_size, max_turns, encoder, max_turns_cap=2**63 - 1)
        self._state: GameState | None = None

    @property
    def state(self) -> GameState:
        """The underlying ``GameState``.

        Raises:
            RuntimeError: before the first ``reset``.
        """
        if self._state is None:
            raise RuntimeError("call reset() first")
        return self._state

    # ------------------------------------------------------------------ AEC API

    def reset(self, seed: int | None = None, options: dict[str, object] | None = None) -> None:
        """Start a new game.

        Args:
            seed: game seed; later seedless resets draw their seeds from a generator seeded
                with it. None with no earlier seed draws from OS entropy.
            options: ignored.
        """
        self._state = rules.new_game(self._seeds.next(seed), self.pod_size, self.max_turns, game_index=self._games)
        self._games += 1
        self._start_agents(self._state.current_seat)
        self._settle()

    def step(self, action: int | None) -> None:
        """Apply ``action`` for ``agent_selection`` (``None`` for a dead agent).

        Raises:
            rules.IllegalActionError: an action outside the mask.
            ValueError: a non-None action for a dead agent.
            RuntimeError: before the first ``reset``, or after the game ended and every agent was stepped out.
        """
        agent = self._agent_to_step()
        if self.terminations[agent] or self.truncations[agent]:
            self._was_dead_step(action)
            return
        self._clear_rewards_of_step(agent)
        rules.apply_action(self.state, action)  # type: ignore[arg-type]
        self._settle()

    def _settle(self) -> None:
        """Terminate newly eliminated seats, end the game, accumulate rewards, pick the next agent."""
        st = self.state
        n = self.pod_size
        loss = -1.0 / (n - 1)
        for a in self.agents:
            if st.players[self.agent_name_mapping[a]].eliminated and not self.terminations[a]:
                self.terminations[a] = True
                self.rewards[a] += loss
        if st.done:
            live = [a for a in self.agents if not self.terminations[a]]
            if st.winner is not None:
                winner = self.possible_agents[st.winner]
                self.rewards[winner] += 1.0
                self.terminations[winner] = True
            elif live:
                eliminated = n - len(st.living_seats())
                for a in live:
                    self.rewards[a] += -loss * eliminated / len(live)
                    self.truncations[a] = True
            for a in self.agents:
                self.infos[a] = {"outcome": rules.outcome(st)}
        self._accumulate_rewards()
        if not st.done:
            self.agent_selection = self.possible_agents[st.current_seat]
        self._deads_step_first()

    def observe(self, agent: str) -> dict[str, np.ndarray]:
        """Observation of ``agent`` from its own point of view.

        Returns:
            ``{"observation": float32[obs_dim], "action_mask": int8[NUM_ACTIONS]}``; the mask is
            all zeros unless ``agent`` is to act.
        """
        seat = self.agent_name_mapping[agent]
        st = self.state
        obs = np.asarray(self.encoder(rules.decision_record(st, seat)), dtype=np.float32)
        mask = np.zeros(NUM_ACTIONS, dtype=np.int8)
        if not st.done and seat == st.current_seat:
            mask[st.legal] = 1
        return {"observation": obs, "action_mask": mask}

    # ------------------------------------------------------------------ records

    def decision_record(self) -> JSONObject:
        """Forge-format record of the decision the current agent is about to make."""
        return rules.decision_record(self.state)

    def describe_action(self, action: int) -> JSONObject:
        """The record's ``action`` object for ``action`` by the current agent (call before ``step``).

        Raises:
            rules.IllegalActionError: the action is not legal now.
        """
        return rules.describe_action(self.state, action)

    def game_result(self) -> tuple[str, str, int | None, list[int]]:
        """``(game_id, outcome, winner, ranking)`` of the finished game (``GameState.ranking``)."""
        st = self.state
        return st.game_id, rules.outcome(st), st.winner, st.ranking()
