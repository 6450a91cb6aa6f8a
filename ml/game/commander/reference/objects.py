"""The object engine as a batched ``ml.game.protocol.Game`` (what ``CommanderSpec.batched`` is for the core):
rows of ``ReferencePodEnv`` with the engine's scripted players."""

from __future__ import annotations

from ml.game.commander.reference.players import HeuristicPlayer, RandomPlayer
from ml.game.commander.reference.reference_env import ReferencePodEnv
from ml.game.commander.spec import CommanderSpec
from ml.game.env_game import EnvGame
from ml.game.spec import Encoder, ScriptedPlayer


def make_player(kind: str, seed: int) -> ScriptedPlayer:
    """The object engine's scripted player of a controller kind (``teacher`` or ``random``), seeded ``seed``.

    Raises:
        ValueError: another kind.
    """
    if kind not in ("teacher", "random"):
        raise ValueError(f"no scripted player of kind {kind!r}; use teacher or random")
    return HeuristicPlayer(seed) if kind == "teacher" else RandomPlayer(seed)


def objects_game(spec: CommanderSpec, num_games: int, encoder: Encoder | None = None) -> EnvGame:
    """The commander ``spec`` as a batched ``ml.game.protocol.Game`` over the object engine: rows of
    ``ReferencePodEnv`` with :func:`make_player`'s players (what ``spec.batched`` is for the core)."""

    def make_env() -> ReferencePodEnv:
        return ReferencePodEnv(pod_size=spec.num_players, max_turns=spec.max_turns, encoder=encoder)

    return EnvGame(make_env, make_player, num_games, spec.num_players, spec.obs_dim, spec.num_actions)
