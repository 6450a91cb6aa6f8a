"""What a training run takes beside its params section: ``RunSettings``, and PPO's ``Resume``."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ml.model.policy import PolicyNet
from ml.runtime.executor import LOCAL, Executor


@dataclass(frozen=True)
class RunSettings:
    """How one training run runs, beside its params: the seed, the device, the progress bar, the workers.

    Attributes:
        seed: seeds everything random of the run (a stage's ``Params.stage_seed``).
        device: torch device of the updates (``cpu``, ``cuda``, ``cuda:<n>``).
        progress: show a progress bar.
        executor: where the data's large files are parsed in pieces (``ml.data.encoded_cache.encode_file``;
            the stage's ``compute`` executor); the result is the same.
    """

    seed: int
    device: str = "cpu"
    progress: bool = False
    executor: Executor = LOCAL


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
