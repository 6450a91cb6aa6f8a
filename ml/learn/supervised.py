"""Supervised student: imitation of decision records by a masked policy/value network.

Loss per decision, by what the record gives:

* a label (teacher, Forge, and PPO records under ``distill: hard``): minus the log of the
  total probability (masked softmax) of the actions the record allows,
  ``-log sum_{a in targets} p(a)``: the cross-entropy against the recorded macro action for
  a full label, and for a partial one (a Forge attack without a target) the probability of
  attacking anyone (``ml.data.decisions.DecisionSet.targets``; References: Jin & Ghahramani 2002,
  "Learning with multiple labels");
* the agent's distribution (PPO records of schema 2 under ``distill: kl``): the KL
  divergence ``KL(pi_agent || p_student) = sum_a pi(a) (log pi(a) - log p(a))`` over the
  legal actions, policy distillation as in Rusu et al. 2016, "Policy Distillation" (their
  KL loss with temperature 1);

plus ``value_coef`` times the squared error of the value head against the acting seat's game result. Each epoch draws
``samples_per_epoch`` decisions from the source mixture (``ml.data.decisions.sample_mixture``), so
the source weights hold exactly as ratios.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
import torch.nn.functional as F

from ml.base.io import file_md5
from ml.base.progress import ProgressBar
from ml.data.dataset import load_ppo, load_teacher, teacher_files
from ml.data.decisions import DecisionSet, fictitious_weights, sample_mixture
from ml.data.encoded_cache import EncodedCache
from ml.learn.reuse import TrainingData, forge_extras, forge_folders, reusable_student, training_fingerprint
from ml.learn.settings import RunSettings
from ml.model.policy import MASKED_LOGIT, CheckpointError, PolicyNet, check_shape, load_policy

if TYPE_CHECKING:
    from ml.config.sections import TrainParams
    from ml.game.protocol import GameSpec

logger = logging.getLogger(__name__)

EpochLogger = Callable[[int, dict[str, float]], None]
"""``(epoch, {name: value})``: a learning-curve logger (``ml.learn.curves.Curves.log``)."""


@torch.no_grad()
def predict(net: PolicyNet, data: DecisionSet, batch_size: int = 4096) -> np.ndarray:
    """Greedy (arg-max over legal actions) predictions, on the net's device. Returns int64[N]."""
    net.eval()
    device = next(net.parameters()).device
    out = np.zeros(len(data), dtype=np.int64)
    for start in range(0, len(data), batch_size):
        sl = slice(start, start + batch_size)
        logits, _ = net(torch.from_numpy(data.obs[sl]).to(device), torch.from_numpy(data.action_mask[sl]).to(device))
        out[sl] = logits.argmax(dim=-1).cpu().numpy()
    return out


def accuracy(net: PolicyNet, data: DecisionSet) -> float:
    """Share of decisions where the greedy action is one the record allows (nan for an empty set)."""
    if len(data) == 0:
        return float("nan")
    return float(data.correct(predict(net, data)).mean())


def imitation_loss(logits: torch.Tensor, targets: torch.Tensor, policy: torch.Tensor) -> torch.Tensor:
    """Per-decision imitation loss (the module docstring): KL to ``policy`` where a row has one, else
    the partial-label cross-entropy on ``targets``.

    Args:
        logits: float32[B, A] masked logits (``PolicyNet.forward``).
        targets: bool[B, A] the actions a record allows (one for a full label).
        policy: float32[B, A] the agent's probabilities; an all-zero row means none (renormalised
            over its support, so rounding in the file does not bias it).

    Returns:
        float32[B] losses (nats).
    """
    log_p = torch.log_softmax(logits, dim=-1)
    allowed = logits.masked_fill(~targets, MASKED_LOGIT)  # one-hot targets: exactly the cross-entropy
    label_loss = torch.logsumexp(logits, -1) - torch.logsumexp(allowed, -1)
    total = policy.sum(-1, keepdim=True)
    pi = policy / total.clamp_min(1e-12)
    kl = (pi * (torch.log(pi.clamp_min(1e-12)) - log_p)).sum(-1)
    return torch.where(total.squeeze(-1) > 0, kl, label_loss)


