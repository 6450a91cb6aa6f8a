"""What the PettingZoo AEC envs of the Commander pod share: spaces, agents, seeding and the
per-game bookkeeping of the AEC API (``CommanderPodEnv``, the view of the compiled core; the
tests' object-engine env ``tests.reference.commander.reference_env.ReferencePodEnv`` is one
too, the oracle ``CommanderPodEnv`` is checked against)."""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np
from gymnasium import spaces
from pettingzoo import AECEnv

from ml.game.commander.actions import MAX_POD, MIN_POD, NUM_ACTIONS
from ml.game.spec import Encoder, ResetSeeds


class PodEnvBase(AECEnv):
    """Spaces, agents and seeding of a Commander pod env (``commander_pod_v0``).

    Args:
        pod_size: seats, MIN_POD..MAX_POD.
        max_turns: round cap (rounds), 1..``max_turns_cap``; reaching it truncates (a draw).
        encoder: observation encoder (``obs_dim``, ``__call__(record)``); None: ``RecordEncoder()``.
        max_turns_cap: the largest round cap the engine holds.

    Raises:
        ValueError: bad ``pod_size`` or ``max_turns``.
    """

    metadata: ClassVar[dict[str, Any]] = {"name": "commander_pod_v0", "is_parallelizable": False, "render_modes": []}

    def __init__(self, pod_size: int, max_turns: int, encoder: Encoder | None, max_turns_cap: int) -> None:
        super().__init__()
        if not MIN_POD <= pod_size <= MAX_POD:
            raise ValueError(f"pod_size must be in {MIN_POD}..{MAX_POD}, got {pod_size}")
        if not 1 <= max_turns <= max_turns_cap:
            raise ValueError(f"max_turns must be in 1..{max_turns_cap}, got {max_turns}")
        if encoder is None:
            from ml.game.commander.encoding import RecordEncoder  # lazy: optional at import time

            encoder = RecordEncoder()
        self.pod_size = pod_size
        self.max_turns = max_turns
        self.encoder: Encoder = encoder
        self.obs_dim = int(encoder.obs_dim)
        self.render_mode = None
        self.possible_agents = [f"player_{i}" for i in range(pod_size)]
        self.agent_name_mapping = {a: i for i, a in enumerate(self.possible_agents)}
        self._observation_space = spaces.Dict(
            {
                "observation": spaces.Box(-np.inf, np.inf, shape=(self.obs_dim,), dtype=np.float32),
                "action_mask": spaces.Box(0, 1, shape=(NUM_ACTIONS,), dtype=np.int8),
            }
        )
        self._action_space = spaces.Discrete(NUM_ACTIONS)
        self._seeds = ResetSeeds()
        self._games = 0

    def observation_space(self, agent: str) -> spaces.Dict:
        """The same Dict space for every agent."""
        return self._observation_space

    def action_space(self, agent: str) -> spaces.Discrete:
        """Discrete(NUM_ACTIONS) for every agent."""
        return self._action_space

    def _start_agents(self, first_seat: int) -> None:
        """Every agent live with zero rewards, ``first_seat`` to act (a reset's AEC bookkeeping)."""
        self.agents = self.possible_agents[:]
        self.rewards = {a: 0.0 for a in self.agents}
        self._cumulative_rewards = {a: 0.0 for a in self.agents}
        self.terminations = {a: False for a in self.agents}
        self.truncations = {a: False for a in self.agents}
        self.infos: dict[str, dict[str, object]] = {a: {} for a in self.agents}
        self._skip_agent_selection = None
        self.agent_selection = self.possible_agents[first_seat]

    def _agent_to_step(self) -> str:
        """``agent_selection``, the agent a ``step`` is for.

        Raises:
            RuntimeError: before the first ``reset``, or once the game is over and every agent
                has been stepped out (call ``reset()``).
        """
        if not hasattr(self, "agent_selection"):
            raise RuntimeError("call reset() first")
        if not self.agents:
            raise RuntimeError("the game is over and every agent is done; call reset() for the next game")
        return self.agent_selection

    def _clear_rewards_of_step(self, agent: str) -> None:
        """A live agent's step starts: its cumulative reward is reported, every step reward is zero."""
        self._cumulative_rewards[agent] = 0.0
        for a in self.agents:
            self.rewards[a] = 0.0

    def render(self) -> None:
        """No rendering (``render_modes`` is empty)."""
        return None

    def close(self) -> None:
        """Nothing to release."""
        return None
