"""The checks of ``params.yaml`` that need the game made: they run where the game is made, not in the params models.

``ml.config`` validates what the file says (types, ranges, names); whether the named game exists and
takes these options is known only by making it. :func:`check_params` makes the game of the params (and
of each profile and curriculum phase, through ``ml.config.params.load_params(check=...)``) and raises
:class:`ml.config.yaml_file.At` errors naming the key, which the params loader turns into
``<file>:<line>: <section>.<key>: <why>``. The doors that start work pass it: the stages
(``ml.runtime.cli.stage_setup``), the driver (``ml.driver``, ``loop.py``) and the dashboard's params reader.

Checked here:

- ``game.name`` (and ``openspiel_params``, ``env_kwargs``, ``pod_size``): the game can be made
  (``ml.game.registry.make_game``); a PettingZoo refusal names its key (``PettingZooError.param``).
- ``teacher.policy``: a ``<module>:<callable>`` teacher imports; the game takes this teacher (the
  commander's is ``heuristic``; ``cfr`` needs a game of at most ``CFR_MAX_HISTORIES`` histories).
- ``gate.decide_by: nash_conv``: :func:`nash_conv_refusal` accepts the game.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ml.config.sections import DISTRIBUTION_TEACHERS
from ml.config.yaml_file import At
from ml.game.openspiel.players import count_histories
from ml.game.pettingzoo.load import PettingZooError
from ml.game.pettingzoo.players import check_teacher_policy
from ml.game.protocol import GameSpec
from ml.game.registry import kind_of, make_game

if TYPE_CHECKING:
    from ml.config.params import Params

GAME_KEYS = ("name", "openspiel_params", "env_kwargs", "observation", "pod_size", "max_turns")
"""The ``game`` keys a refusal may start with."""

NASH_CONV_MAX_STATES = 100_000
"""Most game-tree states (histories: chance, decision and terminal nodes) a game may have for the
gate to decide by exact NashConv (``gate.decide_by: nash_conv``, ``ml.judge.nashconv``).
``exploitability.nash_conv`` walks the whole tree for each best response; measured, leduc_poker's
9,457 states take 0.18 s for the uniform policy, so the limit keeps one evaluation to a few seconds."""


def nash_conv_refusal(game: GameSpec, limit: int = NASH_CONV_MAX_STATES) -> str | None:
    """Why exact NashConv cannot judge ``game``, in one line, or None when it can.

    It can for a two-player zero-sum game (``GameSpec.zero_sum``: NashConv is then twice the
    exploitability) with a tree at hand (``GameSpec.tree``: OpenSpiel games) that holds at most
    ``limit`` states (:data:`NASH_CONV_MAX_STATES`, counted by ``ml.game.openspiel.players.count_histories``).
    """
    tree = game.tree() if game.zero_sum else None
    if tree is None:
        return f"{game.name}: exact NashConv judges two-player zero-sum OpenSpiel games only"
    if count_histories(tree.game, limit) > limit:
        return f"{game.name}: the game tree has more than {limit} states (ml.game.checks.NASH_CONV_MAX_STATES); exact NashConv is too slow"
    return None


def check_params(params: Params) -> None:
    """Make the game of ``params`` with its teacher, and check the options that depend on it.

    Raises:
        ml.config.yaml_file.At: the first refusal, at the key it is about (``game.<key>``,
            ``teacher.policy``, ``gate.decide_by``); its text starts with that dotted key.
    """
    if ":" in params.teacher.policy:
        try:
            check_teacher_policy(params.teacher.policy)
        except PettingZooError as e:
            raise At(("teacher", "policy"), f"teacher.policy: {e}") from None
    try:
        game = make_game(params.game)
    except PettingZooError as e:
        raise At(("game", e.param), f"game.{e.param}: {e}") from None
    except ValueError as e:
        raise _at(e, ("game", "name")) from None
    if params.teacher.policy != "heuristic" and kind_of(params.game.name) != "pettingzoo":
        try:
            game = make_game(params.game, params.teacher)
        except ValueError as e:
            raise _at(e, ("teacher", "policy")) from None
    if params.gate.decide_by == "nash_conv" and (why := nash_conv_refusal(game)):
        raise At(("gate", "decide_by"), f"gate.decide_by: nash_conv: {why}")
    if params.export.targets == "teacher" and params.teacher.policy not in DISTRIBUTION_TEACHERS:
        raise At(
            ("export", "targets"),
            f"export.targets: teacher needs a teacher that keeps a distribution (teacher.policy "
            f"{', '.join(DISTRIBUTION_TEACHERS)}), not {params.teacher.policy}",
        )


def _at(error: ValueError, default: tuple[str, str]) -> At:
    """``make_game``'s refusal at the key its text starts with (``game.pod_size is 4 but ...``), else at ``default``."""
    text, keys = str(error), {"game": GAME_KEYS, "teacher": ("policy",)}
    for section, names in keys.items():
        for name in names:
            if text.startswith(f"{section}.{name}"):
                return At((section, name), text)
    return At(default, f"{'.'.join(default)}: {text}")
