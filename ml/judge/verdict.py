"""The gate's verdict: its checks' results combined, the figures written, what the driver reads back.

:func:`verdict` combines the checks ``ml.judge.gate.run_gate`` runs (their meaning is in that
module's docstring) into a :class:`Verdict`; :class:`GateReport` adds how it was reached and
gives ``metrics/gate.json``; :class:`GateVerdict` is what the driver reads of that file (no
torch here: the driver imports it at every attempt). :func:`batch_quality` gives check (d),
the batch's logged data-quality figures.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Generic, Literal, TypeVar

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from ml.data.batch_files import iter_games, read_records
from ml.judge.mean_return import MeanTestResult, ReturnNonInferiority
from ml.judge.sequential import FirstPlaceFigures, NonInferiority, SequentialResult
from ml.judge.stats import McNemarResult


@dataclass(frozen=True)
class Summary:
    """Mean, standard deviation (``ddof = 0``), minimum and maximum of a figure (None: no values)."""

    mean: float | None
    std: float | None
    min: float | None
    max: float | None


@dataclass(frozen=True)
class BatchQuality:
    """Data-quality figures of a PPO batch file (:func:`batch_quality`; logged, never deciding).

    Attributes:
        games: games in the batch. decisions: decisions in it.
        action_entropy_bits: Shannon entropy of the macro-action distribution (bits; OpenSpiel
            games: of the moves by ``action.raw``).
        action_counts: decisions per macro action, by name.
        reward: :class:`Summary` of ``reward`` per decision (the game's reward units).
        episode_return: :class:`Summary` of ``episode_return`` per game.
    """

    games: int
    decisions: int
    action_entropy_bits: float
    action_counts: dict[str, int]
    reward: Summary
    episode_return: Summary


def batch_quality(batch: Path) -> BatchQuality:
    """Data-quality figures of the PPO batch file ``batch`` (:class:`BatchQuality`).

    Raises:
        ml.data.batch_files.RecordError: a malformed batch line.
    """
    actions: Counter[str] = Counter()
    rewards: list[float] = []
    returns: list[float] = []
    games = 0
    for game in iter_games(read_records(batch)):
        games += 1
        returns.append(float(game[0].episode_return or 0.0))
        for rec in game:
            actions[getattr(rec.action, "macro_action", None) or rec.action.raw or rec.action.type] += 1
            rewards.append(float(rec.reward or 0.0))
    total = sum(actions.values())
    entropy = -sum(c / total * math.log2(c / total) for c in actions.values()) if total else 0.0

    def summary(xs: list[float]) -> Summary:
        if not xs:
            return Summary(None, None, None, None)
        a = np.asarray(xs)
        return Summary(float(a.mean()), float(a.std()), float(a.min()), float(a.max()))

    return BatchQuality(games, total, entropy, dict(sorted(actions.items())), summary(rewards), summary(returns))


T = TypeVar("T", MeanTestResult, ReturnNonInferiority)


@dataclass(frozen=True)
class InChips(Generic[T]):
    """A return test (zero-sum game) and the first places of the same deals, reported beside it.

    Attributes:
        test: the return test (:class:`ml.judge.mean_return.MeanTestResult` for the strength check,
            :class:`ml.judge.mean_return.ReturnNonInferiority` for the student check).
        first_places: the first places of its deals (all games, draws included as trials).
    """

    test: T
    first_places: FirstPlaceFigures


Strength = SequentialResult | InChips[MeanTestResult]
"""Check (a): the SPRT on first places, or, in a zero-sum game, on the mean return."""
Student = NonInferiority | InChips[ReturnNonInferiority]
"""Check (c): the non-inferiority test on first places, or, in a zero-sum game, on the mean return."""


@dataclass(frozen=True)
class NashConvCheck:
    """The deciding check of ``gate.decide_by: nash_conv``.

    Attributes:
        current, candidate: the two students' exact NashConv (``ml.judge.nashconv.nash_conv``;
            the game's utility units).
        tolerance: the rise of the candidate's NashConv over the current one's that is allowed.
    """

    current: float
    candidate: float
    tolerance: float


def _firsts(result: Strength | Student) -> FirstPlaceFigures:
    """The first places of a check: the sequential test's own, or those beside a return test."""
    return result.first_places if isinstance(result, InChips) else result


def sequential_of(result: Strength | Student) -> SequentialResult | MeanTestResult:
    """The sequential test of a check (on first places or on the mean return)."""
    return result.test if isinstance(result, InChips) else result


def student_test_of(student: Student) -> NonInferiority | ReturnNonInferiority:
    """The non-inferiority test of check (c) (on first places or on the mean return)."""
    return student.test if isinstance(student, InChips) else student


@dataclass(frozen=True)
class Verdict:
    """The gate's verdict and the figures of its checks (:func:`verdict`).

    Attributes:
        accepted: whether the batch joins the pool.
        gated: whether the deciding checks decide (``gate.gated``; False: accepted whatever they say).
        reasons: why it was (or, ungated, would have been) rejected: the deciding checks that failed.
        failed: names of the failed checks (strength, holdout, student, nash_conv, empty).
        not_deciding: reasons of the failed checks that do not decide.
        strength, holdout, student, batch, nash_conv: the checks' results, as :func:`verdict` took them.
    """

    accepted: bool
    gated: bool
    reasons: tuple[str, ...]
    failed: tuple[str, ...]
    not_deciding: tuple[str, ...]
    strength: Strength
    holdout: McNemarResult
    student: Student
    batch: BatchQuality
    nash_conv: NashConvCheck | None

    def metrics(self) -> dict[str, object]:
        """The ``gate/…`` metrics of the verdict (``metrics/gate.json``, read back by :meth:`GateVerdict.from_metrics`)."""
        firsts, test = _firsts(self.strength), sequential_of(self.strength)
        s_firsts, s_test = _firsts(self.student), sequential_of(self.student)
        out: dict[str, object] = {
            "gate/accepted": self.accepted,
            "gate/gated": self.gated,
            "gate/reasons": list(self.reasons),
            "gate/failed": list(self.failed),
            "gate/not_deciding": list(self.not_deciding),
            "gate/eval_games": firsts.games,
            "gate/wins": firsts.wins,
            "gate/win_rate": firsts.win_rate,
            "gate/win_rate_low": firsts.win_rate_low,
            "gate/win_rate_high": firsts.win_rate_high,
            "gate/sprt_llr": test.llr,
            "gate/sprt_decision": test.decision,
            "gate/sprt_decided_early": test.decided_early,
            "gate/sprt_bounds": [test.llr_lower, test.llr_upper],
            "gate/holdout_accuracy_current": self.holdout.accuracy_current,
            "gate/holdout_accuracy_candidate": self.holdout.accuracy_candidate,
            "gate/holdout_accuracy_drop": self.holdout.drop,
            "gate/holdout_mcnemar_p": self.holdout.p_value,
            "gate/student_win_rate": s_firsts.win_rate,
            "gate/student_win_rate_low": s_firsts.win_rate_low,
            "gate/student_win_rate_high": s_firsts.win_rate_high,
            "gate/student_games": s_firsts.games,
            "gate/student_draws": s_firsts.draws,
            "gate/student_sprt_llr": s_test.llr,
            "gate/student_sprt_bounds": [s_test.llr_lower, s_test.llr_upper],
            "gate/student_sprt_decided_early": s_test.decided_early,
            "gate/batch": asdict(self.batch),
        }
        if isinstance(self.strength, InChips) and isinstance(self.student, InChips):
            strength, student = self.strength.test, self.student.test
            out.update({
                "gate/mean_return": strength.mean_return, "gate/return_low": strength.return_low,
                "gate/return_high": strength.return_high, "gate/eval_deals": strength.deals,
                "gate/student_mean_return": student.mean_return, "gate/student_return_low": student.return_low,
                "gate/student_return_high": student.return_high, "gate/student_deals": student.deals,
            })  # fmt: skip
        if self.nash_conv is not None:
            out.update(
                {"gate/nash_conv_current": self.nash_conv.current, "gate/nash_conv_candidate": self.nash_conv.candidate}
            )
        return out


def _strength_reason(strength: Strength) -> str:
    if isinstance(strength, InChips):
        s = strength.test
        how = (
            "the SPRT on mean return accepted H0 (par)"
            if s.decided_early
            else "the SPRT on mean return reached max games undecided"
        )
        return (
            f"strength: {how}, LLR {s.llr:.2f} after {s.deals} deals ({s.played} games), "
            f"mean return {s.mean_return:+.3f} [{s.return_low:+.3f}, {s.return_high:+.3f}] chips per game"
        )
    how = "the SPRT accepted H0 (parity)" if strength.decided_early else "the SPRT reached max games undecided"
    return f"strength: {how}, LLR {strength.llr:.2f} after {strength.games} games, win rate {strength.win_rate:.3f}"


def _student_reason(student: Student) -> str:
    if isinstance(student, InChips):
        s = student.test
        return (
            f"the student trained with the batch falls back: mean return {s.mean_return:+.3f} "
            f"[{s.return_low:+.3f}, {s.return_high:+.3f}] chips per game over {s.deals} deals "
            f"against the current student, the SPRT accepted {s.par - s.margin:+.3f} (par minus the margin)"
        )
    return (
        f"the student trained with the batch falls back: win rate {student.win_rate:.3f} [{student.win_rate_low:.3f}, {student.win_rate_high:.3f}] "
        f"over {student.games} decisive games, the SPRT accepted {student.parity - student.margin:.3f} (parity {student.parity:.3f} minus the margin)"
    )


def verdict(
    strength: Strength,
    holdout: McNemarResult,
    student: Student,
    batch: BatchQuality,
    gated: bool = True,
    nash_conv: NashConvCheck | None = None,
) -> Verdict:
    """Combine the checks into the gate's verdict.

    Args:
        strength: check (a), the PPO agent against the opponents: ``sequential_test``'s result,
            or, in a zero-sum game, ``sequential_mean_test``'s with the same deals' first places (:class:`InChips`).
        holdout: check (b), ``mcnemar_regression``'s result.
        student: check (c), the candidate student against the current one: ``student_non_inferiority``'s
            result, or ``return_non_inferiority``'s with the first places (:class:`InChips`).
        batch: ``batch_quality`` figures (d, logged).
        gated: when False the figures are reported but the batch is accepted whatever they say
            (``reasons`` then lists what would have rejected it).
        nash_conv: with ``gate.decide_by: nash_conv``, the two students' exact NashConv; then only
            this check and an empty batch decide, and the other checks' failures are in ``not_deciding``.

    Returns:
        The :class:`Verdict`.
    """
    reasons: dict[str, str] = {}
    if sequential_of(strength).decision != "H1":
        reasons["strength"] = _strength_reason(strength)
    if holdout.regression:
        reasons["holdout"] = f"holdout accuracy drop {holdout.drop:.4f} is a regression (McNemar p = {holdout.p_value:.3g})"
    if student_test_of(student).regression:
        reasons["student"] = _student_reason(student)
    if nash_conv is not None and nash_conv.candidate > nash_conv.current + nash_conv.tolerance:
        reasons["nash_conv"] = (
            f"NashConv: the student trained with the batch has {nash_conv.candidate:.4f}, the current one "
            f"{nash_conv.current:.4f}; the rise exceeds the tolerance {nash_conv.tolerance:g}"
        )
    if batch.games == 0:
        reasons["empty"] = "the batch holds no games"
    deciding = deciding_checks("nash_conv" if nash_conv is not None else "tests")
    deciding_reasons = tuple(r for k, r in reasons.items() if k in deciding)
    return Verdict(
        accepted=not deciding_reasons or not gated, gated=gated, reasons=deciding_reasons, failed=tuple(reasons),
        not_deciding=tuple(r for k, r in reasons.items() if k not in deciding), strength=strength, holdout=holdout,
        student=student, batch=batch, nash_conv=nash_conv,
    )  # fmt: skip


@dataclass(frozen=True)
class GateReport:
    """What ``ml.judge.gate.run_gate`` found: the verdict and how it was reached.

    Attributes:
        verdict: the :class:`Verdict`.
        strength_test: what checks (a) and (c) tested (:func:`strength_test`).
        candidate_batch: file name of the candidate PPO batch.
        sampled_share: the candidate student's sampled share of each data source (fractions).
        candidate_record: the candidate student's training record (``ml.learn.supervised.build_and_train``):
            its checkpoint metadata, so that the next generation's train stage can take it instead of training again.
    """

    verdict: Verdict
    strength_test: Literal["first_place", "mean_return"]
    candidate_batch: str
    sampled_share: Mapping[str, float]
    candidate_record: Mapping[str, object]

    @property
    def episodes(self) -> int:
        """Games played by checks (a) and (c) together."""
        return sequential_of(self.verdict.strength).played + sequential_of(self.verdict.student).played

    def metrics(self) -> dict[str, object]:
        """``metrics/gate.json``: the verdict's ``gate/…`` metrics, then ``gate/strength_test``, ``gate/episodes``,
        ``gate/candidate_batch`` and ``gate/candidate_sampled_share``."""
        return {
            **self.verdict.metrics(),
            "gate/strength_test": self.strength_test,
            "gate/episodes": self.episodes,
            "gate/candidate_batch": self.candidate_batch,
            "gate/candidate_sampled_share": self.sampled_share,
        }


def deciding_checks(decide_by: str) -> frozenset[str]:
    """The checks whose failure rejects a gated batch under ``gate.decide_by`` (``tests`` or
    ``nash_conv``); the others are measured and reported (``Verdict.not_deciding``)."""
    return frozenset({"nash_conv", "empty"} if decide_by == "nash_conv" else {"strength", "holdout", "student", "empty"})


class GateVerdict(BaseModel):
    """What the driver reads of ``metrics/gate.json``: the verdict and its headline figures.

    Built by ``from_metrics`` from the ``gate/…`` keys ``run_gate`` writes (the other keys,
    e.g. the data-quality ones, stay in the metrics file and the ledger).

    Attributes:
        accepted: whether the batch joins the pool.
        reasons: why it was (or, ungated, would have been) rejected.
        failed: names of the failed checks (``strength``, ``holdout``, ``student``, ``nash_conv``, ``empty``).
        win_rate, win_rate_low, win_rate_high: the PPO agent's first-place rate and its 95%
            interval. eval_games: games it took (the SPRT stops early).
        sprt_llr, sprt_decision: the sequential test's log-likelihood ratio and decision.
        holdout_accuracy_current, holdout_accuracy_drop: teacher-holdout accuracy of the
            current student, and how much the candidate student lost on it.
        mean_return, return_low, return_high: in a zero-sum game, the PPO agent's mean return
            (chips per game) and its 95% interval by deal; None otherwise.
    """

    model_config = ConfigDict(frozen=True)

    accepted: bool
    reasons: list[str] = Field(default_factory=list)
    failed: list[str] = Field(default_factory=list)
    win_rate: float
    win_rate_low: float
    win_rate_high: float
    eval_games: int
    sprt_llr: float | None = None
    sprt_decision: str | None = None
    holdout_accuracy_current: float
    holdout_accuracy_drop: float
    mean_return: float | None = None
    return_low: float | None = None
    return_high: float | None = None

    @classmethod
    def from_metrics(cls, metrics: Mapping[str, object]) -> GateVerdict:
        """The verdict in ``metrics`` (``metrics/gate.json``).

        Raises:
            pydantic.ValidationError: a field the gate always writes is missing or mistyped.
        """
        fields = {k.removeprefix("gate/"): v for k, v in metrics.items() if k.startswith("gate/")}
        return cls.model_validate({k: v for k, v in fields.items() if k in cls.model_fields})
