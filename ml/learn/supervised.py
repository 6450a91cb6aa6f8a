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

import hashlib
import json
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
import torch.nn.functional as F

from ml.base.io import JSONObject, file_md5
from ml.base.progress import ProgressBar
from ml.data.dataset import load_ppo, load_teacher, ppo_files, teacher_files
from ml.data.decisions import DecisionSet, fictitious_weights, sample_mixture
from ml.data.encoded_cache import EncodedCache, code_digest
from ml.learn.settings import RunSettings
from ml.model.policy import MASKED_LOGIT, CheckpointError, PolicyNet, check_shape, load_policy

if TYPE_CHECKING:
    from ml.config.sections import TrainParams
    from ml.game.protocol import GameSpec

logger = logging.getLogger(__name__)

EpochLogger = Callable[[int, dict[str, float]], None]
"""``(epoch, {name: value})``: a learning-curve logger (``ml.learn.curves.Curves.log``)."""


@dataclass(frozen=True)
class TrainingData:
    """The folders a student is made from (``build_and_train``).

    Attributes:
        teacher_dir: folder of teacher batches (``ml-decisions-sim-*.jsonl``); a fixed share
            of its games is held out.
        pool_dirs: folders of accepted PPO batches (the gate adds the candidate's folder).
        forge_dir: folder of imported Forge files and their card table (``data/forge``),
            or None; a missing folder is no Forge data.
        cache_dir: folder of the encoded-batch cache (``ml.data.encoded_cache.EncodedCache``), or None.
        previous: the last accepted student's checkpoint, the warm start under ``train.warm_start``
            (the gate: the current student; the train stage: ``data/next_student``), or None; a
            missing file is none (the first generation).
    """

    teacher_dir: Path
    pool_dirs: tuple[Path, ...]
    forge_dir: Path | None = None
    cache_dir: Path | None = None
    previous: Path | None = None


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
        check_shape(init, train.obs.shape[1], train.action_mask.shape[1], "the warm-start checkpoint")
        if tuple(init.hidden_sizes) != tuple(cfg.hidden_sizes):
            raise CheckpointError(
                f"the warm-start checkpoint has hidden sizes {list(init.hidden_sizes)}, "
                f"but train.hidden_sizes is {list(cfg.hidden_sizes)}"
            )
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


TRAINING_FORMAT = 1
"""Version of ``training_fingerprint``'s inputs; bump it when what a student depends on changes."""

WARM_DATA_KEYS = ("holdout_fraction", "ppo_window", "min_reward_threshold", "hidden_sizes", "warm_start")
"""The ``train`` keys a warm-started student's fingerprint holds: what selects its data and its shape.
The optimisation knobs (epochs, rates, mixture weights) shape the next continuation, not the student
already made, so a retry that changes them keeps the accepted student (``training_fingerprint``)."""


def _forge_dirs(forge_dir: Path | None) -> list[Path]:
    return [forge_dir] if forge_dir is not None and forge_dir.is_dir() else []


def _forge_extras(forge_dirs: list[Path], forge_paths: list[Path]) -> list[Path]:
    """The files of the Forge folders other than the decision files (the card table)."""
    return sorted(f for d in forge_dirs for f in d.iterdir() if f.is_file() and f not in forge_paths)


