"""Source-aware dataset builder: teacher and PPO decision files -> encoded arrays.

* **Games.** The encoder decides the game (``ml.game.spec.Encoder``, made by
  ``ml.game.registry.GameSpec.encoder``): the commander's reads seat views, the OpenSpiel
  games' the observation stored in each record (label ``action.action_idx``); each has
  ``obs_dim``, ``num_actions``, ``encode_batch``, ``label`` and ``action_mask``. An encoder may also have
  ``unlabelled(record)`` (``ml.game.commander.forge.ForgeEncoder``): for a record without a label,
  its partial label (``bool[num_actions]``, the actions any of which it allows) or
  ``(reason, detail)`` saying why it is not trainable.
* **Partial labels.** ``DecisionSet.targets`` holds, per decision, the set of actions the
  record allows: one action for a full label, several for a partial one (a Forge attack
  without a target: attacking anyone); the student maximises their total probability.
* **Sources.** Teacher batches (``ml-decisions-sim-*.jsonl``, source ``sim``), real Forge
  files imported into their own folder (``python loop.py import-forge``; read there only,
  source ``forge``, a bad line reported and left out) and accepted PPO batches
  (``ml-decisions-ppo-*.jsonl``, source ``ppo``). Every sample keeps its source tag.
* **Holdout.** A fixed 10-15% of *teacher games* (never single decisions) is held out:
  a game is in the holdout when the SHA-256 of its ``game_id`` falls below the fraction,
  so the split does not move when more data arrives and never depends on a seed.
* **Reward filter.** PPO games whose ``episode_return`` is below ``min_reward_threshold``
  are dropped.
* **Source weights are mixture ratios.** ``sample_mixture`` draws a training set in which
  source ``s`` makes up ``w_s / sum(w)`` of the samples (``{sim: 1, ppo: 0.5}``: PPO is a
  third), whatever the sizes of the sources; they are not subsampling fractions.
"""

from __future__ import annotations

import functools
import hashlib
import logging
import os
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ml.game.spec import Encoder
from ml.io import TMP_SUFFIX, DataFileError, file_md5
from ml.progress import log_once
from ml.record_schema import Record
from ml.records import read_records, scan_batches

logger = logging.getLogger(__name__)


@dataclass
class DecisionSet:
    """Encoded, labelled decisions.

    Attributes:
        obs: float32[N, obs_dim] observations (the game encoder's).
        action_mask: bool[N, num_actions] legal actions (all-ones where a file has none).
        label: int64[N] action index taken; -1 where the
            record gives only a partial label (see ``targets``).
        value_target: float32[N] the acting seat's game result (win 1, loss -1/(n-1), draw 0).
        source: str array [N], the record's source (``sim``, ``forge``, ``ppo``).
        game_id: str array [N].
        targets: bool[N, num_actions], the actions the record allows: ``label`` alone for a
            full label, several for a partial one. Built from ``label`` when not given.
        policy: float32[N, num_actions], the acting policy's probabilities stored with the
            record (PPO records of schema 2, ``policy``); all-zero rows where a record has none.
            Zeros when not given.
    """

    obs: np.ndarray
    action_mask: np.ndarray
    label: np.ndarray
    value_target: np.ndarray
    source: np.ndarray
    game_id: np.ndarray
    targets: np.ndarray | None = None
    policy: np.ndarray | None = None

    def __post_init__(self) -> None:
        if self.targets is None:
            assert (self.label >= 0).all(), "a partial label (-1) needs its targets"
            self.targets = np.zeros(self.action_mask.shape, dtype=bool)
            self.targets[np.arange(len(self.label)), self.label] = True
        if self.policy is None:
            self.policy = np.zeros(self.action_mask.shape, dtype=np.float32)

    def __len__(self) -> int:
        return len(self.label)

    @property
    def _targets(self) -> np.ndarray:
        assert self.targets is not None, "__post_init__ builds targets when they are not given"
        return self.targets

    @property
    def soft_policy(self) -> np.ndarray:
        """float32[N, num_actions]: ``policy`` (all-zero rows where a record stores none)."""
        assert self.policy is not None, "__post_init__ builds policy when it is not given"
        return self.policy

    def _fields(self) -> tuple[np.ndarray, ...]:
        return (
            self.obs, self.action_mask, self.label, self.value_target, self.source, self.game_id, self._targets,
            self.soft_policy,
        )  # fmt: skip

    def subset(self, idx: np.ndarray) -> DecisionSet:
        """Rows ``idx`` (int[K] or bool[N]) as a new set."""
        return DecisionSet(*(a[idx] for a in self._fields()))

    def correct(self, pred: np.ndarray) -> np.ndarray:
        """bool[N]: whether each predicted action (int64[N]) is one the record allows (``targets``)."""
        return self._targets[np.arange(len(self)), pred]

    def source_counts(self) -> dict[str, int]:
        """Decisions per source."""
        names, counts = np.unique(self.source, return_counts=True)
        return {str(n): int(c) for n, c in zip(names, counts, strict=True)}

    @staticmethod
    def concat(sets: list[DecisionSet]) -> DecisionSet:
        """Row-wise concatenation of one or more sets.

        Raises:
            ValueError: no sets (the sizes of an empty result would be unknown: use ``empty_set``).
        """
        if not sets:
            raise ValueError("DecisionSet.concat needs at least one set")
        fields = zip(*(s._fields() for s in sets), strict=True)
        return DecisionSet(*(np.concatenate(f) for f in fields))


