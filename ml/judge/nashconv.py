"""Exact NashConv of the student, the teacher and the uniform policy on small zero-sum games.

NashConv (Lanctot et al. 2017) is the sum over players of what a best response gains
against the policy: 0 at a Nash equilibrium. OpenSpiel computes it exactly by walking the
game tree (``open_spiel.python.algorithms.exploitability.nash_conv``), which is cheap for
``kuhn_poker``, ``leduc_poker`` and any two-player zero-sum game of at most
:data:`NASH_CONV_MAX_STATES` states (:func:`nash_conv_refusal`).

The policies measured:

* the student: :class:`NetPolicy` runs the network on ``state.observation_tensor(player)``
  with the legal mask (the same input the loop trains and plays with);
* the teacher: MCTS is not a tabular policy (it searches the true state, hidden cards
  included), so its policy is estimated from its own decisions: :class:`EmpiricalPolicy`
  plays, at each (observation, legal moves), the frequencies of the teacher's recorded
  moves there, and uniformly where the teacher data never reached;
* the uniform-random policy (``policy.UniformRandomPolicy``).

References:
    Lanctot et al. (2017), "A Unified Game-Theoretic Approach to Multiagent Reinforcement
    Learning", NeurIPS (NashConv, section 3).
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np
import pyspiel
import torch
from open_spiel.python import policy as os_policy
from open_spiel.python.algorithms import exploitability

from ml.data.batch_files import read_records, scan_batches
from ml.game.checks import nash_conv_refusal
from ml.game.protocol import GameSpec, GameTree
from ml.game.record import OpenSpielRecord
from ml.model.policy import PolicyNet

logger = logging.getLogger(__name__)


def nash_conv(net: PolicyNet, game: GameSpec) -> float:
    """Exact NashConv of ``net`` (:class:`NetPolicy`) in ``game`` (the game's utility units, summed over both players).

    Raises:
        ValueError: a game without a tree (``GameSpec.tree``).
    """
    tree = _tree(game)
    return float(exploitability.nash_conv(tree.game, NetPolicy(tree, net)))


def _tree(game: GameSpec) -> GameTree:
    tree = game.tree()
    if tree is None:
        raise ValueError(f"{game.name}: no game tree to compute NashConv on")
    return tree


def _key(state: Any, player: int, tree: GameTree) -> tuple[tuple[float, ...], tuple[int, ...]]:
    return tuple(tree.observe(state, player)), tuple(state.legal_actions(player))


class NetPolicy(os_policy.Policy):
    """A policy network as an OpenSpiel policy (memoised by observation and legal moves).

    Args:
        tree: the game and the observation the network reads (``GameSpec.tree``).
        net: the network (``obs_dim`` = the game's observation size).
    """

    def __init__(self, tree: GameTree, net: PolicyNet) -> None:
        super().__init__(tree.game, list(range(tree.game.num_players())))
        self.net = net
        self.tree = tree
        self._memo: dict[tuple[tuple[float, ...], tuple[int, ...]], dict[int, float]] = {}

    @torch.no_grad()
    def action_probabilities(self, state: pyspiel.State, player_id: int | None = None) -> dict[int, float]:
        """``{action: probability}`` over the legal moves of the acting player (softmax of masked logits)."""
        player = state.current_player() if player_id is None else player_id
        key = _key(state, player, self.tree)
        if key not in self._memo:
            obs, legal = key
            mask = np.zeros((1, self.net.num_actions), dtype=bool)
            mask[0, list(legal)] = True
            logits, _ = self.net(torch.tensor([obs], dtype=torch.float32), torch.from_numpy(mask))
            probs = torch.softmax(logits[0], dim=-1).numpy()
            self._memo[key] = {a: float(probs[a]) for a in legal}
        return self._memo[key]


Decision = tuple[list[float], list[int], int, "list[float] | None"]
"""A recorded decision: observation, legal moves, the move taken, the distribution it teaches (None: the move)."""


class EmpiricalPolicy(os_policy.Policy):
    """What recorded decisions teach at each (observation, legal moves): the mean of their
    distributions (the records' ``policy``), a record without one counting as its move; uniform
    where nothing was recorded. A teacher that explores (``teacher.explore``) records the
    distribution it explores from, so its explored moves do not count.

    Args:
        tree: the game and the observation the decisions hold (``GameSpec.tree``).
        decisions: ``Decision`` tuples.

    Attributes:
        covered: distinct (observation, legal moves) keys with data.
    """

    def __init__(self, tree: GameTree, decisions: Iterable[Decision]) -> None:
        super().__init__(tree.game, list(range(tree.game.num_players())))
        self.tree = tree
        mass: dict[tuple[tuple[float, ...], tuple[int, ...]], dict[int, float]] = defaultdict(lambda: defaultdict(float))
        for obs, legal, action, policy in decisions:
            at = mass[(tuple(obs), tuple(legal))]
            if policy is None:
                at[action] += 1.0
            else:
                for a in legal:
                    at[a] += float(policy[a])
        self._table = {k: {a: m / sum(v.values()) for a, m in v.items()} for k, v in mass.items()}
        self.covered = len(self._table)

    def action_probabilities(self, state: pyspiel.State, player_id: int | None = None) -> dict[int, float]:
        """The recorded mean distribution (zero for legal moves it never gave), or uniform when unseen."""
        player = state.current_player() if player_id is None else player_id
        key = _key(state, player, self.tree)
        legal = key[1]
        probs = self._table.get(key)
        if probs is None:
            return {a: 1.0 / len(legal) for a in legal}
        return {a: probs.get(a, 0.0) for a in legal}


def teacher_decisions(teacher_dir: Path) -> list[Decision]:
    """``Decision`` tuples of every decision in the teacher batches of ``teacher_dir``."""
    out = []
    for path in scan_batches(teacher_dir, sources=("sim",)):
        for rec in read_records(path):
            if not isinstance(rec, OpenSpielRecord):
                raise TypeError(f"{path}: game {rec.game_id!r} is a commander record, not an OpenSpiel one")
            legal = [i for i, b in enumerate(rec.action_mask or []) if b]
            out.append((rec.observation, legal, rec.action.action_idx, rec.policy))
    return out


def nash_conv_metrics(net: PolicyNet, game: GameSpec, teacher_dir: Path | None, prefix: str = "train") -> dict[str, float]:
    """NashConv of ``net``, of what the teacher's records teach (``EmpiricalPolicy``) and of the uniform policy.

    Args:
        net: the student (or any network of this game).
        game: the game; metrics are computed only where :func:`nash_conv_refusal` accepts it
            (two-player zero-sum, at most ``NASH_CONV_MAX_STATES`` states: kuhn_poker, leduc_poker,
            liars_dice with one die of up to 4 sides, ...).
        teacher_dir: folder of the teacher batches (None: no teacher figure).
        prefix: metric namespace.

    Returns:
        ``{}`` for other games, else ``<prefix>/nash_conv`` (the student),
        ``<prefix>/nash_conv_teacher_empirical`` with ``<prefix>/teacher_infostates_covered``,
        and ``<prefix>/nash_conv_uniform``; NashConv in the game's chips (sum over both players).
    """
    if nash_conv_refusal(game) is not None:
        return {}
    tree = _tree(game)
    os_game = tree.game
    out: dict[str, Any] = {
        f"{prefix}/nash_conv": float(exploitability.nash_conv(os_game, NetPolicy(tree, net))),
        f"{prefix}/nash_conv_uniform": float(exploitability.nash_conv(os_game, os_policy.UniformRandomPolicy(os_game))),
    }
    if teacher_dir is not None:
        empirical = EmpiricalPolicy(tree, teacher_decisions(teacher_dir))
        out[f"{prefix}/nash_conv_teacher_empirical"] = float(exploitability.nash_conv(os_game, empirical))
        out[f"{prefix}/teacher_infostates_covered"] = empirical.covered
    logger.info("NashConv: %s", out)
    return out