def train_student(
    train: DecisionSet,
    holdout: DecisionSet,
    cfg: TrainParams,
    run: RunSettings,
    init: PolicyNet | None = None,
    on_epoch: EpochLogger | None = None,
) -> tuple[PolicyNet, dict[str, object]]:
    """Train a student by imitation.

    Args:
        train: training decisions (teacher train split plus PPO decisions).
        holdout: teacher holdout decisions (never trained on).
        cfg: the ``train`` params; the training knobs (``epochs``, ``batch_size``, ``lr``,
            ``hidden_sizes``, ``samples_per_epoch``, ``source_weights``, ``value_coef``,
            ``distill``) are read here, the data params by ``build_and_train``.
        run: ``seed`` seeds torch and the mixture sampler; ``device``: torch device of the
            training (results match the CPU up to float tolerance); ``progress``: a progress bar.
        init: warm start: the student starts from a copy of these weights (same architecture;
            ``init`` itself is not changed) instead of a random init.
        on_epoch: called after each epoch with the epoch (1-based) and ``loss`` (mean
            minibatch loss), ``accuracy`` (share of the epoch's sampled decisions whose
            greedy action during training was allowed) and ``holdout_accuracy``; reads
            only, so the trained weights are the same with or without it.

    Returns:
        ``(net, metrics)`` with ``train/…`` keys: final loss, holdout accuracy of the
        starting weights (``train/init_holdout_accuracy``: the warm start's, or the random
        init's) and of the trained student, and the realised share of each source among
        the sampled decisions.

    Raises:
        ValueError: when the mixture has no data (see ``sample_mixture``).
        ml.model.policy.CheckpointError: ``init`` reads another observation size (another encoder),
            or its hidden sizes are not ``cfg.hidden_sizes``.
    """
    if init is not None:
        _check_init(init, train, cfg, "the warm-start checkpoint")
    device = run.device
    torch.manual_seed(run.seed)
    rng = np.random.default_rng(run.seed)
    net = PolicyNet(
        train.obs.shape[1], cfg.hidden_sizes, train.action_mask.shape[1]
    )  # initialised on the CPU: same weights on any device
    if init is not None:
        net.load_state_dict(init.state_dict())  # the seed's weights, not only its shape
    init_accuracy = accuracy(net, holdout)
    net.to(device)
    obs, mask = torch.from_numpy(train.obs).to(device), torch.from_numpy(train.action_mask).to(device)
    targets, value_target = torch.from_numpy(train.targets).to(device), torch.from_numpy(train.value_target).to(device)
    soft = torch.from_numpy(train.soft_policy).to(device)
    no_policy = int(((train.source == "ppo") & (train.soft_policy.sum(axis=1) == 0)).sum())
    if cfg.distill == "hard":
        soft = torch.zeros_like(soft)
    elif no_policy:  # version-1 records, or a writer that left `policy` out: trained as under `hard`
        logger.warning("%d PPO decisions carry no `policy`: fitted to their chosen action, not distilled", no_policy)
    started = time.perf_counter()
    samples = 0
    opt = torch.optim.Adam(net.parameters(), lr=cfg.lr)
    sampled_sources: dict[str, int] = {}
    loss_value = float("nan")
    bar = ProgressBar(range(cfg.epochs), desc="train", unit="epoch", disable=not run.progress)
    for epoch in bar:
        net.train()
        idx = sample_mixture(train, cfg.source_weights, cfg.samples_per_epoch, rng)
        for s, c in zip(*np.unique(train.source[idx], return_counts=True), strict=True):
            sampled_sources[str(s)] = sampled_sources.get(str(s), 0) + int(c)
        losses, correct = [], 0
        for start in range(0, len(idx), cfg.batch_size):
            b = idx[start : start + cfg.batch_size]
            bt = torch.from_numpy(b).to(device)
            logits, value = net(obs[bt], mask[bt])
            pg = imitation_loss(logits, targets[bt], soft[bt]).mean()
            v = F.mse_loss(value, value_target[bt])
            samples += len(b)
            loss = pg + cfg.value_coef * v
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses.append(loss.item())
            correct += int(targets[bt].gather(1, logits.detach().argmax(-1, keepdim=True)).sum())
        loss_value = float(np.mean(losses))
        bar.set_postfix(loss=f"{loss_value:.3f}")
        logger.info("epoch %d loss %.4f", epoch, loss_value)
        if on_epoch is not None:
            on_epoch(
                epoch + 1,
                {"loss": loss_value, "accuracy": correct / max(len(idx), 1), "holdout_accuracy": accuracy(net, holdout)},
            )
    train_s = time.perf_counter() - started
    net.eval()
    total = sum(sampled_sources.values())
    metrics: dict[str, object] = {
        "train/loss": loss_value,
        "train/init_holdout_accuracy": init_accuracy,
        "train/holdout_accuracy": accuracy(net, holdout),
        "train/train_accuracy": accuracy(net, train.subset(np.arange(min(len(train), 20000)))),
        "train/holdout_decisions": len(holdout),
        "train/train_decisions": len(train),
        "train/samples_per_s": samples / train_s if train_s > 0 else 0.0,
        "train/device": str(device),
        "train/sampled_share": {s: c / total for s, c in sorted(sampled_sources.items())},
        "train/ppo_decisions_without_policy": no_policy,
    }
    return net.cpu(), metrics


