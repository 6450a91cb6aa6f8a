"""Quality gate: may a candidate PPO batch join the training data?

The verdict rests on two checks, each on fresh data, plus logged data-quality figures:

(a) **Strength.** The PPO agent plays fresh pods (seeds never used by self-play or
    export) against ``pod_size - 1`` heuristic teachers, in seat-rotated duplicate deals
    (each deal replayed with the agent in every seat). An SPRT on its first-place rate,
    H0 parity (1/pod size) against H1 ``target_win_rate``, stops as soon as the outcome is
    decided (``ml.judge.stats.SPRT``, ``ml.judge.stats.sequential_test``: the deal is the unit, Wald's
    LLR on the Rao-Scott effective counts); it must accept H1. One evaluation, never the
    best of many; the 95% interval by deal is reported with it.
(b) **No imitation regression.** A student trained with the candidate batch and the
    current student (same seed, same data otherwise) are compared on the same
    teacher-holdout decisions by an exact McNemar test with a margin
    (``ml.judge.stats.mcnemar_regression``).
(c) **Student non-inferiority.** The student trained with the batch plays the current
    student in seat-rotated duplicate deals (1 vs 3); a sequential non-inferiority test by
    deal (``ml.judge.stats.student_non_inferiority``) rejects it when it is worse by the margin
    (first-place share among decisive pods at parity minus ``student_margin``).
In a two-player zero-sum game (``GameSpec.zero_sum``; ``gate.strength_test``) (a) and (c) are
judged in the game's own currency: (a) is Wald's SPRT on the agent's mean return by deal
(``ml.judge.stats.ReturnSPRT``, H0 par return against H1 par + ``target_return`` chips) and (c)
a sequential non-inferiority test on the candidate student's mean return against the
current student (``ml.judge.stats.return_non_inferiority``, margin ``student_margin_return``
chips); the first-place figures of the same deals are reported beside them. With
``gate.decide_by: nash_conv`` (games small enough for an exact tree walk,
``ml.judge.nashconv.nash_conv_refusal``) the candidate student's exact NashConv decides: it must
not exceed the current student's by more than ``nash_conv_tolerance``; (a)-(c) are
measured and reported, not deciding.
(d) **Data quality** (logged, not gating): entropy of the batch's macro-action
    distribution, and the distributions of ``reward`` and ``episode_return``.

The statistical tests live in ``ml.judge.stats`` (with their references: Wald's SPRT, McNemar,
Wilson, Rao-Scott); :func:`run_gate` runs the whole gate.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Generic, Literal, TypeVar, cast

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from ml.base.progress import ProgressBar, counted
from ml.data.batch_files import iter_games, read_records, scan_batches
from ml.game.registry import GameSpec
from ml.judge.deals import FirstPlaces, duplicate_deal_outcomes, duplicate_deals, returns_of
from ml.judge.stats import (
    SPRT,
    FirstPlaceFigures,
    McNemarResult,
    MeanTestResult,
    NonInferiority,
    ReturnNonInferiority,
    ReturnSPRT,
    SequentialResult,
    mcnemar_regression,
    return_non_inferiority,
    sequential_mean_test,
    sequential_test,
    stop_reason,
    student_non_inferiority,
)
from ml.learn.settings import RunSettings
from ml.learn.supervised import TrainingData, build_and_train, predict
from ml.model.policy import PolicyNet, load_policy
from ml.play.rollout import Controller
from ml.runtime.compute import LOCAL, Executor

if TYPE_CHECKING:
    from ml.config.sections import GateParams, TrainParams


class GateError(ValueError):
    """The gate's input is not what it needs (the message names the folder and what it found)."""


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


def strength_test(cfg: GateParams, game: GameSpec) -> Literal["first_place", "mean_return"]:
    """What the gate's strength and student checks test in ``game`` (``gate.strength_test``;
    ``auto``: ``mean_return`` for a two-player zero-sum game, ``GameSpec.zero_sum``).

    Raises:
        GateError: ``mean_return`` asked of a game that is not zero-sum (its returns have no par).
    """
    if cfg.strength_test == "auto":
        return "mean_return" if game.zero_sum else "first_place"
    if cfg.strength_test == "mean_return" and not game.zero_sum:
        raise GateError(f"gate.strength_test: mean_return needs a two-player zero-sum game; {game.name} is not one")
    return cfg.strength_test


