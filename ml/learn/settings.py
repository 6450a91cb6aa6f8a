"""What a training run takes beside its params section: ``RunSettings``."""

from __future__ import annotations

from dataclasses import dataclass


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
