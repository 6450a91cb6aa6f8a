"""What a training run takes beside its params section: ``RunSettings``, and PPO's ``Resume``."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ml.model.policy import PolicyNet


@dataclass(frozen=True)
class RunSettings:
    """How one training run runs, beside its params: the seed, the device and the progress bar.

    Attributes:
        seed: seeds everything random of the run (a stage's ``Params.stage_seed``).
        device: torch device of the updates (``cpu``, ``cuda``, ``cuda:<n>``).
        progress: show a progress bar.
    """

    seed: int
    device: str = "cpu"
    progress: bool = False


@dataclass
class Resume:
    """Where ``train_ppo`` starts instead of a fresh copy of the student.

    Attributes:
        net: the policy to continue (the student's architecture; left unchanged); None: the student.
        name: what ``net`` is (``selfplay/start`` in the metrics).
        optimizer_state: Adam's ``state_dict`` of the run that trained ``net`` (its learning rate is
            replaced by ``selfplay.lr``); empty: a new optimizer. ``train_ppo`` puts the final state here.
    """

    net: PolicyNet | None = None
    name: str = "student"
    optimizer_state: dict[str, Any] = field(default_factory=dict)
