"""Any PettingZoo AEC environment by import path (``game.name: pettingzoo:<module>:<factory>``) as the loop's record env.

:class:`PettingZooEnv` wraps the user's env (``<module>.<factory>(**game.env_kwargs)``) into the
record env the loop plays (``ml.game.env_game.ScriptableEnv``), the way
``ml.game.openspiel.env.OpenSpielEnv`` wraps a pyspiel game, on the same base (``ml.game.aec.FlatAECEnv``):

==================== ================================================================
Agents               ``player_<k>``: the env's ``possible_agents[k]``
Actions              the env's ``Discrete(n)`` (the same ``n`` for every agent, ``start`` 0)
Observation          ``{"observation": float32[obs_dim], "action_mask": int8[n]}``: the env's
                     observation flattened (C order), its mask from the observation dict
                     (``action_mask``) or, failing that, from ``infos[agent]["action_mask"]``
Rewards              the env's ``rewards`` after each step (PettingZoo: that step's rewards)
Outcome              first place = largest return summed over the game (a tie for it is a
                     ``draw``), ranking by return (``ml.game.aec.outcome_of``)
Scripted state       :class:`Decision`: the acting agent's observation as the env gives it
                     (not flattened) and its mask
Records              ``ml.game.record.OpenSpielRecord`` with ``game`` the run's name and
                     ``env_version`` (:func:`env_version`)
==================== ================================================================

Loading and checking the env is ``ml.game.pettingzoo.load``'s; its players are ``ml.game.pettingzoo.players``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar, NamedTuple

import numpy as np

from ml.base.io import JSONObject, JSONValue
from ml.game.aec import FlatAECEnv, IllegalMoveError, outcome_of
from ml.game.pettingzoo.load import PettingZooError, factory_path, import_object, observation_shape, split_observation


class Decision(NamedTuple):
    """What a scripted player of a PettingZoo game sees (``PettingZooEnv.state``).

    Attributes:
        observation: the acting agent's observation as the env gives it (e.g. int8[6, 7, 2]).
        mask: int8[num_actions], 1 for a legal action.
    """

    observation: Any
    mask: np.ndarray


class PettingZooEnv(FlatAECEnv):
    """A user's PettingZoo AEC env as the loop's record env (see the module docstring).

    Args:
        name: ``pettingzoo:<module>:<factory>`` (written into records as ``game``).
        env_kwargs: keyword arguments of the factory.
        version: the records' ``env_version`` (``ml.game.pettingzoo.load.inspect_env``).

    Raises:
        PettingZooError: the factory does not import.
    """

    metadata: ClassVar[dict[str, Any]] = {"name": "pettingzoo_adapter_v0", "is_parallelizable": False, "render_modes": []}

    def __init__(self, name: str, env_kwargs: Mapping[str, JSONValue], version: str) -> None:
        env: Any = import_object(factory_path(name), "name")(**env_kwargs)
        names = list(env.possible_agents)
        obs_dim = int(np.prod(observation_shape(env.observation_space(names[0]), names[0])))
        super().__init__(name, len(names), obs_dim, int(env.action_space(names[0]).n))
        self.env, self.env_version, self._names = env, version, names
        self._seat = {a: i for i, a in enumerate(self._names)}
        self.returns = np.zeros(self.num_players, np.float64)

    def _name(self, inner: str) -> str:
        return self.possible_agents[self._seat[inner]]

    def _sync(self) -> None:
        """Mirror the inner env's agents, selection, rewards and flags under the ``player_<k>`` names."""
        env = self.env
        self.agents = [self._name(a) for a in env.agents]
        self.rewards = {self._name(a): float(r) for a, r in env.rewards.items()}
        for a, r in env.rewards.items():
            self.returns[self._seat[a]] += float(r)
        self.terminations = {self._name(a): bool(t) for a, t in env.terminations.items()}
        self.truncations = {self._name(a): bool(t) for a, t in env.truncations.items()}
        self._cumulative_rewards = {self._name(a): float(r) for a, r in env._cumulative_rewards.items()}
        self.infos = {self._name(a): i for a, i in env.infos.items()}
        if env.agents:
            self.agent_selection = self._name(env.agent_selection)

    def reset(self, seed: int | None = None, options: dict[str, object] | None = None) -> None:
        """Start a new game with ``env.reset(seed=...)`` (later seedless resets draw seeds from ``seed``).

        Args:
            seed: game seed, or None.
            options: ``{"game_index": int}`` names the game ``game-<index>-<seed>``.
        """
        self.env.reset(seed=self._start_game(seed, options))
        self.returns[:] = 0.0
        self._sync()

    def _acting(self) -> tuple[str, Any, np.ndarray]:
        """``(inner agent, raw observation, int8 mask)`` of the agent to act."""
        agent = self.env.agent_selection
        obs, mask = split_observation(self.env.observe(agent), self.env.infos.get(agent))
        if mask is None:
            raise PettingZooError("name", f"{self.game_name}: no action_mask for {agent} in {self.game_id}")
        return agent, obs, np.asarray(mask, dtype=np.int8)

    def step(self, action: int | None) -> None:
        """Apply ``action`` for ``agent_selection`` (``None`` for a dead agent).

        Raises:
            IllegalMoveError: an action outside the mask.
        """
        agent = self.env.agent_selection
        if self.env.terminations[agent] or self.env.truncations[agent]:
            self.env.step(None)
        else:
            _, _, mask = self._acting()
            if action is None or not 0 <= int(action) < self.num_actions or not mask[int(action)]:
                legal = np.flatnonzero(mask).tolist()
                raise IllegalMoveError(f"{self.game_id}: action {action!r} is not legal for {agent}; legal: {legal}")
            self.env.step(int(action))
            self.decisions += 1
        self._sync()

    @property
    def state(self) -> Decision:
        """The acting agent's :class:`Decision` (what the scripted players act on)."""
        _, obs, mask = self._acting()
        return Decision(obs, mask)

    def observe(self, agent: str) -> dict[str, np.ndarray]:
        """``{"observation": float32[obs_dim], "action_mask": int8[num_actions]}`` of ``agent``
        (the mask all zeros unless ``agent`` is to act)."""
        inner = self._names[self.possible_agents.index(agent)]
        obs, mask = split_observation(self.env.observe(inner), self.env.infos.get(inner))
        out = np.zeros(self.num_actions, np.int8)
        if self.env.agents and inner == self.env.agent_selection and mask is not None:
            out[:] = np.asarray(mask, dtype=np.int8)
        return {"observation": np.asarray(obs, dtype=np.float32).reshape(-1), "action_mask": out}

    def decision_record(self) -> JSONObject:
        """Record of the decision the acting agent is about to make (``ml.game.record.OpenSpielRecord``)."""
        agent, obs, mask = self._acting()
        observation = np.asarray(obs, dtype=np.float32).reshape(-1).tolist()
        return self._record(self._seat[agent], observation, mask.astype(int).tolist(), self.env_version)

    def describe_action(self, action: int) -> JSONObject:
        """The record's ``action`` object (call before ``step``): ``type: move``, ``raw`` (the index), ``action_idx``."""
        return {"type": "move", "raw": str(int(action)), "action_idx": int(action)}

    def game_result(self) -> tuple[str, str, int | None, list[int]]:
        """``(game_id, outcome, winner, ranking)`` of the finished game from the summed rewards."""
        outcome, winner, ranking = outcome_of(self.returns.tolist())
        return self.game_id, outcome, winner, ranking

    def close(self) -> None:
        """Close the wrapped env."""
        self.env.close()