def empty_set(obs_dim: int, num_actions: int) -> DecisionSet:
    """A DecisionSet with no rows of a game's sizes."""
    return DecisionSet(
        np.zeros((0, obs_dim), np.float32),
        np.zeros((0, num_actions), bool),
        np.zeros(0, np.int64),
        np.zeros(0, np.float32),
        np.zeros(0, dtype=object),
        np.zeros(0, dtype=object),
    )


def in_holdout(game_id: str, fraction: float) -> bool:
    """Whether a teacher game belongs to the fixed holdout (SHA-256 of the game id < fraction)."""
    digest = hashlib.sha256(game_id.encode("utf-8")).digest()
    return int.from_bytes(digest[:8], "big") / 2**64 < fraction


def outcome_value(record: Record) -> float:
    """The acting seat's result: win 1, loss -1/(n-1), draw 0 (the zero-sum reward scheme)."""
    winner = record.winner()
    if winner is None:
        return 0.0
    return 1.0 if winner == record.active_seat else -1.0 / (record.players_count - 1)


def encode_records(records: Iterable[Record], encoder: Encoder) -> tuple[DecisionSet, Counter[tuple[str, str]]]:
    """Encode and label records; non-trainable ones (land drops, unlabelable) are skipped.

    A record without a label (``encoder.label`` is None) is kept with a partial label when
    ``encoder.unlabelled`` gives one (label -1, ``targets`` the allowed actions), else skipped.

    Args:
        records: decision records of one game kind.
        encoder: the game's encoder (``obs_dim``, ``num_actions``, ``encode_batch``, ``label``,
            ``action_mask``, optionally ``unlabelled``; see the module docstring).

    Returns:
        ``(set, skipped)`` where ``skipped`` counts the non-trainable records (decisions) by
        ``(reason, detail)``; ``("unlabelled", "")`` when the encoder gives no reason.

    Raises:
        ValueError: a record of another game (observation or mask of the wrong size).
    """
    data, _, reasons = _encode_indexed(list(records), encoder)
    return data, Counter(r for r in reasons if r is not None)


