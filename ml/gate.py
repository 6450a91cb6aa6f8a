"""Quality gate: may a candidate PPO batch join the training data?

The verdict rests on two checks, each on fresh data, plus logged data-quality figures:

(a) **Strength.** The PPO agent plays fresh pods (seeds never used by self-play or
    export) against ``pod_size - 1`` heuristic teachers, in seat-rotated duplicate deals
    (each deal replayed with the agent in every seat). An SPRT on its first-place rate,
    H0 parity (1/pod size) against H1 ``target_win_rate``, stops as soon as the outcome is
    decided (``ml.stats.SPRT``, ``ml.stats.sequential_test``: the deal is the unit, Wald's
    LLR on the Rao-Scott effective counts); it must accept H1. One evaluation, never the
    best of many; the 95% interval by deal is reported with it.
(b) **No imitation regression.** A student trained with the candidate batch and the
    current student (same seed, same data otherwise) are compared on the same
    teacher-holdout decisions by an exact McNemar test with a margin
    (``ml.stats.mcnemar_regression``).
(c) **Student non-inferiority.** The student trained with the batch plays the current
    student in seat-rotated duplicate deals (1 vs 3); a sequential non-inferiority test by
    deal (``ml.stats.student_non_inferiority``) rejects it when it is worse by the margin
    (first-place share among decisive pods at parity minus ``student_margin``).
(d) **Data quality** (logged, not gating): entropy of the batch's macro-action
    distribution, and the distributions of ``reward`` and ``episode_return``.

The statistical tests live in ``ml.stats`` (with their references: Wald's SPRT, McNemar,
Wilson, Rao-Scott); :func:`run_gate` runs the whole gate.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypedDict

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from ml.compute import LOCAL, Executor
from ml.deals import duplicate_deal_outcomes
from ml.game.registry import GameSpec
from ml.policy import PolicyNet, load_policy
from ml.progress import ProgressBar, counted
from ml.records import iter_games, read_records, scan_batches
from ml.rollout import Controller
from ml.stats import SPRT, mcnemar_regression, sequential_test, stop_reason, student_non_inferiority
from ml.supervised import build_and_train, predict

if TYPE_CHECKING:
    from ml.params import GateParams, TrainParams


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


def verdict(strength: dict, holdout: dict, student: dict, batch: dict, gated: bool = True) -> dict:
    """Combine the checks into the gate's verdict and figures.

    Args:
        strength: ``sequential_test`` result of the PPO agent against heuristic teachers (a).
        holdout: ``mcnemar_regression`` result plus ``accuracy_current``/``accuracy_candidate`` (b).
        student: ``student_non_inferiority`` result (candidate student vs current student).
        batch: ``batch_quality`` figures (c, logged).
        gated: when False the figures are reported but the batch is accepted whatever they say
            (``gate/reasons`` then lists what would have rejected it).

    Returns:
        ``gate/…`` metrics including ``gate/accepted`` (bool), ``gate/reasons`` (list of
        str) and ``gate/failed`` (names of failed checks: strength, holdout, student, empty).
    """
    reasons, failed = [], []
    if strength["decision"] != "H1":
        failed.append("strength")
        how = "the SPRT accepted H0 (parity)" if strength["decided_early"] else "the SPRT reached max games undecided"
        reasons.append(
            f"strength: {how}, LLR {strength['llr']:.2f} after {strength['games']} games, win rate {strength['win_rate']:.3f}"
        )
    if holdout["regression"]:
        failed.append("holdout")
        reasons.append(f"holdout accuracy drop {holdout['drop']:.4f} is a regression (McNemar p = {holdout['p_value']:.3g})")
    if student["regression"]:
        failed.append("student")
        reasons.append(
            f"the student trained with the batch falls back: win rate {student['win_rate']:.3f} [{student['win_rate_low']:.3f}, {student['win_rate_high']:.3f}] "
            f"over {student['games']} decisive games, the SPRT accepted {student['parity'] - student['margin']:.3f} (parity {student['parity']:.3f} minus the margin)"
        )
    if batch["games"] == 0:
        failed.append("empty")
        reasons.append("the batch holds no games")
    return {
        "gate/accepted": not reasons or not gated,
        "gate/gated": gated,
        "gate/reasons": reasons,
        "gate/failed": failed,
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


class GateVerdict(BaseModel):
    """What the driver reads of ``metrics/gate.json``: the verdict and its headline figures.

    Built by ``from_metrics`` from the ``gate/…`` keys ``run_gate`` writes (the other keys,
    e.g. the data-quality ones, stay in the metrics file and the ledger).

    Attributes:
        accepted: whether the batch joins the pool.
        reasons: why it was (or, ungated, would have been) rejected.
        failed: names of the failed checks (``strength``, ``holdout``, ``student``, ``empty``).
        win_rate, win_rate_low, win_rate_high: the PPO agent's first-place rate and its 95%
            interval. eval_games: games it took (the SPRT stops early).
        sprt_llr, sprt_decision: the sequential test's log-likelihood ratio and decision.
        holdout_accuracy_current, holdout_accuracy_drop: teacher-holdout accuracy of the
            current student, and how much the candidate student lost on it.
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
        cfg: the ``gate`` section of params (``ml.params.GateParams``).
        train: the ``train`` section; the candidate student is trained like the current one
            (``ml.supervised.build_and_train``) with ``candidate_dir`` added to the pool.
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
        on_deal: the SPRT's path, deal by deal (``ml.stats.sequential_test``).
        executor: where the pods of (a) and (c) are played (``ml.compute``; the figures are the same).
        cache_dir: folder of the encoded-batch cache (``ml.encoded_cache.EncodedCache``), or None.
        record: if given, filled with the candidate student's training record
            (``ml.supervised.build_and_train``): its checkpoint metadata, so that the next
            generation's train stage can take it instead of training again.

    Returns:
        ``(candidate_student, metrics)``: the student trained with the batch, and the
        ``gate/…`` metrics of ``verdict`` plus ``gate/candidate_batch`` (file name) and
        ``gate/candidate_sampled_share`` (the candidate student's sampled source shares).

    Raises:
        GateError: ``candidate_dir`` does not hold exactly one PPO batch (nothing read else).
        ml.policy.CheckpointError: a checkpoint that cannot be read.
        ml.records.RecordError: a malformed batch line.
        ml.compute.ComputeError: the Ray cluster was lost mid-stage.
    """
    batches = scan_batches(candidate_dir, sources=("ppo",))
    if len(batches) != 1:
        raise GateError(f"{candidate_dir}: expected exactly one PPO batch, found {len(batches)}")
    agent, _ = load_policy(model)
    current, _ = load_policy(student)
    pods: _PodArgs = {"game": game, "num_envs": num_envs, "executor": executor}
    pod_size = game.num_players
    sprt = SPRT(1.0 / pod_size, cfg.target_win_rate, cfg.alpha, cfg.beta)
    deals = duplicate_deal_outcomes(Controller("net", agent), Controller(cfg.opponent), seed=seed, **pods)
    # progress bars (lines when stderr is no terminal) count the deals the test takes, its last one included
    shown = ProgressBar(total=-(-cfg.max_games // pod_size), desc="gate: strength", unit="deal", disable=not progress)
    strength = sequential_test(counted(deals, shown), sprt, cfg.min_games, cfg.max_games, cfg.confidence, on_deal)
    shown.finish(stop_reason(strength, cfg.max_games))  # a bar stopped at 7% says the test decided
    candidate, train_metrics, holdout = build_and_train(
        train, game, teacher_dir, forge_dir, [pool_dir, candidate_dir], seed=train_seed, device=device, progress=progress,
        cache_dir=cache_dir, record=record,
    )  # fmt: skip
    correct_current = holdout.correct(predict(current, holdout))  # a partial label: any allowed action is right
    correct_candidate = holdout.correct(predict(candidate, holdout))
    paired = mcnemar_regression(correct_current, correct_candidate, cfg.max_accuracy_drop, cfg.alpha)
    paired.update(accuracy_current=float(correct_current.mean()), accuracy_candidate=float(correct_candidate.mean()))
    student_deals = duplicate_deal_outcomes(
        Controller("net", candidate, greedy=True), Controller("net", current, greedy=True), seed=seed + 1, **pods
    )
    n_deals = max(1, -(-cfg.student_games // pod_size))
    shown_deals = ProgressBar(total=n_deals, desc="gate: student", unit="deal", disable=not progress)
    non_inferior = student_non_inferiority(
        counted(student_deals, shown_deals), pod_size, cfg.student_margin, alpha=cfg.alpha, beta=cfg.beta,
        min_games=cfg.student_min_games, max_games=cfg.student_games, confidence=cfg.confidence,
    )  # fmt: skip
    shown_deals.finish(stop_reason(non_inferior, cfg.student_games))
    metrics = verdict(strength, paired, non_inferior, batch_quality(batches[0]), gated=cfg.gated)
    metrics["gate/candidate_batch"] = batches[0].name
    metrics["gate/candidate_sampled_share"] = train_metrics["train/sampled_share"]
    return candidate, metrics
