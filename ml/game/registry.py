"""Which game the loop plays: a table from a game kind to the module that makes its ``GameSpec``.

``params.yaml`` names the game (``game.name``): ``commander`` (the built-in pod),
``openspiel:<game>`` (any sequential OpenSpiel game, with ``game.openspiel_params``) or
``pettingzoo:<module>:<factory>`` (any PettingZoo AEC env, with ``game.env_kwargs``). The kind is
the name before its first ``:``; :data:`KINDS` maps it to a package under ``ml.game`` whose
``spec`` module has ``from_params(game, teacher) -> GameSpec`` (the ``game`` and ``teacher``
sections of params). :func:`make_game` imports that module when a game of its kind is made, so a
run of one kind never imports another's libraries (``pyspiel``, the user's env, numba).

What a spec is and does is ``ml.game.protocol.GameSpec``; the kinds' specs are
``ml.game.commander.spec``, ``ml.game.openspiel.spec`` and ``ml.game.pettingzoo.spec``.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from ml.config.sections import GameParams, TeacherParams
from ml.game.commander.forge_record import DecisionRecord
from ml.game.record import OpenSpielRecord

if TYPE_CHECKING:
    from ml.game.protocol import GameSpec

KINDS: dict[str, str] = {
    "commander": "ml.game.commander.spec",
    "openspiel": "ml.game.openspiel.spec",
    "pettingzoo": "ml.game.pettingzoo.spec",
}
"""Game kind -> the module of its ``from_params(game: GameParams, teacher: TeacherParams | None) -> GameSpec``."""

DEFAULT_KIND = "commander"
"""The kind named by itself (``game.name: commander``, the default); the others take ``<kind>:<game>``."""


def kind_of(name: str) -> str:
    """The kind of a ``game.name``: ``commander``, ``openspiel`` or ``pettingzoo``.

    Raises:
        ValueError: a name of no kind (``game.name`` must be ``commander``, ``openspiel:<game>`` or
            ``pettingzoo:<module>:<factory>``).
    """
    kind, sep, _ = name.partition(":")
    if kind not in KINDS or bool(sep) == (kind == DEFAULT_KIND):
        raise ValueError(
            f"game.name must be {DEFAULT_KIND!r}, 'openspiel:<game>' or 'pettingzoo:<module>:<factory>', got {name!r}"
        )
    return kind


def make_game(game: GameParams, teacher: TeacherParams | None = None) -> GameSpec:
    """The GameSpec of the ``game`` and ``teacher`` sections of params (``ml.config.params``).

    Args:
        game: ``GameParams`` (``name``, ``pod_size``, ``max_turns``, ``openspiel_params``, ``env_kwargs``, ``observation``).
        teacher: ``TeacherParams`` (``policy``, ``cfr_iterations``, ``mcts_*``), or None for the defaults.

    Raises:
        ValueError: an unknown game name, ``pod_size`` differing from the game's players, a
            ``teacher.policy`` the game does not take, a ``cfr`` teacher on a game too large for it
            (a PettingZoo game's refusals are ``ml.game.pettingzoo.load.PettingZooError``, naming the key).
    """
    spec: GameSpec = importlib.import_module(KINDS[kind_of(game.name)]).from_params(game, teacher)
    return spec


def default_game() -> GameSpec:
    """The game of default params (``GameParams()``: the Commander pod of 4)."""
    return make_game(GameParams())


def record_model(obj: object) -> type[DecisionRecord] | type[OpenSpielRecord]:
    """The record kind of a JSON object or record: ``OpenSpielRecord`` when it has an
    ``observation`` (OpenSpiel games and PettingZoo envs), else the commander's (Forge's) ``DecisionRecord``."""
    if isinstance(obj, (DecisionRecord, OpenSpielRecord)):
        return type(obj)
    return OpenSpielRecord if isinstance(obj, dict) and "observation" in obj else DecisionRecord