def _encode_indexed(records: list[Record], encoder: Encoder) -> tuple[DecisionSet, np.ndarray, list[tuple[str, str] | None]]:
    """``encode_records`` keeping track of each record: ``(set, row, reasons)`` where ``row``
    (int64[R]) is each record's row in the set (-1: not trainable) and ``reasons[i]`` the
    ``(reason, detail)`` of a non-trainable record (None for a trainable one)."""
    rows: list[Record] = []
    labels: list[int] = []
    partial: dict[int, np.ndarray] = {}
    reasons: list[tuple[str, str] | None] = []
    where = np.full(len(records), -1, dtype=np.int64)
    unlabelled = getattr(encoder, "unlabelled", lambda rec: ("unlabelled", ""))
    for i, rec in enumerate(records):
        label = encoder.label(rec)
        if label is None:
            allowed = unlabelled(rec)
            if isinstance(allowed, tuple):
                reasons.append(allowed)
                continue
            partial[len(rows)], label = allowed, -1
        reasons.append(None)
        where[i] = len(rows)
        rows.append(rec)
        labels.append(label)
    if not rows:
        return empty_set(encoder.obs_dim, encoder.num_actions), where, reasons
    obs = encoder.encode_batch(rows)
    masks = np.stack([encoder.action_mask(r) for r in rows])
    if masks.shape[1] != encoder.num_actions:
        raise ValueError(
            f"game {rows[0].game_id!r}: action_mask has {masks.shape[1]} entries, this game has {encoder.num_actions}"
        )
    label_arr = np.asarray(labels, dtype=np.int64)
    targets = np.zeros(masks.shape, dtype=bool)
    full = np.flatnonzero(label_arr >= 0)
    targets[full, label_arr[full]] = True
    for i, allowed in partial.items():
        targets[i] = allowed
    masks |= targets  # a label is legal by definition (Forge files carry no mask)
    values = np.asarray([outcome_value(r) for r in rows], np.float32)
    sources = np.asarray([r.source or "sim" for r in rows], dtype=object)
    policy = np.zeros(masks.shape, dtype=np.float32)
    for i, r in enumerate(rows):
        if getattr(r, "policy", None) is not None:
            policy[i] = r.policy
    game_ids = np.asarray([r.game_id for r in rows], dtype=object)
    return DecisionSet(obs, masks, label_arr, values, sources, game_ids, targets, policy), where, reasons


ENCODED_CACHE_FORMAT = 2
"""Version of the encoded-batch cache entries (``EncodedCache``); bump it when their layout changes
(2: the agent's ``policy`` of schema-2 PPO records)."""
ENCODED_CACHE_ENV = "DISTILL_ENCODED_CACHE"
"""Environment variable naming the encoded-batch cache folder (``off``: no cache)."""
_CODE_FILES = ("dataset.py", "records.py", "record_schema.py")


def default_cache_dir() -> Path | None:
    """The encoded-batch cache folder of a stage: ``$DISTILL_ENCODED_CACHE`` (``off``: None),
    else ``.dvc/tmp/encoded`` when the working directory is a DVC repository (git-ignored,
    local to the clone, like DVC's own state), else None (no cache)."""
    value = os.environ.get(ENCODED_CACHE_ENV)
    if value:
        return None if value == "off" else Path(value)
    return Path(".dvc/tmp/encoded") if Path(".dvc").is_dir() else None


@functools.lru_cache(maxsize=1)
def code_digest() -> str:
    """MD5 over the code and data that turn a record into arrays: ``ml/game`` (encoders,
    labels, card pools) and this module, ``ml.records`` and ``ml.record_schema``."""
    ml_dir = Path(__file__).resolve().parent
    files = sorted(p for p in (ml_dir / "game").rglob("*") if p.is_file() and "__pycache__" not in p.parts)
    files += [ml_dir / name for name in _CODE_FILES]
    digest = hashlib.md5()
    for f in files:
        digest.update(f.relative_to(ml_dir).as_posix().encode() + b"\0" + f.read_bytes() + b"\0")
    return digest.hexdigest()


