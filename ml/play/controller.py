"""Who plays a seat of a game: a scripted player kind or a network, alone or in a ``PolicyBank``.

``ml.play.runner.play_games`` takes a mapping from controller key to ``Controller``; a seating names
each seat's key.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

from ml.model.policy import PolicyBank, PolicyNet

ControllerKind = Literal["teacher", "random", "net"]
"""Who plays a seat: a scripted player (``teacher``, ``random``) or a network (``net``)."""


@dataclass
class Controller:
    """Who plays a seat: a scripted player kind (``teacher``/``random``) or a network.

    Attributes:
        kind: ``teacher`` (the game's teacher), ``random`` or ``net``.
        net: the policy for ``net`` controllers.
        greedy: arg-max instead of sampling for ``net`` controllers.
        explore: ``net`` controllers: share of decisions whose move is drawn uniformly from the legal
            ones; the logged record keeps the network's distribution as ``policy`` (0: every move
            from the network, and no random draw spent on it). Not for tracked (PPO) seats.
        targets: ``net`` controllers: the ``policy`` of their logged records, the network's
            distribution (``agent``) or the game's teacher's at the same decision (``teacher``,
            ``ml.game.protocol.Game.teacher_policy``).
        bank: ``net`` controllers: a ``PolicyBank`` holding ``net`` as member ``member``; the
            decisions waiting on all the controllers of one bank are answered by one forward pass
            and one draw (``net`` still says the architecture; the bank's controllers share
            ``greedy``, ``explore`` and ``targets``). None: ``net``'s own pass.
        member: ``net``'s index in ``bank``.
    """

    kind: ControllerKind
    net: PolicyNet | None = None
    greedy: bool = False
    explore: float = 0.0
    targets: Literal["agent", "teacher"] = "agent"
    bank: PolicyBank | None = None
    member: int = 0


def check_banks(controllers: Mapping[str, Controller]) -> None:
    """Raise ValueError unless each bank's controllers play alike (one group, one draw) and name a member it has."""
    seen: dict[int, tuple[str, tuple[object, ...]]] = {}
    for key, ctrl in controllers.items():
        if ctrl.bank is None:
            continue
        if not 0 <= ctrl.member < ctrl.bank.members:
            raise ValueError(f"controller {key!r}: member {ctrl.member} of a bank of {ctrl.bank.members}")
        flags = (ctrl.greedy, ctrl.explore, ctrl.targets)
        first = seen.setdefault(id(ctrl.bank), (key, flags))
        if first[1] != flags:
            raise ValueError(f"controllers {first[0]!r} and {key!r} share a bank but not greedy, explore and targets")
