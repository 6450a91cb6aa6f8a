"""``ml.play.collect``'s opponent draws."""

from __future__ import annotations

import numpy as np
import pytest

from ml.config.sections import OPPONENT_KINDS
from ml.play.collect import _opponent_picker


@pytest.mark.parametrize(
    "mix",
    [
        {"teacher": 0.6, "frozen": 0.2, "self": 0.2},
        {"teacher": 1.0},
        {"random": 0.1, "self": 0.7, "frozen": 0.3, "teacher": 0.0},
    ],
)
def test_opponent_draws_are_numpys_weighted_choice(mix):
    frozen = ["gen000", "gen001", "gen002"]
    kinds = [k for k in OPPONENT_KINDS if mix.get(k, 0) > 0]  # the order the picker lays the weights out in
    weights = np.asarray([mix[k] for k in kinds], np.float64)
    for seed in range(5):
        pick = _opponent_picker(mix, frozen, np.random.default_rng(seed))
        rng = np.random.default_rng(seed)
        expected = []
        for _ in range(3000):
            kind = kinds[rng.choice(len(kinds), p=weights / weights.sum())]
            expected.append(frozen[rng.integers(len(frozen))] if kind == "frozen" else kind)
        got = [pick() for _ in range(3000)]
        assert got == expected
    assert len(set(got)) == sum(len(frozen) if k == "frozen" else 1 for k in kinds)  # every kind (and frozen net) drawn