@dataclass(frozen=True)
class EncodedCache:
    """A folder of encoded batches: one ``.npz`` per decision file, keyed by the file's MD5 and
    ``key`` (the encoder, its inputs and the code, ``for_encoder``), so a JSONL file is parsed and
    validated once, not once per stage per generation. Entries are written atomically; an
    entry that cannot be read or does not match its key is rebuilt (never trusted), and
    nothing else is ever read from it, so deleting the folder is always safe.

    Attributes:
        directory: the cache folder (created when first written).
        key: hex digest of what the encoding depends on besides the file's bytes.
    """

    directory: Path
    key: str

    @classmethod
    def for_encoder(cls, directory: Path, encoder: Encoder, context: str = "") -> EncodedCache:
        """The cache of ``encoder``'s encodings: its class, sizes, ``code_digest()`` and
        ``context`` (what else the encoder was built from: the game, a card table)."""
        kind = f"{type(encoder).__module__}.{type(encoder).__qualname__}"
        parts = [str(ENCODED_CACHE_FORMAT), kind, str(encoder.obs_dim), str(encoder.num_actions), code_digest(), context]
        return cls(Path(directory), hashlib.md5("\n".join(parts).encode()).hexdigest())

    def entry(self, md5: str) -> Path:
        """The cache file of a decision file whose MD5 is ``md5``."""
        return self.directory / f"{md5}-{self.key[:16]}.npz"


@dataclass
class EncodedFile:
    """One decision file, encoded: the trainable records as a set, and per record (all ``R``
    of them, in file order) what the loaders need to split, filter and count.

    Attributes:
        data: the trainable records (T rows), in file order.
        game_id: str array [R].
        episode_return: float64[R], nan where the record has none.
        row: int64[R], the record's row in ``data``, -1 when not trainable.
        skip_reason, skip_detail: str arrays [R], why a record is not trainable ('' when it is).
        bad_lines: the bad lines left out (``file:line: field: problem``; tolerant reads only).
    """

    data: DecisionSet
    game_id: np.ndarray
    episode_return: np.ndarray
    row: np.ndarray
    skip_reason: np.ndarray
    skip_detail: np.ndarray
    bad_lines: list[str]

    def skipped(self, which: np.ndarray) -> Counter[tuple[str, str]]:
        """Non-trainable records among ``which`` (bool[R]) by ``(reason, detail)``."""
        sel = which & (self.row < 0)
        return Counter(zip(self.skip_reason[sel].tolist(), self.skip_detail[sel].tolist(), strict=True))


def _encode_file(path: Path, encoder: Encoder, tolerant: bool) -> EncodedFile:
    bad: list[DataFileError] = []
    records = list(read_records(path, on_error=bad.append if tolerant else None))
    data, row, reasons = _encode_indexed(records, encoder)
    return EncodedFile(
        data,
        np.asarray([r.game_id for r in records], dtype=object),
        np.asarray([np.nan if r.episode_return is None else r.episode_return for r in records], dtype=np.float64),
        row,
        np.asarray([r[0] if r else "" for r in reasons], dtype=object),
        np.asarray([r[1] if r else "" for r in reasons], dtype=object),
        [str(e) for e in bad],
    )


_SET_FIELDS = ("obs", "action_mask", "label", "value_target", "source", "game_id", "targets", "policy")
_STR_FIELDS = {"data_source", "data_game_id", "game_id", "skip_reason", "skip_detail", "bad_lines"}


