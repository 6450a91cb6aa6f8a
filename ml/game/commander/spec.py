"""The built-in Commander pod as the game of a run (``game.name: commander``).

============ ================================================================================
env          ``CommanderPodEnv`` (one game of the compiled core, ``ml.game.commander.env``)
batched      ``CoreGame`` (``ml.game.commander.core.game``): the scripted seats play inside its ``step``
obs_dim      ``ml.game.commander.features.OBS_DIM``
num_actions  ``ml.game.commander.actions.NUM_ACTIONS``
heuristic    the core's heuristic seat (Forge-like); ``random``: the core's random seat
encoder      ``RecordEncoder`` (reads the records' seat views, ``players``); teacher data with
             the imported Forge folder's card table (``ml.game.commander.forge.teacher_encoder``)
zero-sum     no: a pod of ``pod_size`` players ranked by first place (``ml.game.protocol.NotZeroSum``)
============ ================================================================================
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from ml.base.io import JSONValue
from ml.game.commander.actions import NUM_ACTIONS
from ml.game.commander.features import OBS_DIM
from ml.game.protocol import Game, NotZeroSum, RecordingEnv
from ml.game.spec import Encoder, ScriptedPlayer

if TYPE_CHECKING:
    from ml.config.sections import GameParams, TeacherParams

# The core (numba), its env and encoder are imported where a method uses them: the loop's driver
# makes this spec to check params.yaml at every start and plays no game (about 0.4 s of imports).

NAME = "commander"


@dataclass(frozen=True)
class CommanderSpec(NotZeroSum):
    """The Commander pod (``ml.game.protocol.GameSpec``; see the module docstring).

    Attributes:
        num_players: seats per pod (``game.pod_size``).
        max_turns: the round cap (``game.max_turns``; a game at the cap is a draw).
        name: ``commander``.
        obs_dim, num_actions: the encoder's and the macro actions' sizes.
        min_learner_decisions: a lower bound of one seat's decisions per game.
        env_version: ``""`` (the game is this project's).
    """

    num_players: int = 4
    max_turns: int = 30
    name: str = NAME
    obs_dim: int = OBS_DIM
    num_actions: int = NUM_ACTIONS
    min_learner_decisions: int = 10
    env_version: str = ""

    @property
    def teacher_name(self) -> str:
        """The core's heuristic seat."""
        return "Forge-like heuristic"

    def make_env(self, encoder: Encoder | None = None) -> RecordingEnv:
        """A ``CommanderPodEnv`` of one game of the core (``encoder``: its observations; None: ``RecordEncoder()``)."""
        from ml.game.commander.env import CommanderPodEnv

        return CommanderPodEnv(pod_size=self.num_players, max_turns=self.max_turns, encoder=encoder)

    def batched(self, num_games: int, encoder: Encoder | None = None) -> Game:
        """The compiled core, its scripted seats played inside its ``step``.

        Raises:
            ValueError: an ``encoder`` other than ``RecordEncoder`` (the core encodes live games with
                the compiled encoder only).
        """
        from ml.game.commander.core.game import CoreGame
        from ml.game.commander.encoding import RecordEncoder

        if encoder is not None and type(encoder) is not RecordEncoder:
            raise ValueError(f"the commander's core plays with its RecordEncoder, not {type(encoder).__name__}")
        return CoreGame(num_games, self.num_players, self.max_turns)

    def warm_up(self) -> None:
        """Compile, or load from numba's cache, the core's kernels (about 70 s cold on a 2-core machine,
        2-3 s cached; ``ml.game.commander.core.warmup``); once per process."""
        from ml.game.commander.core import warmup

        warmup.warm_up()

    def make_player(self, kind: str, seed: int) -> ScriptedPlayer:
        """Raises ValueError: the scripted seats play inside the core (``CoreGame``; ``seat_kind``)."""
        if kind not in ("teacher", "random"):
            raise ValueError(f"no scripted player of kind {kind!r}; use teacher or random")
        raise ValueError("the commander's scripted seats play inside its core (CoreGame), not as player objects")

    def encoder(self) -> Encoder:
        """A new ``RecordEncoder``."""
        from ml.game.commander.encoding import RecordEncoder

        return RecordEncoder()

    def teacher_encoder(self, forge_dir: Path | None) -> Encoder:
        """:meth:`encoder` with the card table of ``forge_dir`` and partial attack labels (``ml.game.commander.forge.teacher_encoder``).

        Raises:
            ml.base.io.DataFileError: a bad card table in ``forge_dir``.
        """
        from ml.game.commander import forge

        return forge.teacher_encoder(self.encoder(), forge_dir)

    def with_teacher_explore(self, explore: float) -> CommanderSpec:
        """This game: the heuristic seat draws every move itself."""
        return self

    def fingerprint(self) -> list[JSONValue]:
        """``[name, num_players, []]``."""
        return [self.name, self.num_players, []]

    def tree(self) -> None:
        """None: the pod's tree is far too large to walk."""
        return None


def commander(pod_size: int = 4, max_turns: int = 30) -> CommanderSpec:
    """The built-in Commander pod of ``pod_size`` seats and a cap of ``max_turns`` rounds."""
    return CommanderSpec(pod_size, max_turns)


def from_params(game: GameParams, teacher: TeacherParams | None) -> CommanderSpec:
    """``ml.game.registry.make_game`` of the commander.

    Raises:
        ValueError: a ``teacher.policy`` other than ``heuristic``.
    """
    if teacher is not None and teacher.policy != "heuristic":
        raise ValueError(f"teacher.policy {teacher.policy!r} is for OpenSpiel games; the commander's teacher is heuristic")
    return commander(game.pod_size, game.max_turns)
