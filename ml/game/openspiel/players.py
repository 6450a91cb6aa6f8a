"""Players for the loop's controller kinds (``ml.play.runner``): the teacher (kind ``teacher``),
chosen by ``teacher.policy`` (``ml.game.openspiel.spec.OpenSpielSpec.make_player``), and
:class:`UniformPlayer` (kind ``random``). The teachers:

* :class:`MCTSPlayer` (kind ``teacher``, ``teacher.policy: heuristic``): OpenSpiel's C++ ``MCTSBot`` with a
  ``RandomRolloutEvaluator``. MCTS searches the true state, so on imperfect-information games
  it sees hidden cards (a clairvoyant teacher); the records keep only the acting player's
  observation.
* :class:`UniformTeacher` (``uniform``): uniform over the legal moves.
* :class:`ISMCTSPlayer` (``ismcts``): OpenSpiel's information-set MCTS (Cowling et al. 2012),
  which samples the hidden state from the acting player's information set: it does not see
  hidden cards; it plays from its normalised visit counts.
* :class:`CFRPlayer` (``cfr``): the average policy of OpenSpiel's C++ CFR+ solver
  (Tammelin 2014) after ``teacher.cfr_iterations`` iterations (:func:`cfr_average_policy`),
  for games of at most :data:`CFR_MAX_HISTORIES` histories.

The teachers other than MCTS keep the distribution they played from in ``last_policy``
(float[num_actions], zero on illegal moves), which ``ml.game.env_game.EnvGame.record`` writes
into the record's ``policy``: the student fits it by KL (``train.distill: kl``).

The environment they play in is ``ml.game.openspiel.env.OpenSpielEnv``.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pyspiel


class MCTSPlayer:
    """OpenSpiel's MCTS bot with random rollouts (the teacher of OpenSpiel games).

    Args:
        game: the loaded game.
        seed: seeds the search and the rollouts.
        simulations: MCTS simulations per decision.
        rollouts: random rollouts per leaf evaluation.
        uct_c: UCT exploration constant.
    """

    def __init__(self, game: pyspiel.Game, seed: int, simulations: int, rollouts: int = 1, uct_c: float = 2.0) -> None:
        seed = int(seed) % (2**31 - 1)
        self._evaluator = pyspiel.RandomRolloutEvaluator(rollouts, seed)  # kept alive: the bot holds a reference
        self._bot = pyspiel.MCTSBot(game, self._evaluator, uct_c, simulations, 1000, False, seed, False)

    def act(self, state: pyspiel.State) -> int:
        """The bot's move in ``state`` (a decision node)."""
        return int(self._bot.step(state))


class UniformPlayer:
    """Uniformly random legal moves from a seeded generator."""

    def __init__(self, seed: int) -> None:
        self._rng = np.random.default_rng(int(seed) % 2**63)

    def act(self, state: pyspiel.State) -> int:
        """A uniformly drawn legal move."""
        legal = state.legal_actions()
        return int(legal[self._rng.integers(len(legal))])


CFR_MAX_HISTORIES = 200_000
"""Most game-tree histories (chance, decision and terminal nodes) of a game whose CFR+ average
policy the ``cfr`` teacher computes: every CFR+ iteration walks the whole tree (leduc_poker has
9 457, 100 iterations take about 1 s in OpenSpiel's C++ solver; kuhn_poker has 58)."""


def count_histories(game: pyspiel.Game, limit: int) -> int:
    """Histories of ``game``'s tree (every node: chance, decision, terminal), counted up to ``limit + 1``.

    Returns:
        the count, or ``limit + 1`` as soon as the tree is found to be larger than ``limit``.
    """
    n, stack = 0, [game.new_initial_state()]
    while stack and n <= limit:
        state = stack.pop()
        n += 1
        if state.is_terminal():
            continue
        actions = [a for a, _ in state.chance_outcomes()] if state.is_chance_node() else state.legal_actions()
        stack.extend(state.child(a) for a in actions)
    return min(n, limit + 1)


def _decision_states(game: pyspiel.Game) -> Iterator[pyspiel.State]:
    stack = [game.new_initial_state()]
    while stack:
        state = stack.pop()
        if state.is_terminal():
            continue
        if state.is_chance_node():
            stack.extend(state.child(a) for a, _ in state.chance_outcomes())
            continue
        yield state
        stack.extend(state.child(a) for a in state.legal_actions())


_CFR_CACHE: dict[tuple[str, int], dict[str, dict[int, float]]] = {}


def cfr_average_policy(game: pyspiel.Game, iterations: int) -> dict[str, dict[int, float]]:
    """The average policy of ``iterations`` CFR+ iterations (``pyspiel.CFRPlusSolver``), cached per process.

    Args:
        game: a two-player zero-sum (or any sequential) game of at most :data:`CFR_MAX_HISTORIES` histories.
        iterations: CFR+ iterations (>= 1).

    Returns:
        information-state string -> {legal action: probability}.

    Raises:
        ValueError: the game has more than :data:`CFR_MAX_HISTORIES` histories.

    References:
        Tammelin (2014), "Solving Large Imperfect Information Games Using CFR+", arXiv:1407.5042.
    """
    key = (str(game), int(iterations))
    if key not in _CFR_CACHE:
        if count_histories(game, CFR_MAX_HISTORIES) > CFR_MAX_HISTORIES:
            raise ValueError(
                f"teacher.policy cfr: {game} has more than {CFR_MAX_HISTORIES} histories (CFR+ walks the whole tree "
                "every iteration); use ismcts or uniform"
            )
        solver = pyspiel.CFRPlusSolver(game)
        for _ in range(int(iterations)):
            solver.evaluate_and_update_policy()
        avg = solver.average_policy()
        table: dict[str, dict[int, float]] = {}
        for state in _decision_states(game):
            info = state.information_state_string()
            if info not in table:
                table[info] = {int(a): float(p) for a, p in avg.action_probabilities(state).items()}
        _CFR_CACHE[key] = table
    return _CFR_CACHE[key]