def _save_entry(path: Path, enc: EncodedFile, md5: str, key: str) -> None:
    arrays: dict[str, np.ndarray] = {f"data_{n}": a for n, a in zip(_SET_FIELDS, enc.data._fields(), strict=True)}
    arrays.update(game_id=enc.game_id, episode_return=enc.episode_return, row=enc.row)
    arrays.update(skip_reason=enc.skip_reason, skip_detail=enc.skip_detail, bad_lines=np.asarray(enc.bad_lines, dtype=object))
    arrays = {n: a.astype(str) if n in _STR_FIELDS else a for n, a in arrays.items()}  # no pickled objects
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f"{path.name}.{os.getpid()}{TMP_SUFFIX}")
    try:
        with tmp.open("wb") as f:
            members: dict[str, Any] = {"md5": np.asarray(md5), "key": np.asarray(key), **arrays}
            np.savez(f, **members)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def _load_entry(path: Path, md5: str, key: str) -> EncodedFile:
    """Raises ValueError (or what numpy/zipfile raise for a damaged file) unless the entry is whole and its own."""
    with np.load(path, allow_pickle=False) as z:
        if str(z["md5"]) != md5 or str(z["key"]) != key:
            raise ValueError("entry of another file or encoder")
        a = {n: z[n].astype(object) if n in _STR_FIELDS else z[n] for n in z.files}  # every member read: CRC-checked
    data = DecisionSet(*(a[f"data_{n}"] for n in _SET_FIELDS))
    n_rec, n_rows = len(a["game_id"]), len(data)
    row = a["row"]
    if not all(len(a[n]) == n_rec for n in ("episode_return", "row", "skip_reason", "skip_detail")):
        raise ValueError("per-record arrays of different lengths")
    if any(len(x) != n_rows for x in data._fields()) or not np.array_equal(row[row >= 0], np.arange(n_rows)):
        raise ValueError("rows do not match the records")
    return EncodedFile(data, a["game_id"], a["episode_return"], row, a["skip_reason"], a["skip_detail"], list(a["bad_lines"]))


def encode_file(path: Path, encoder: Encoder, cache: EncodedCache | None = None, tolerant: bool = False) -> EncodedFile:
    """A decision file, encoded (``encode_records`` per record), through the cache when given.

    The file is parsed and validated only when ``cache`` has no good entry for its bytes;
    the result is the same either way (the entry stores the arrays bit for bit).

    Args:
        path: the JSONL decision file.
        encoder: the game's encoder (the cache's key must be its, ``EncodedCache.for_encoder``).
        cache: the encoded-batch cache, or None (parse every time).
        tolerant: leave bad lines out (``EncodedFile.bad_lines``) instead of raising (Forge files).

    Raises:
        ml.records.RecordError, ml.io.DataFileError: a bad line when not ``tolerant`` (nothing cached).
        ValueError: a record of another game.
        FileNotFoundError: no such file.
    """
    if cache is None:
        return _encode_file(path, encoder, tolerant)
    md5 = file_md5(path)
    entry = cache.entry(md5)
    if entry.exists():
        try:
            return _load_entry(entry, md5, cache.key)
        except Exception as e:  # damaged, truncated or foreign: rebuilt, never trusted
            logger.warning("%s: unreadable encoded-cache entry (%s); re-encoding %s", entry, e, path.name)
    enc = _encode_file(path, encoder, tolerant)
    try:
        _save_entry(entry, enc, md5, cache.key)
    except OSError as e:  # a full disk costs speed, never the stage
        logger.warning("%s: could not write the encoded-cache entry (%s)", entry, e)
    return enc


def _skip_stats(skipped: Counter[tuple[str, str]], decisions: int, top: int = 10) -> dict:
    """Metrics of the non-trainable decisions: by reason, and each reason's most frequent details."""
    by_reason: Counter[str] = Counter()
    details: dict[str, Counter[str]] = {}
    for (reason, detail), n in skipped.items():
        by_reason[reason] += n
        if detail:
            details.setdefault(reason, Counter())[detail] += n
    total = sum(by_reason.values())
    if total:
        parts = []
        for reason, n in by_reason.most_common():
            top5 = ", ".join(f"{d!r} {k}" for d, k in details.get(reason, Counter()).most_common(5))
            parts.append(f"{reason} {n}" + (f" (most frequent: {top5})" if top5 else ""))
        logger.info("%d of %d teacher decisions are not trainable: %s", total, decisions, "; ".join(parts))
    return {
        "non_trainable_decisions": total,
        "non_trainable_by_reason": dict(by_reason.most_common()),
        "non_trainable_top": {r: dict(c.most_common(top)) for r, c in sorted(details.items())},
    }


