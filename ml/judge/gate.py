"""Quality gate: may a candidate PPO batch join the training data?

The verdict rests on two checks, each on fresh data, plus logged data-quality figures:

(a) **Strength.** The PPO agent plays fresh pods (seeds never used by self-play or
    export) against ``pod_size - 1`` heuristic teachers, in seat-rotated duplicate deals
    (each deal replayed with the agent in every seat). An SPRT on its first-place rate,
    H0 parity (1/pod size) against H1 ``target_win_rate``, stops as soon as the outcome is
    decided (``ml.judge.sequential.SPRT``, ``ml.judge.sequential.sequential_test``: the deal is the unit, Wald's
    LLR on the Rao-Scott effective counts); it must accept H1. One evaluation, never the
    best of many; the 95% interval by deal is reported with it.
(b) **No imitation regression.** A student trained with the candidate batch and the
    current student (same seed, same data otherwise) are compared on the same
    teacher-holdout decisions by an exact McNemar test with a margin
    (``ml.judge.stats.mcnemar_regression``).
(c) **Student non-inferiority.** The student trained with the batch plays the current
    student in seat-rotated duplicate deals (1 vs 3); a sequential non-inferiority test by
    deal (``ml.judge.sequential.student_non_inferiority``) rejects it when it is worse by the margin
    (first-place share among decisive pods at parity minus ``student_margin``).
In a two-player zero-sum game (``GameSpec.zero_sum``; ``gate.strength_test``) (a) and (c) are
judged in the game's own currency: (a) is Wald's SPRT on the agent's mean return by deal
(``ml.judge.mean_return.ReturnSPRT``, H0 par return against H1 par + ``target_return`` chips) and (c)
a sequential non-inferiority test on the candidate student's mean return against the
current student (``ml.judge.mean_return.return_non_inferiority``, margin ``student_margin_return``
chips); the first-place figures of the same deals are reported beside them. With
``gate.decide_by: nash_conv`` (games small enough for an exact tree walk,
``ml.judge.nashconv.nash_conv_refusal``) the candidate student's exact NashConv decides: it must
not exceed the current student's by more than ``nash_conv_tolerance``; (a)-(c) are
measured and reported, not deciding.
(d) **Data quality** (logged, not gating): entropy of the batch's macro-action
    distribution, and the distributions of ``reward`` and ``episode_return``.

The statistical tests live in ``ml.judge.stats`` (with their references: Wald's SPRT, McNemar,
Wilson, Rao-Scott), the verdict that combines them in ``ml.judge.verdict``; :func:`run_gate`
runs the whole gate.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, cast

from ml.base.progress import ProgressBar, counted
from ml.data.batch_files import scan_batches
from ml.game.protocol import GameSpec
from ml.judge.deals import FirstPlaces, duplicate_deal_outcomes, duplicate_deals, returns_of
from ml.judge.mean_return import ReturnSPRT, return_non_inferiority, sequential_mean_test
from ml.judge.sequential import SPRT, sequential_test, stop_reason, student_non_inferiority
from ml.judge.stats import mcnemar_regression
from ml.judge.verdict import (
    GateReport,
    InChips,
    NashConvCheck,
    Strength,
    Student,
    batch_quality,
    sequential_of,
    student_test_of,
    verdict,
)
from ml.learn.reuse import TrainingData
from ml.learn.settings import RunSettings
from ml.learn.supervised import build_and_train, predict
from ml.model.policy import PolicyNet, load_policy
from ml.play.controller import Controller
from ml.runtime.executor import LOCAL, Executor

if TYPE_CHECKING:
    from ml.config.sections import GateParams, TrainParams


class GateError(ValueError):
    """The gate's input is not what it needs (the message names the folder and what it found)."""


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
            (``ml.learn.supervised.build_and_train``) with ``inputs.candidate_dir`` added to the pool
            (under ``train.warm_start``: from the current student's weights).
        game: the game (``ml.game.registry.make_game``): ``num_players`` seats per pod (parity
            is ``1 / num_players``), the commander's ``max_turns`` cap.
        progress: show progress bars.
        on_deal: the SPRT's path, deal by deal (``ml.judge.sequential.sequential_test``).
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
        ml.runtime.executor.ComputeError: the Ray cluster was lost mid-stage.
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
        deals = duplicate_deals(
            Controller("net", agent), Controller(cfg.opponent), game=game, num_envs=num_envs, seed=seed, executor=executor
        )
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
    shown.finish(stop_reason(sequential_of(strength), cfg.max_games))  # a bar stopped at 7% says the test decided
    record: dict[str, Any] = {}
    candidate, train_metrics, holdout = build_and_train(
        train, game, TrainingData(
            inputs.teacher_dir, (inputs.pool_dir, inputs.candidate_dir), inputs.forge_dir, inputs.cache_dir, inputs.student
        ),
        RunSettings(inputs.train_seed, inputs.device, progress, executor), record=record,
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
    shown_deals.finish(stop_reason(student_test_of(non_inferior), cfg.student_games))
    exact = None
    if cfg.decide_by == "nash_conv":
        from ml.judge.nashconv import nash_conv

        exact = NashConvCheck(nash_conv(current, game), nash_conv(candidate, game), cfg.nash_conv_tolerance)
    judged = verdict(strength, paired, non_inferior, batch_quality(batches[0]), gated=cfg.gated, nash_conv=exact)
    share = cast("Mapping[str, float]", train_metrics["train/sampled_share"])  # ml.learn.supervised.build_and_train
    report = GateReport(judged, test, batches[0].name, share, record)
    return candidate, report