def training_fingerprint(cfg: TrainParams, game: GameSpec, data: TrainingData, device: str) -> str:
    """Hex MD5 of everything ``build_and_train`` makes a student from, but the seed.

    The files it reads (name and MD5 of each teacher batch, Forge file, card table and of
    the PPO batches of the window, in the order read), ``init_checkpoint``'s MD5, whether a
    last accepted student is there to warm-start from (``train.warm_start``; which one is left out:
    the train stage cannot know the student its reusable candidate started from, and it is the
    last accepted one by construction), the ``train`` params (under ``warm_start`` only
    :data:`WARM_DATA_KEYS`: a warm student made from the same data is taken whatever the
    optimisation knobs), the game, the device and torch thread count, torch and numpy versions and the
    code (``ml.data.encoded_cache.code_digest``, this module, ``ml.model.policy``). Two calls give the same
    value exactly when the student would be trained on the same data in the same way.

    Raises:
        NotADirectoryError: ``data.teacher_dir`` or a pool folder is missing.
    """
    forge_dirs = _forge_dirs(data.forge_dir)
    teacher, forge = teacher_files([data.teacher_dir], forge_dirs)
    groups = {
        "sim": teacher,
        "forge": forge,
        "forge_table": _forge_extras(forge_dirs, forge),
        "ppo": ppo_files(list(data.pool_dirs), cfg.ppo_window),
    }
    ml_dir = Path(__file__).resolve().parents[1]
    doc = {
        "format": TRAINING_FORMAT,
        "train": cfg.model_dump(mode="json", include=set(WARM_DATA_KEYS) if cfg.warm_start else None),
        "game": game.fingerprint(),
        "device": str(device),
        "threads": torch.get_num_threads(),
        "versions": [torch.__version__, np.__version__],
        "code": [code_digest(), file_md5(ml_dir / "learn" / "supervised.py"), file_md5(ml_dir / "model" / "policy.py")],
        "files": [[kind, p.name, file_md5(p)] for kind, paths in groups.items() for p in paths],
        "init": file_md5(Path(cfg.init_checkpoint)) if cfg.init_checkpoint else None,
        "warm": cfg.warm_start and data.previous is not None and data.previous.is_file(),
    }
    return hashlib.md5(json.dumps(doc, sort_keys=True, default=str).encode()).hexdigest()


def reusable_student(path: Path | None, fingerprint: str) -> tuple[PolicyNet, JSONObject] | None:
    """The student checkpoint at ``path`` when it was trained as ``fingerprint`` says (its
    ``train_fingerprint`` metadata, ``build_and_train``'s ``record``), else None (also for a
    missing or unreadable file, said in the log)."""
    if path is None or not path.is_file():
        return None
    try:
        net, meta = load_policy(path)
    except CheckpointError as e:
        logger.warning("%s is no reusable student (%s): training", path, e)
        return None
    if meta.get("train_fingerprint") != fingerprint:
        logger.info("%s was trained on other data or params: training", path)
        return None
    return net, meta


def _warm_start(cfg: TrainParams, previous: Path | None, data: DecisionSet) -> PolicyNet | None:
    """The last accepted student to start from under ``cfg.warm_start``, or None: off, no file
    (the first generation), or a student of another shape (said in the log: the params changed)."""
    if not cfg.warm_start or previous is None or not previous.is_file():
        return None
    net, _ = load_policy(previous)
    try:
        check_shape(net, data.obs.shape[1], data.action_mask.shape[1], str(previous))
    except CheckpointError as e:
        logger.warning("not warm-started: %s", e)
        return None
    if tuple(net.hidden_sizes) != tuple(cfg.hidden_sizes):
        logger.warning(
            "not warm-started: %s has hidden sizes %s, train.hidden_sizes is %s",
            previous, list(net.hidden_sizes), list(cfg.hidden_sizes),
        )  # fmt: skip
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
    forge_dirs = _forge_dirs(data.forge_dir)
    fingerprint = training_fingerprint(cfg, game, data, run.device)
    seed = run.seed
    cache = None
    if data.cache_dir is not None:
        tables = _forge_extras(forge_dirs, teacher_files([], forge_dirs)[1])
        context = f"{json.dumps(game.fingerprint())}|{[file_md5(t) for t in tables]}"
        cache = EncodedCache.for_encoder(data.cache_dir, encoder, context)
    train, holdout, stats = load_teacher([data.teacher_dir], cfg.holdout_fraction, encoder, forge_dirs, cache=cache)
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
            per_batch=fictitious,
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