def teacher_files(teacher_dirs: Sequence[Path], forge_dirs: Sequence[Path] = ()) -> tuple[list[Path], list[Path]]:
    """The files ``load_teacher`` reads: the teacher batches and the imported Forge files."""
    paths = [p for d in teacher_dirs for p in scan_batches(d, sources=("sim",))]
    return paths, [p for d in forge_dirs for p in scan_batches(d, sources=(), include_forge=True)]


def ppo_files(pool_dirs: Sequence[Path], window: int = 0) -> list[Path]:
    """The PPO batches ``load_ppo`` reads: all of ``pool_dirs`` by name, the newest ``window`` (0: all)."""
    paths = sorted((p for d in pool_dirs for p in scan_batches(d, sources=("ppo",))), key=lambda p: p.name)
    return paths[-window:] if window else paths


def load_teacher(
    teacher_dirs: list[Path],
    holdout_fraction: float,
    encoder: Encoder,
    forge_dirs: Sequence[Path] = (),
    cache: EncodedCache | None = None,
) -> tuple[DecisionSet, DecisionSet, dict]:
    """Teacher decisions split by game into (train, holdout).

    Args:
        teacher_dirs: folders holding ``ml-decisions-sim-*.jsonl`` (Forge files there are
            left out with a warning: they belong in the imported Forge folder).
        holdout_fraction: share of teacher games held out (0.10-0.15).
        encoder: the game's encoder (see ``encode_records``).
        forge_dirs: folders of imported Forge files (``ml-decisions-<8 hex>[-tN].jsonl``,
            ``python loop.py import-forge``). A bad line there is logged
            (``file:line: field: problem``), counted and left out; the good lines are kept.
        cache: the encoded-batch cache (``EncodedCache``), or None: each file parsed here.

    Returns:
        ``(train, holdout, stats)``; stats counts files, games and decisions (trainable,
        partial labels, non-trainable by reason and their most frequent details, e.g. the
        unknown cards) and the bad Forge lines.

    Raises:
        ml.records.RecordError: a malformed line in a teacher batch, naming file, line and field.
    """
    paths, forge_paths = teacher_files(teacher_dirs, forge_dirs)
    stray = [p for d in teacher_dirs for p in scan_batches(d, sources=(), include_forge=True)]
    if stray:
        logger.warning(
            "%d Forge file(s) in %s left out: import them with `python loop.py import-forge`", len(stray), teacher_dirs[0]
        )
    files = [encode_file(p, encoder, cache) for p in paths]
    files += [encode_file(p, encoder, cache, tolerant=True) for p in forge_paths]
    bad = [line for f in files for line in f.bad_lines]
    for line in bad:
        logger.warning("%s (left out)", line)
    held_game = {g: in_holdout(g, holdout_fraction) for f in files for g in set(f.game_id.tolist())}
    held = [np.asarray([held_game[g] for g in f.game_id.tolist()], dtype=bool) for f in files]
    parts = [
        (f.data.subset(f.row[~h & (f.row >= 0)]), f.data.subset(f.row[h & (f.row >= 0)]))
        for f, h in zip(files, held, strict=True)
    ]
    empty = empty_set(encoder.obs_dim, encoder.num_actions)
    train = DecisionSet.concat([empty, *(t for t, _ in parts)])
    holdout = DecisionSet.concat([empty, *(h for _, h in parts)])
    skipped: Counter[tuple[str, str]] = Counter()
    for f, h in zip(files, held, strict=True):
        skipped += f.skipped(np.ones(len(h), dtype=bool))
    games = {g for f in files for g in f.game_id.tolist()}
    held_games = {g for g in games if held_game[g]}
    stats = {
        "teacher_files": len(paths),
        "forge_files": len(forge_paths),
        "forge_bad_lines": len(bad),
        "teacher_games": len(games),
        "holdout_games": len(held_games),
        "teacher_decisions": sum(len(f.game_id) for f in files),
        "trainable_decisions": len(train) + len(holdout),
        "partial_label_decisions": int((train.label < 0).sum() + (holdout.label < 0).sum()),
        **_skip_stats(skipped, sum(len(f.game_id) for f in files)),
    }
    return train, holdout, stats


