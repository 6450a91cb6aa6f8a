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
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, TypedDict

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from ml.base.progress import ProgressBar, counted
from ml.data.batch_files import iter_games, read_records, scan_batches
from ml.game.registry import GameSpec
from ml.judge.deals import FirstPlaces, duplicate_deal_outcomes, duplicate_deals, returns_of
from ml.judge.stats import (
    SPRT,
    ReturnSPRT,
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
    from ml.config.params import GateParams, TrainParams


class GateError(ValueError):
    """The gate's input is not what it needs (the message names the folder and what it found)."""


class _PodArgs(TypedDict):
    """The pod settings :func:`run_gate` passes to every :func:`duplicate_deal_outcomes`."""

    game: GameSpec
    num_envs: int
    executor: Executor


def batch_quality(batch: Path) -> dict:
    """Data-quality figures of a PPO batch file.

    Returns:
        ``games``, ``decisions``, ``action_entropy_bits`` (Shannon entropy of the macro
        action distribution, bits; OpenSpiel games: of the moves by ``action.raw``), ``action_counts``, and mean/std/min/max of ``reward``
        (per decision) and ``episode_return`` (per game).
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

    def summary(xs: list[float]) -> dict:
        if not xs:
            return {"mean": None, "std": None, "min": None, "max": None}
        a = np.asarray(xs)
        return {"mean": float(a.mean()), "std": float(a.std()), "min": float(a.min()), "max": float(a.max())}

    return {
        "games": games,
        "decisions": total,
        "action_entropy_bits": entropy,
        "action_counts": dict(sorted(actions.items())),
        "reward": summary(rewards),
        "episode_return": summary(returns),
    }


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


def _first_places(firsts: FirstPlaces, confidence: float) -> dict[str, Any]:
    """The first-place figures of a return test's deals (reported beside the mean return)."""
    t = firsts.tally
    low, high = t.interval(confidence)
    return {
        "games": t.trials,
        "wins": t.successes,
        "draws": firsts.draws,
        "win_rate": t.rate,
        "win_rate_low": low,
        "win_rate_high": high,
    }


def verdict(
    strength: dict, holdout: dict, student: dict, batch: dict, gated: bool = True, nash_conv: dict | None = None
) -> dict:
    """Combine the checks into the gate's verdict and figures.

    Args:
        strength: ``sequential_test`` result of the PPO agent against heuristic teachers (a),
            or, in a zero-sum game, ``sequential_mean_test``'s with the same deals' first-place
            figures (``games``, ``wins``, ``win_rate``, ``win_rate_low``/``high``).
        holdout: ``mcnemar_regression`` result plus ``accuracy_current``/``accuracy_candidate`` (b).
        student: ``student_non_inferiority`` result (candidate student vs current student), or
            ``return_non_inferiority``'s with the first-place figures.
        batch: ``batch_quality`` figures (c, logged).
        gated: when False the figures are reported but the batch is accepted whatever they say
            (``gate/reasons`` then lists what would have rejected it).
        nash_conv: with ``gate.decide_by: nash_conv``, ``current`` and ``candidate`` (the two
            students' exact NashConv) and ``tolerance``; then only this check and an empty batch
            decide, and the other checks' failures are reported in ``gate/not_deciding``.

    Returns:
        ``gate/…`` metrics including ``gate/accepted`` (bool), ``gate/reasons`` (list of
        str), ``gate/failed`` (names of failed checks: strength, holdout, student, nash_conv,
        empty) and ``gate/not_deciding`` (reasons of failed checks that do not decide).
    """
    reasons: dict[str, str] = {}
    by_return = "mean_return" in strength
    if strength["decision"] != "H1":
        if by_return:
            how = (
                "the SPRT on mean return accepted H0 (par)"
                if strength["decided_early"]
                else "the SPRT on mean return reached max games undecided"
            )
            reasons["strength"] = (
                f"strength: {how}, LLR {strength['llr']:.2f} after {strength['deals']} deals ({strength['played']} games), "
                f"mean return {strength['mean_return']:+.3f} [{strength['return_low']:+.3f}, {strength['return_high']:+.3f}] chips per game"
            )
        else:
            how = "the SPRT accepted H0 (parity)" if strength["decided_early"] else "the SPRT reached max games undecided"
            reasons["strength"] = (
                f"strength: {how}, LLR {strength['llr']:.2f} after {strength['games']} games, win rate {strength['win_rate']:.3f}"
            )
    if holdout["regression"]:
        reasons["holdout"] = (
            f"holdout accuracy drop {holdout['drop']:.4f} is a regression (McNemar p = {holdout['p_value']:.3g})"
        )
    if student["regression"] and "mean_return" in student:
        reasons["student"] = (
            f"the student trained with the batch falls back: mean return {student['mean_return']:+.3f} "
            f"[{student['return_low']:+.3f}, {student['return_high']:+.3f}] chips per game over {student['deals']} deals "
            f"against the current student, the SPRT accepted {student['par'] - student['margin']:+.3f} (par minus the margin)"
        )
    elif student["regression"]:
        reasons["student"] = (
            f"the student trained with the batch falls back: win rate {student['win_rate']:.3f} [{student['win_rate_low']:.3f}, {student['win_rate_high']:.3f}] "
            f"over {student['games']} decisive games, the SPRT accepted {student['parity'] - student['margin']:.3f} (parity {student['parity']:.3f} minus the margin)"
        )
    if nash_conv is not None and nash_conv["candidate"] > nash_conv["current"] + nash_conv["tolerance"]:
        reasons["nash_conv"] = (
            f"NashConv: the student trained with the batch has {nash_conv['candidate']:.4f}, the current one "
            f"{nash_conv['current']:.4f}; the rise exceeds the tolerance {nash_conv['tolerance']:g}"
        )
    if batch["games"] == 0:
        reasons["empty"] = "the batch holds no games"
    deciding = {"nash_conv", "empty"} if nash_conv is not None else {"strength", "holdout", "student", "empty"}
    deciding_reasons = [r for k, r in reasons.items() if k in deciding]
    out = {
        "gate/accepted": not deciding_reasons or not gated,
        "gate/gated": gated,
        "gate/reasons": deciding_reasons,
        "gate/failed": list(reasons),
        "gate/not_deciding": [r for k, r in reasons.items() if k not in deciding],
        "gate/eval_games": strength["games"],
        "gate/wins": strength["wins"],
        "gate/win_rate": strength["win_rate"],
        "gate/win_rate_low": strength["win_rate_low"],
        "gate/win_rate_high": strength["win_rate_high"],
        "gate/sprt_llr": strength["llr"],
        "gate/sprt_decision": strength["decision"],
        "gate/sprt_decided_early": strength["decided_early"],
        "gate/sprt_bounds": [strength["llr_lower"], strength["llr_upper"]],
        "gate/holdout_accuracy_current": holdout["accuracy_current"],
        "gate/holdout_accuracy_candidate": holdout["accuracy_candidate"],
        "gate/holdout_accuracy_drop": holdout["drop"],
        "gate/holdout_mcnemar_p": holdout["p_value"],
        "gate/student_win_rate": student["win_rate"],
        "gate/student_win_rate_low": student["win_rate_low"],
        "gate/student_win_rate_high": student["win_rate_high"],
        "gate/student_games": student["games"],
        "gate/student_draws": student["draws"],
        "gate/student_sprt_llr": student["llr"],
        "gate/student_sprt_bounds": [student["llr_lower"], student["llr_upper"]],
        "gate/student_sprt_decided_early": student["decided_early"],
        "gate/batch": batch,
    }
    if by_return:
        out.update({
            "gate/mean_return": strength["mean_return"], "gate/return_low": strength["return_low"],
            "gate/return_high": strength["return_high"], "gate/eval_deals": strength["deals"],
            "gate/student_mean_return": student["mean_return"], "gate/student_return_low": student["return_low"],
            "gate/student_return_high": student["return_high"], "gate/student_deals": student["deals"],
        })  # fmt: skip
    if nash_conv is not None:
        out.update({"gate/nash_conv_current": nash_conv["current"], "gate/nash_conv_candidate": nash_conv["candidate"]})
    return out


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
    def from_metrics(cls, metrics: dict[str, Any]) -> GateVerdict:
        """The verdict in ``metrics`` (``metrics/gate.json``).

        Raises:
            pydantic.ValidationError: a field the gate always writes is missing or mistyped.
        """
        fields = {k.removeprefix("gate/"): v for k, v in metrics.items() if k.startswith("gate/")}
        return cls.model_validate({k: v for k, v in fields.items() if k in cls.model_fields})


def run_gate(
    model: Path,
    student: Path,
    candidate_dir: Path,
    cfg: GateParams,
    train: TrainParams,
    game: GameSpec,
    *,
    teacher_dir: Path,
    forge_dir: Path | None,
    pool_dir: Path,
    num_envs: int,
    seed: int,
    train_seed: int,
    device: str = "cpu",
    progress: bool = False,
    on_deal: Callable[[int, dict[str, float]], None] | None = None,
    executor: Executor = LOCAL,
    cache_dir: Path | None = None,
    record: dict[str, Any] | None = None,
) -> tuple[PolicyNet, dict[str, Any]]:
    """The whole gate: checks (a) to (d) of the module docstring, then the verdict.

    Args:
        model: the PPO agent's checkpoint.
        student: the current student's checkpoint (trained without the candidate batch).
        candidate_dir: folder holding the candidate PPO batch.
        cfg: the ``gate`` section of params (``ml.config.params.GateParams``).
        train: the ``train`` section; the candidate student is trained like the current one
            (``ml.learn.supervised.build_and_train``) with ``candidate_dir`` added to the pool.
        game: the game (``ml.game.registry.make_game``): ``num_players`` seats per pod (parity
            is ``1 / num_players``), the commander's ``max_turns`` cap.
        teacher_dir: folder of teacher batches (holds the holdout).
        forge_dir: folder of imported Forge files (``data/forge``), or None.
        pool_dir: folder of accepted PPO batches.
        num_envs: games played at once (batched).
        seed: the gate's seed (``Params.stage_seed("gate")``; ``seed + 1`` for check (c)).
        train_seed: the training seed (``Params.stage_seed("train")``, as the current student).
        device: torch device of the training.
        progress: show progress bars.
        on_deal: the SPRT's path, deal by deal (``ml.judge.stats.sequential_test``).
        executor: where the pods of (a) and (c) are played (``ml.runtime.compute``; the figures are the same).
        cache_dir: folder of the encoded-batch cache (``ml.data.encoded_cache.EncodedCache``), or None.
        record: if given, filled with the candidate student's training record
            (``ml.learn.supervised.build_and_train``): its checkpoint metadata, so that the next
            generation's train stage can take it instead of training again.

    Returns:
        ``(candidate_student, metrics)``: the student trained with the batch, and the
        ``gate/…`` metrics of ``verdict`` plus ``gate/strength_test`` (``first_place`` or
        ``mean_return``, :func:`strength_test`), ``gate/episodes`` (games of both checks' pods),
        ``gate/candidate_batch`` (file name) and ``gate/candidate_sampled_share`` (the
        candidate student's sampled source shares).

    Raises:
        GateError: ``candidate_dir`` does not hold exactly one PPO batch (nothing read else);
            ``gate.strength_test: mean_return`` in a game that is not zero-sum; ``gate.decide_by:
            nash_conv`` in a game whose exact NashConv is refused (``ml.judge.nashconv.nash_conv_refusal``).
        ml.model.policy.CheckpointError: a checkpoint that cannot be read.
        ml.data.batch_files.RecordError: a malformed batch line.
        ml.runtime.compute.ComputeError: the Ray cluster was lost mid-stage.
    """
    test = strength_test(cfg, game)
    if cfg.decide_by == "nash_conv":
        from ml.judge.nashconv import nash_conv_refusal  # lazy: open_spiel, never needed by the commander

        refusal = nash_conv_refusal(game)
        if refusal is not None:
            raise GateError(f"gate.decide_by: nash_conv: {refusal}")
    batches = scan_batches(candidate_dir, sources=("ppo",))
    if len(batches) != 1:
        raise GateError(f"{candidate_dir}: expected exactly one PPO batch, found {len(batches)}")
    agent, _ = load_policy(model)
    current, _ = load_policy(student)
    pods: _PodArgs = {"game": game, "num_envs": num_envs, "executor": executor}
    pod_size = game.num_players
    # progress bars (lines when stderr is no terminal) count the deals the test takes, its last one included
    shown = ProgressBar(total=-(-cfg.max_games // pod_size), desc="gate: strength", unit="deal", disable=not progress)
    if test == "mean_return":
        firsts = FirstPlaces()
        deals = duplicate_deals(Controller("net", agent), Controller(cfg.opponent), seed=seed, **pods)
        strength = sequential_mean_test(
            returns_of(counted(deals, shown), firsts), ReturnSPRT(game.par_return, game.par_return + cfg.target_return, cfg.alpha, cfg.beta),
            *_deal_budget(cfg.min_games, cfg.max_games, pod_size), cfg.confidence, on_deal,
        )  # fmt: skip
        strength = {**strength, **_first_places(firsts, cfg.confidence)}
    else:
        sprt = SPRT(1.0 / pod_size, cfg.target_win_rate, cfg.alpha, cfg.beta)
        deals_firsts = duplicate_deal_outcomes(Controller("net", agent), Controller(cfg.opponent), seed=seed, **pods)
        strength = sequential_test(counted(deals_firsts, shown), sprt, cfg.min_games, cfg.max_games, cfg.confidence, on_deal)
    shown.finish(stop_reason(strength, cfg.max_games))  # a bar stopped at 7% says the test decided
    candidate, train_metrics, holdout = build_and_train(
        train, game, TrainingData(teacher_dir, (pool_dir, candidate_dir), forge_dir, cache_dir), RunSettings(train_seed, device, progress),
        record=record,
    )  # fmt: skip
    correct_current = holdout.correct(predict(current, holdout))  # a partial label: any allowed action is right
    correct_candidate = holdout.correct(predict(candidate, holdout))
    paired = mcnemar_regression(correct_current, correct_candidate, cfg.max_accuracy_drop, cfg.alpha)
    paired.update(accuracy_current=float(correct_current.mean()), accuracy_candidate=float(correct_candidate.mean()))
    n_deals = max(1, -(-cfg.student_games // pod_size))
    shown_deals = ProgressBar(total=n_deals, desc="gate: student", unit="deal", disable=not progress)
    students = (Controller("net", candidate, greedy=True), Controller("net", current, greedy=True))
    if test == "mean_return":
        firsts = FirstPlaces()
        fewest, most = _deal_budget(cfg.student_min_games, cfg.student_games, pod_size)
        non_inferior = return_non_inferiority(
            returns_of(counted(duplicate_deals(*students, seed=seed + 1, **pods), shown_deals), firsts), game.par_return,
            cfg.student_margin_return, alpha=cfg.alpha, beta=cfg.beta, confidence=cfg.confidence,
            min_deals=fewest, max_deals=most,
        )  # fmt: skip
        non_inferior = {**non_inferior, **_first_places(firsts, cfg.confidence)}
    else:
        non_inferior = student_non_inferiority(
            counted(duplicate_deal_outcomes(*students, seed=seed + 1, **pods), shown_deals), pod_size, cfg.student_margin,
            alpha=cfg.alpha, beta=cfg.beta, min_games=cfg.student_min_games, max_games=cfg.student_games, confidence=cfg.confidence,
        )  # fmt: skip
    shown_deals.finish(stop_reason(non_inferior, cfg.student_games))
    exact = None
    if cfg.decide_by == "nash_conv":
        from ml.judge.nashconv import nash_conv

        exact = {
            "current": nash_conv(current, game),
            "candidate": nash_conv(candidate, game),
            "tolerance": cfg.nash_conv_tolerance,
        }
    metrics = verdict(strength, paired, non_inferior, batch_quality(batches[0]), gated=cfg.gated, nash_conv=exact)
    metrics["gate/strength_test"] = test
    metrics["gate/episodes"] = strength["played"] + non_inferior["played"]
    metrics["gate/candidate_batch"] = batches[0].name
    metrics["gate/candidate_sampled_share"] = train_metrics["train/sampled_share"]
    return candidate, metrics
