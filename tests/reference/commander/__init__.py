"""The Commander pod's object engine: the oracle of the compiled core (``ml.game.commander.core``).

Plain Python over ``state.GameState`` objects, with the same semantics as the core's kernels,
statement for statement and draw for draw: ``rules`` (public API: ``new_game``,
``apply_action``, records), ``engine`` (turn flow and card effects), ``combat`` (threat, block
rule, damage), ``players`` (``HeuristicPlayer``, ``RandomPlayer``) and ``reference_env``
(``ReferencePodEnv``, its PettingZoo AEC env). The product plays through the core only; the
tests compare the two (``tests/test_core_agreement.py``, ``tests/test_env.py``,
``tests/test_rollout.py``). The numbers both share are the product's (``ml.game.commander.actions``,
``pod_rules``, ``core.kernels``), one definition each.
"""

from __future__ import annotations

from ml.game.env_game import EnvGame
from ml.game.registry import GameSpec
from ml.game.spec import Encoder, ScriptedPlayer


def make_player(kind: str, seed: int) -> ScriptedPlayer:
    """The object engine's scripted player of a controller kind (``heuristic`` or ``random``), seeded ``seed``.

    Raises:
        ValueError: another kind.
    """
    from tests.reference.commander.players import HeuristicPlayer, RandomPlayer

    if kind not in ("heuristic", "random"):
        raise ValueError(f"no scripted player of kind {kind!r}; use heuristic or random")
    return HeuristicPlayer(seed) if kind == "heuristic" else RandomPlayer(seed)


def objects_game(spec: GameSpec, num_games: int, encoder: Encoder | None = None) -> EnvGame:
    """The commander ``spec`` as a batched ``ml.game.protocol.Game`` over the object engine: rows of
    ``ReferencePodEnv`` with :func:`make_player`'s players (what ``spec.batched`` is for the core)."""
    from tests.reference.commander.reference_env import ReferencePodEnv

    def make_env() -> ReferencePodEnv:
        return ReferencePodEnv(pod_size=spec.num_players, max_turns=spec.max_turns, encoder=encoder)

    return EnvGame(make_env, make_player, num_games, spec.num_players, spec.obs_dim, spec.num_actions)