def _check_init(init: PolicyNet, data: DecisionSet, cfg: TrainParams, what: str) -> None:
    """Raise ``CheckpointError`` unless ``init`` reads ``data``'s observations and actions with ``cfg.hidden_sizes``."""
    check_shape(init, data.obs.shape[1], data.action_mask.shape[1], what)
    if tuple(init.hidden_sizes) != tuple(cfg.hidden_sizes):
        raise CheckpointError(
            f"{what} has hidden sizes {list(init.hidden_sizes)}, but train.hidden_sizes is {list(cfg.hidden_sizes)}"
        )


def _warm_start(cfg: TrainParams, previous: Path | None, data: DecisionSet) -> PolicyNet | None:
    """The last accepted student to start from under ``cfg.warm_start``, or None: off, no file
    (the first generation), or a student of another shape (said in the log: the params changed)."""
    if not cfg.warm_start or previous is None or not previous.is_file():
        return None
    net, _ = load_policy(previous)
    try:
        _check_init(net, data, cfg, str(previous))
    except CheckpointError as e:
        logger.warning("not warm-started: %s", e)
        return None
    return net


def build_and_train(
    cfg: TrainParams,
    game: GameSpec,
    data: TrainingData,
    run: RunSettings,
    *,
    on_epoch: EpochLogger | None = None,
    reuse: Path | None = None,
    record: dict[str, object] | None = None,
) -> tuple[PolicyNet, dict[str, object], DecisionSet]:
    """Load the teacher, Forge and PPO data, and train a student on their mixture.

    Args:
        cfg: the ``train`` section of params (``ml.config.params.TrainParams``): holdout share,
            mixture weights, PPO filters, warm starts (``init_checkpoint``, a path read
            relative to the working directory; ``warm_start`` from ``data.previous``, which takes
            precedence, with ``warm_epochs`` and ``warm_lr``) and the training knobs.
        game: the game; its teacher encoder (``GameSpec.teacher_encoder``) encodes and labels
            every decision.
        data: the teacher, PPO and Forge folders and the encoded-batch cache.
        run: the training seed (``Params.stage_seed("train")``), the torch device, a progress bar.
        on_epoch: learning-curve logger (``train_student``).
        reuse: a student checkpoint taken as the result instead of training when its
            ``train_fingerprint`` is this call's (``training_fingerprint``): its metrics and
            learning curve are those recorded when it was trained (``on_epoch`` replays them),
            with ``train/reused`` true. None, missing or another fingerprint: trains.
        record: if given, filled with what a checkpoint needs to be reused later:
            ``train_fingerprint``, ``train_seed``, ``train_metrics`` and ``train_curve``
            (``[[epoch, {name: value}], ...]``); store it as the checkpoint's metadata. It holds
            no wall-clock figure (``train/samples_per_s`` is left out, and so missing from the
            metrics of a reused student), so equal inputs give equal checkpoint bytes.

    Returns:
        ``(net, metrics, holdout)``: the trained student (on the CPU); ``train/…`` metrics
        (``train_student``'s, the dataset statistics, ``train/available_decisions`` per
        source in decisions, ``train/fingerprint``, ``train/reused``, ``train/seed`` (the seed
        the student was trained with: ``run.seed``, or the reused one's), ``train/warm_from`` (the
        MD5 of the student it started from under ``warm_start``, else null), the NashConv figures
        when asked); the teacher holdout decisions (never trained on).

    Raises:
        ml.data.batch_files.RecordError: a malformed line in a teacher or PPO batch.
        ml.base.io.DataFileError: a bad card table in ``forge_dir``.
        ml.model.policy.CheckpointError: a warm start that does not fit (see ``train_student``).
        ValueError: the mixture has no data.
    """
    encoder = game.teacher_encoder(data.forge_dir)
    forge_dirs = forge_folders(data.forge_dir)
    fingerprint = training_fingerprint(cfg, game, data, run.device)
    seed = run.seed
    cache = None
    if data.cache_dir is not None:
        tables = forge_extras(forge_dirs, teacher_files([], forge_dirs)[1])
        context = f"{json.dumps(game.fingerprint())}|{[file_md5(t) for t in tables]}"
        cache = EncodedCache.for_encoder(data.cache_dir, encoder, context)
    train, holdout, stats = load_teacher(
        [data.teacher_dir], cfg.holdout_fraction, encoder, forge_dirs, cache=cache, executor=run.executor
    )
    if stats["forge_files"] and not cfg.source_weights.get("forge"):
        logger.warning(
            "%s holds Forge decisions but train.source_weights gives forge no weight: not trained on", data.forge_dir
        )
    curve: list[list[Any]] = []
    if (found := reusable_student(reuse, fingerprint)) is not None:
        net, meta = found
        metrics = {**meta["train_metrics"], "train/reused": True}
        curve = meta.get("train_curve", [])
        for epoch, values in curve:
            if on_epoch is not None:
                on_epoch(int(epoch), dict(values))
        seed = int(meta.get("train_seed", seed))
        logger.info("the student in %s was trained on this data with these params: reused, not trained again", reuse)
    else:

        def log_epoch(epoch: int, values: dict[str, float]) -> None:
            curve.append([epoch, dict(values)])
            if on_epoch is not None:
                on_epoch(epoch, values)

        fictitious = cfg.average == "fictitious"
        ppo, ppo_stats = load_ppo(
            list(data.pool_dirs), encoder, cfg.min_reward_threshold, cfg.ppo_window, cache=cache, recency=cfg.ppo_recency,
            per_batch=fictitious, executor=run.executor,
        )  # fmt: skip
        mixed = cfg
        if fictitious:
            mixed = cfg.model_copy(
                update={"source_weights": fictitious_weights(cfg.source_weights, float(ppo_stats["ppo_policies"]))}
            )
        init = _warm_start(cfg, data.previous, train)
        warm_from = file_md5(data.previous) if init is not None and data.previous is not None else None
        if init is not None:
            mixed = mixed.model_copy(update={"epochs": cfg.warm_epochs or cfg.epochs, "lr": cfg.warm_lr or cfg.lr})
        elif cfg.init_checkpoint:
            init = load_policy(cfg.init_checkpoint)[0]
        net, metrics = train_student(DecisionSet.concat([train, ppo]), holdout, mixed, run, init, log_epoch)
        metrics["train/warm_from"] = warm_from
        metrics.update({f"train/{k}": v for k, v in {**stats, **ppo_stats}.items()})
        metrics["train/available_decisions"] = {"sim": 0, **train.source_counts(), "ppo": len(ppo)}
        metrics["train/fingerprint"] = fingerprint
        metrics["train/reused"] = False
    metrics["train/seed"] = seed
    if record is not None:
        # not the wall-clock speed: the checkpoint's bytes must not depend on the machine's load
        kept = {k: v for k, v in metrics.items() if k not in ("train/reused", "train/seed", "train/samples_per_s")}
        doc = {"train_fingerprint": fingerprint, "train_seed": seed, "train_metrics": kept, "train_curve": curve}
        # through JSON: plain values without shared objects, so the pickled checkpoint's bytes do
        # not depend on which strings happened to be one object (a cached or a parsed dataset)
        record.update(json.loads(json.dumps(doc)))
    return net, metrics, holdout