class DistributionPlayer:
    """A teacher that draws its move from a distribution and keeps it in ``last_policy``.

    Subclasses give :meth:`distribution`. ``last_policy`` is float[num_actions] (zero on
    illegal moves), the distribution of the latest ``act``: the target the student fits,
    also when the move was an exploring one.

    Args:
        seed: seeds the draws.
        num_actions: the game's ``num_distinct_actions()``.
        explore: share of moves drawn uniformly from the legal ones instead of from the
            distribution (``teacher.explore``: the teacher games then reach the information
            states the distribution itself avoids, whose ``policy`` is still the teacher's).
    """

    def __init__(self, seed: int, num_actions: int, explore: float = 0.0) -> None:
        self._rng = np.random.default_rng(int(seed) % 2**63)
        self.num_actions = num_actions
        self.explore = explore
        self.last_policy: list[float] | None = None

    def distribution(self, state: pyspiel.State) -> dict[int, float]:
        """{legal action: probability} in ``state`` (a decision node)."""
        raise NotImplementedError

    def _normalised(self, state: pyspiel.State) -> tuple[list[int], np.ndarray, list[float]]:
        """:meth:`distribution`'s moves (sorted), their probabilities (float64, summing to 1) and
        the float[num_actions] vector of them (zero elsewhere)."""
        dist = self.distribution(state)
        actions = sorted(dist)
        probs = np.asarray([dist[a] for a in actions], np.float64)
        probs /= probs.sum()
        policy = [0.0] * self.num_actions
        for a, p in zip(actions, probs.tolist(), strict=True):
            policy[a] = p
        return actions, probs, policy

    def policy_vector(self, state: pyspiel.State) -> list[float]:
        """float[num_actions]: :meth:`distribution` in ``state``, zero on the moves it leaves out; draws nothing."""
        return self._normalised(state)[2]

    def act(self, state: pyspiel.State) -> int:
        """A move drawn from :meth:`distribution` (its vector kept in ``last_policy``)."""
        actions, probs, policy = self._normalised(state)
        self.last_policy = policy
        if self.explore > 0 and self._rng.random() < self.explore:
            legal = state.legal_actions()
            return int(legal[self._rng.integers(len(legal))])
        return int(actions[self._rng.choice(len(actions), p=probs)])


class UniformTeacher(DistributionPlayer):
    """The ``uniform`` teacher: every legal move alike (its distribution goes into the records)."""

    def distribution(self, state: pyspiel.State) -> dict[int, float]:
        """Uniform over ``state.legal_actions()``."""
        legal = state.legal_actions()
        return {a: 1.0 / len(legal) for a in legal}


class CFRPlayer(DistributionPlayer):
    """The ``cfr`` teacher: CFR+'s average policy (:func:`cfr_average_policy`) at the acting player's information state.

    Args:
        game: the loaded game.
        seed: seeds the draws.
        iterations: CFR+ iterations.
        explore: see :class:`DistributionPlayer`.

    Raises:
        ValueError: see :func:`cfr_average_policy`.
    """

    def __init__(self, game: pyspiel.Game, seed: int, iterations: int, explore: float = 0.0) -> None:
        super().__init__(seed, game.num_distinct_actions(), explore)
        self._table = cfr_average_policy(game, iterations)

    def distribution(self, state: pyspiel.State) -> dict[int, float]:
        """The average policy at ``state.information_state_string()``."""
        return self._table[state.information_state_string()]


class ISMCTSPlayer(DistributionPlayer):
    """The ``ismcts`` teacher: OpenSpiel's ``ISMCTSBot`` (random rollouts, normalised visit counts).

    Args:
        game: the loaded game.
        seed: seeds the search, the rollouts and the draws.
        simulations: simulations per decision; rollouts, uct_c: as :class:`MCTSPlayer`'s.
        explore: see :class:`DistributionPlayer`.

    References:
        Cowling, Powley, Whitehouse (2012), "Information Set Monte Carlo Tree Search", IEEE TCIAIG 4(2).
    """

    def __init__(
        self, game: pyspiel.Game, seed: int, simulations: int, rollouts: int = 1, uct_c: float = 2.0, explore: float = 0.0
    ) -> None:
        super().__init__(seed, game.num_distinct_actions(), explore)
        seed = int(seed) % (2**31 - 1)
        self._evaluator = pyspiel.RandomRolloutEvaluator(rollouts, seed)  # kept alive: the bot holds a reference
        self._bot = pyspiel.ISMCTSBot(seed, self._evaluator, uct_c, simulations, -1,
                                      pyspiel.ISMCTSFinalPolicyType.NORMALIZED_VISIT_COUNT, False, False)  # fmt: skip

    def distribution(self, state: pyspiel.State) -> dict[int, float]:
        """The search's normalised visit counts over the legal moves."""
        policy, _ = self._bot.step_with_policy(state)
        return {int(a): float(p) for a, p in policy}