def _deal_budget(min_games: int, max_games: int, pod_size: int) -> tuple[int, int]:
    """``(min_deals, max_deals)`` of a return test from a budget in games: whole deals of ``pod_size``
    games, at least 2 (a variance needs two deals), the minimum never above the maximum."""
    most = max(2, max_games // pod_size)
    return min(max(2, -(-min_games // pod_size)), most), most


T = TypeVar("T", MeanTestResult, ReturnNonInferiority)


@dataclass(frozen=True)
class InChips(Generic[T]):
    """A return test (zero-sum game) and the first places of the same deals, reported beside it.

    Attributes:
        test: the return test (:class:`ml.judge.stats.MeanTestResult` for the strength check,
            :class:`ml.judge.stats.ReturnNonInferiority` for the student check).
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


def _sequential(result: Strength | Student) -> SequentialResult | MeanTestResult:
    """The sequential test of a check (on first places or on the mean return)."""
    return result.test if isinstance(result, InChips) else result


def _student_test(student: Student) -> NonInferiority | ReturnNonInferiority:
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
        firsts, test = _firsts(self.strength), _sequential(self.strength)
        s_firsts, s_test = _firsts(self.student), _sequential(self.student)
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
            out.update({"gate/nash_conv_current": self.nash_conv.current, "gate/nash_conv_candidate": self.nash_conv.candidate})
        return out


def _strength_reason(strength: Strength) -> str:
    if isinstance(strength, InChips):
        s = strength.test
        how = (
            "the SPRT on mean return accepted H0 (par)" if s.decided_early else "the SPRT on mean return reached max games undecided"
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
    if _sequential(strength).decision != "H1":
        reasons["strength"] = _strength_reason(strength)
    if holdout.regression:
        reasons["holdout"] = f"holdout accuracy drop {holdout.drop:.4f} is a regression (McNemar p = {holdout.p_value:.3g})"
    if _student_test(student).regression:
        reasons["student"] = _student_reason(student)
    if nash_conv is not None and nash_conv.candidate > nash_conv.current + nash_conv.tolerance:
        reasons["nash_conv"] = (
            f"NashConv: the student trained with the batch has {nash_conv.candidate:.4f}, the current one "
            f"{nash_conv.current:.4f}; the rise exceeds the tolerance {nash_conv.tolerance:g}"
        )
    if batch.games == 0:
        reasons["empty"] = "the batch holds no games"
    deciding = {"nash_conv", "empty"} if nash_conv is not None else {"strength", "holdout", "student", "empty"}
    deciding_reasons = tuple(r for k, r in reasons.items() if k in deciding)
    return Verdict(
        accepted=not deciding_reasons or not gated, gated=gated, reasons=deciding_reasons, failed=tuple(reasons),
        not_deciding=tuple(r for k, r in reasons.items() if k not in deciding), strength=strength, holdout=holdout,
        student=student, batch=batch, nash_conv=nash_conv,
    )  # fmt: skip


@dataclass(frozen=True)
class GateReport:
    """What :func:`run_gate` found: the verdict and how it was reached.

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
        return _sequential(self.verdict.strength).played + _sequential(self.verdict.student).played

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


@dataclass(frozen=True)
class GateInputs:
    """What :func:`run_gate` reads, and the run's seeds and settings.

    Attributes:
        model: the PPO agent's checkpoint.
        student: the current student's checkpoint (trained without the candidate batch).
        candidate_dir: folder holding the candidate PPO batch.
        teacher_dir: folder of teacher batches (holds the holdout).
        forge_dir: folder of imported Forge files (``data/forge``), or None.
        pool_dir: folder of accepted PPO batches.
        cache_dir: folder of the encoded-batch cache (``ml.data.encoded_cache.EncodedCache``), or None.
        num_envs: games played at once (batched).
        seed: the gate's seed (``Params.stage_seed("gate")``; ``seed + 1`` for check (c)).
        train_seed: the training seed of the current student (its checkpoint's ``train_seed``).
        device: torch device of the training.
    """

    model: Path
    student: Path
    candidate_dir: Path
    teacher_dir: Path
    forge_dir: Path | None
    pool_dir: Path
    cache_dir: Path | None = None
    num_envs: int = 1
    seed: int = 0
    train_seed: int = 0
    device: str = "cpu"


def run_gate(
    inputs: GateInputs,
    cfg: GateParams,
    train: TrainParams,
    game: GameSpec,
    *,
    progress: bool = False,
    on_deal: Callable[[int, dict[str, float]], None] | None = None,
    executor: Executor = LOCAL,
) -> tuple[PolicyNet, GateReport]:
    """The whole gate: checks (a) to (d) of the module docstring, then the verdict.

    Args:
        inputs: the checkpoints and folders read, the seeds and settings (:class:`GateInputs`).
        cfg: the ``gate`` section of params (``ml.config.params.GateParams``).
        train: the ``train`` section; the candidate student is trained like the current one
            (``ml.learn.supervised.build_and_train``) with ``inputs.candidate_dir`` added to the pool.
        game: the game (``ml.game.registry.make_game``): ``num_players`` seats per pod (parity
            is ``1 / num_players``), the commander's ``max_turns`` cap.
        progress: show progress bars.
        on_deal: the SPRT's path, deal by deal (``ml.judge.stats.sequential_test``).
        executor: where the pods of (a) and (c) are played (``ml.runtime.compute``; the figures are the same).

    Returns:
        ``(candidate_student, report)``: the student trained with the batch, and the
        :class:`GateReport` (its ``metrics()`` are ``metrics/gate.json``).

    Raises:
        GateError: ``inputs.candidate_dir`` does not hold exactly one PPO batch (nothing read else);
            ``gate.strength_test: mean_return`` in a game that is not zero-sum; ``gate.decide_by:
            nash_conv`` in a game whose exact NashConv is refused (``ml.judge.nashconv.nash_conv_refusal``).
        ml.model.policy.CheckpointError: a checkpoint that cannot be read.
        ml.data.batch_files.RecordError: a malformed batch line.
        ml.runtime.compute.ComputeError: the Ray cluster was lost mid-stage.
    """
    test = strength_test(cfg, game)
    if cfg.decide_by == "nash_conv":
        from ml.game.checks import nash_conv_refusal  # lazy: open_spiel, never needed by the commander

        refusal = nash_conv_refusal(game)
        if refusal is not None:
            raise GateError(f"gate.decide_by: nash_conv: {refusal}")
    batches = scan_batches(inputs.candidate_dir, sources=("ppo",))
    if len(batches) != 1:
        raise GateError(f"{inputs.candidate_dir}: expected exactly one PPO batch, found {len(batches)}")
    agent, _ = load_policy(inputs.model)
    current, _ = load_policy(inputs.student)
    seed, num_envs, pod_size = inputs.seed, inputs.num_envs, game.num_players
    # progress bars (lines when stderr is no terminal) count the deals the test takes, its last one included
    shown = ProgressBar(total=-(-cfg.max_games // pod_size), desc="gate: strength", unit="deal", disable=not progress)
    strength: Strength
    if test == "mean_return":
        firsts = FirstPlaces()
        deals = duplicate_deals(Controller("net", agent), Controller(cfg.opponent), game=game, num_envs=num_envs, seed=seed, executor=executor)
        by_return = sequential_mean_test(
            returns_of(counted(deals, shown), firsts), ReturnSPRT(game.par_return, game.par_return + cfg.target_return, cfg.alpha, cfg.beta),
            *_deal_budget(cfg.min_games, cfg.max_games, pod_size), cfg.confidence, on_deal,
        )  # fmt: skip
        strength = InChips(by_return, firsts.figures(cfg.confidence))
    else:
        sprt = SPRT(1.0 / pod_size, cfg.target_win_rate, cfg.alpha, cfg.beta)
        deals_firsts = duplicate_deal_outcomes(
            Controller("net", agent), Controller(cfg.opponent), game=game, num_envs=num_envs, seed=seed, executor=executor
        )
        strength = sequential_test(counted(deals_firsts, shown), sprt, cfg.min_games, cfg.max_games, cfg.confidence, on_deal)
    shown.finish(stop_reason(_sequential(strength), cfg.max_games))  # a bar stopped at 7% says the test decided
    record: dict[str, Any] = {}
    candidate, train_metrics, holdout = build_and_train(
        train, game, TrainingData(inputs.teacher_dir, (inputs.pool_dir, inputs.candidate_dir), inputs.forge_dir, inputs.cache_dir),
        RunSettings(inputs.train_seed, inputs.device, progress), record=record,
    )  # fmt: skip
    correct_current = holdout.correct(predict(current, holdout))  # a partial label: any allowed action is right
    correct_candidate = holdout.correct(predict(candidate, holdout))
    paired = mcnemar_regression(correct_current, correct_candidate, cfg.max_accuracy_drop, cfg.alpha)
    n_deals = max(1, -(-cfg.student_games // pod_size))
    shown_deals = ProgressBar(total=n_deals, desc="gate: student", unit="deal", disable=not progress)
    students = (Controller("net", candidate, greedy=True), Controller("net", current, greedy=True))
    non_inferior: Student
    if test == "mean_return":
        firsts = FirstPlaces()
        fewest, most = _deal_budget(cfg.student_min_games, cfg.student_games, pod_size)
        student_deals = duplicate_deals(*students, game=game, num_envs=num_envs, seed=seed + 1, executor=executor)
        by_return_student = return_non_inferiority(
            returns_of(counted(student_deals, shown_deals), firsts), game.par_return, cfg.student_margin_return,
            alpha=cfg.alpha, beta=cfg.beta, confidence=cfg.confidence, min_deals=fewest, max_deals=most,
        )  # fmt: skip
        non_inferior = InChips(by_return_student, firsts.figures(cfg.confidence))
    else:
        student_firsts = duplicate_deal_outcomes(*students, game=game, num_envs=num_envs, seed=seed + 1, executor=executor)
        non_inferior = student_non_inferiority(
            counted(student_firsts, shown_deals), pod_size, cfg.student_margin, alpha=cfg.alpha, beta=cfg.beta,
            min_games=cfg.student_min_games, max_games=cfg.student_games, confidence=cfg.confidence,
        )  # fmt: skip
    shown_deals.finish(stop_reason(_student_test(non_inferior), cfg.student_games))
    exact = None
    if cfg.decide_by == "nash_conv":
        from ml.judge.nashconv import nash_conv

        exact = NashConvCheck(nash_conv(current, game), nash_conv(candidate, game), cfg.nash_conv_tolerance)
    judged = verdict(strength, paired, non_inferior, batch_quality(batches[0]), gated=cfg.gated, nash_conv=exact)
    share = cast("Mapping[str, float]", train_metrics["train/sampled_share"])  # ml.learn.supervised.build_and_train
    report = GateReport(judged, test, batches[0].name, share, record)
    return candidate, report
