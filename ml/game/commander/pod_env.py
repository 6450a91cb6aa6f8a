"""What the PettingZoo AEC envs of the Commander pod share: pod limits, the encoder, and (from
``ml.game.aec.FlatAECEnv``) spaces, agents, seeding and the per-game bookkeeping of the AEC API (``CommanderPodEnv``, the view of the compiled core; the
tests' object-engine env ``ml.game.commander.reference.reference_env.ReferencePodEnv`` is one
too, the oracle ``CommanderPodEnv`` is checked against)."""

from __future__ import annotations

from typing import Any, ClassVar

from ml.game.aec import FlatAECEnv
from ml.game.commander.actions import MAX_POD, MIN_POD, NUM_ACTIONS
from ml.game.spec import Encoder


class PodEnvBase(FlatAECEnv):
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
        if not MIN_POD <= pod_size <= MAX_POD:
            raise ValueError(f"pod_size must be in {MIN_POD}..{MAX_POD}, got {pod_size}")
        if not 1 <= max_turns <= max_turns_cap:
            raise ValueError(f"max_turns must be in 1..{max_turns_cap}, got {max_turns}")
        if encoder is None:
            from ml.game.commander.encoding import RecordEncoder  # lazy: optional at import time

            encoder = RecordEncoder()
        super().__init__("commander", pod_size, int(encoder.obs_dim), NUM_ACTIONS)
        self.pod_size = pod_size
        self.max_turns = max_turns
        self.encoder: Encoder = encoder
        self.agent_name_mapping = {a: i for i, a in enumerate(self.possible_agents)}

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