def load_ppo(
    pool_dirs: list[Path],
    encoder: Encoder,
    min_reward_threshold: float,
    window: int = 0,
    cache: EncodedCache | None = None,
) -> tuple[DecisionSet, dict]:
    """Accepted PPO decisions whose game's ``episode_return`` >= ``min_reward_threshold``.

    Args:
        pool_dirs: folders of accepted batches.
        encoder: the game's record encoder.
        min_reward_threshold: games below this ``episode_return`` are dropped.
        window: keep only the newest ``window`` batches (by batch name, ``gen<NNN>-a<k>``:
            the generation that produced them); 0 keeps all. Only those files are read.
        cache: the encoded-batch cache (``EncodedCache``), or None: each file parsed here.

    Returns:
        ``(set, stats)``; stats counts files, kept and filtered games.
    """
    paths = ppo_files(pool_dirs, window)
    files = [encode_file(p, encoder, cache) for p in paths]
    empty = empty_set(encoder.obs_dim, encoder.num_actions)
    low = [f.episode_return < min_reward_threshold for f in files]  # nan (no return) is never below
    data = DecisionSet.concat([empty, *(f.data.subset(f.row[~lo & (f.row >= 0)]) for f, lo in zip(files, low, strict=True))])
    games = {g for f in files for g in f.game_id.tolist()}
    dropped = {g for f, lo in zip(files, low, strict=True) for g in f.game_id[lo].tolist()}
    return data, {"ppo_files": len(paths), "ppo_games": len(games), "ppo_games_filtered": len(dropped)}


def sample_mixture(data: DecisionSet, source_weights: dict[str, float], n: int, rng: np.random.Generator) -> np.ndarray:
    """Row indices of a training sample whose source shares follow ``source_weights``.

    Each of the ``n`` draws first picks a source with probability ``w_s / sum(w)`` over
    the sources that have data, then a row of that source uniformly (with replacement).
    Sources with a weight but no data are left out and the rest renormalised (logged).

    Args:
        data: the candidate rows.
        source_weights: source -> mixture weight (>= 0). Sources not listed get weight 0.
        n: rows to draw (decisions).
        rng: numpy Generator.

    Returns:
        int64[n] row indices.

    Raises:
        ValueError: when no source with a positive weight has data.
    """
    present = {s: np.flatnonzero(data.source == s) for s in source_weights if source_weights[s] > 0}
    missing = [s for s, rows in present.items() if len(rows) == 0]
    if missing:  # normal in generation 0 (no PPO data yet); once per process, not once per epoch (issue #12)
        log_once(logger, logging.INFO, "source_weights names %s but the dataset has no such decisions; renormalising", missing)
    present = {s: rows for s, rows in present.items() if len(rows)}
    if not present:
        raise ValueError(f"no training data for any source with positive weight {source_weights}")
    names = sorted(present)
    weights = np.asarray([source_weights[s] for s in names], dtype=np.float64)
    choice = rng.choice(len(names), size=n, p=weights / weights.sum())
    out = np.empty(n, dtype=np.int64)
    for i, s in enumerate(names):
        slots = np.flatnonzero(choice == i)
        out[slots] = present[s][rng.integers(0, len(present[s]), size=len(slots))]
    return out
