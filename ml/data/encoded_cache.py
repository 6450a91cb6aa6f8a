"""The encoded-batch cache: each decision file is parsed, validated and encoded once.

One ``.npz`` per decision file, keyed by the file's MD5 and by what the encoding depends on
besides its bytes (the encoder, its sizes, the code, a card table): ``EncodedCache``. The
loaders (``ml.data.dataset``) read every file through :func:`encode_file`, so the train stage and
the gate share the work, and a batch is parsed once per run instead of once per stage per
generation; JSONL stays the format of record (deleting the cache is always safe).
"""

from __future__ import annotations

import functools
import hashlib
import logging
import os
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ml.base.io import TMP_SUFFIX, DataFileError, file_md5
from ml.base.jsonl import line_spans
from ml.data.batch_files import read_records
from ml.data.decisions import DecisionSet, _encode_indexed
from ml.game.spec import Encoder
from ml.runtime.executor import LOCAL, Executor

logger = logging.getLogger(__name__)


ENCODED_CACHE_FORMAT = 3
"""Version of the encoded-batch cache entries (``EncodedCache``); bump it when their layout changes
(2: the agent's ``policy`` of schema-2 PPO records; 3: the rows' sampling ``weight``)."""
ENCODED_CACHE_ENV = "DISTILL_ENCODED_CACHE"
"""Environment variable naming the encoded-batch cache folder (``off``: no cache)."""
ENCODED_CACHE_MAX_MB_ENV = "DISTILL_ENCODED_CACHE_MAX_MB"
"""Environment variable: the cache's size cap in MiB (default ``DEFAULT_MAX_MB``)."""
DEFAULT_MAX_MB = 4096
"""Default cap of the cache folder, MiB: room for the `full` profile's teacher batch (~120 MiB
encoded), the newest PPO batches and a few code versions; least recently used entries go first."""
_CODE_FILES = ("data/decisions.py", "data/encoded_cache.py", "data/dataset.py", "base/io.py", "data/batch_files.py")
"""Beside ``ml/game`` (which holds ``ml.game.record``), relative to the ``ml`` package."""


class CacheConfigError(ValueError):
    """A bad cache setting in the environment (``$DISTILL_ENCODED_CACHE_MAX_MB``)."""


def default_cache_dir() -> Path | None:
    """The encoded-batch cache folder of a stage: ``$DISTILL_ENCODED_CACHE`` (``off``: None),
    else ``.dvc/tmp/encoded`` when the working directory is a DVC repository (git-ignored,
    local to the clone, like DVC's own state), else None (no cache). The stages call it before
    any work, so it also checks the cap (``max_cache_bytes``) whatever the cache holds.

    Raises:
        CacheConfigError: a bad ``$DISTILL_ENCODED_CACHE_MAX_MB``.
    """
    value = os.environ.get(ENCODED_CACHE_ENV)
    if value:
        folder = None if value == "off" else Path(value)
    else:
        folder = Path(".dvc/tmp/encoded") if Path(".dvc").is_dir() else None
    if folder is not None:
        max_cache_bytes()
    return folder


@functools.lru_cache(maxsize=1)
def code_digest() -> str:
    """MD5 over the code and data that turn a record into arrays: ``ml/game`` (encoders,
    labels, card pools), ``ml.data.decisions``, this module, ``ml.data.dataset``, ``ml.base.io`` (the JSONL reader),
    ``ml.data.batch_files`` and ``ml.game.record``."""
    ml_dir = Path(__file__).resolve().parents[1]
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

    def prune(self, max_bytes: int, keep: Path | None = None) -> list[Path]:
        """Delete the least recently used entries (by mtime: a read touches its entry) until the
        folder's entries total at most ``max_bytes``; ``keep`` is never deleted. Entries of
        other keys (older code, other encoders) count and go the same way, so the cache stays
        flat however many generations a run accepts.

        Returns:
            the deleted entries, oldest first.
        """
        entries = []
        for p in self.directory.glob("*.npz"):
            try:
                st = p.stat()
            except FileNotFoundError:  # another stage pruned it
                continue
            entries.append((st.st_mtime_ns, st.st_size, p))
        total = sum(size for _, size, _ in entries)
        deleted = []
        for _, size, p in sorted(entries, key=lambda e: (e[0], e[2].name)):
            if total <= max_bytes:
                break
            if keep is not None and p == keep:
                continue
            p.unlink(missing_ok=True)
            total -= size
            deleted.append(p)
        if deleted:
            logger.info(
                "encoded cache: %d least recently used entries deleted (cap %.0f MiB)", len(deleted), max_bytes / 2**20
            )
        return deleted


def max_cache_bytes() -> int:
    """The cache's size cap in bytes: ``$DISTILL_ENCODED_CACHE_MAX_MB`` MiB (``inf``: no cap),
    else ``DEFAULT_MAX_MB``.

    Raises:
        CacheConfigError: the variable is not a number >= 0.
    """
    raw = os.environ.get(ENCODED_CACHE_MAX_MB_ENV, "")
    try:
        mb = float(raw) if raw else float(DEFAULT_MAX_MB)
    except ValueError:
        mb = -1.0
    if not mb >= 0:
        raise CacheConfigError(f"{ENCODED_CACHE_MAX_MB_ENV}={raw!r}: expected a size in MiB (a number >= 0, or inf: no cap)")
    return int(min(mb, 2.0**43) * 2**20)  # inf and beyond: 8 EiB, more than any disk


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


SPLIT_BYTES = 16 * 2**20
"""A decision file at least this large is parsed in pieces by an executor's workers (``encode_file``)."""


def _encode_file(path: Path, encoder: Encoder, tolerant: bool, executor: Executor = LOCAL) -> EncodedFile:
    """The file encoded here, or, when ``executor`` has workers and the file is ``SPLIT_BYTES`` or
    more, in ``2 * slots`` pieces of whole lines (``line_spans``) joined in file order: the same
    arrays either way (each record is encoded alone); the first bad line of the file raises first."""
    if executor.slots < 2 or path.stat().st_size < SPLIT_BYTES:
        return _encode_span((path, None, tolerant), encoder)
    tasks = [(path, span, tolerant) for span in line_spans(path, 2 * executor.slots)]
    parts = executor.map(_encode_span, tasks, executor.share(encoder))
    offsets = np.cumsum([0] + [len(p.data) for p in parts[:-1]])
    return EncodedFile(
        DecisionSet.concat([p.data for p in parts]),
        np.concatenate([p.game_id for p in parts]),
        np.concatenate([p.episode_return for p in parts]),
        np.concatenate([np.where(p.row >= 0, p.row + k, -1) for p, k in zip(parts, offsets, strict=True)]),
        np.concatenate([p.skip_reason for p in parts]),
        np.concatenate([p.skip_detail for p in parts]),
        [line for p in parts for line in p.bad_lines],
    )


def _encode_span(task: tuple[Path, tuple[int, int, int] | None, bool], encoder: Encoder) -> EncodedFile:
    """One span of a decision file (None: all of it), encoded: a chunk of ``_encode_file``."""
    path, span, tolerant = task
    bad: list[DataFileError] = []
    records = list(read_records(path, on_error=bad.append if tolerant else None, span=span))
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


_SET_FIELDS = ("obs", "action_mask", "label", "value_target", "source", "game_id", "targets", "policy", "weight")
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


def encode_file(
    path: Path, encoder: Encoder, cache: EncodedCache | None = None, tolerant: bool = False, executor: Executor = LOCAL
) -> EncodedFile:
    """A decision file, encoded (``encode_records`` per record), through the cache when given.

    The file is parsed and validated only when ``cache`` has no good entry for its bytes;
    the result is the same either way (the entry stores the arrays bit for bit).

    Args:
        path: the JSONL decision file.
        encoder: the game's encoder (the cache's key must be its, ``EncodedCache.for_encoder``).
        cache: the encoded-batch cache, or None (parse every time).
        tolerant: leave bad lines out (``EncodedFile.bad_lines``) instead of raising (Forge files).
        executor: parses a large file in pieces where it has workers (``_encode_file``); the result is the same.

    Raises:
        ml.data.batch_files.RecordError, ml.base.io.DataFileError: a bad line when not ``tolerant`` (nothing cached).
        ValueError: a record of another game.
        CacheConfigError: a bad ``$DISTILL_ENCODED_CACHE_MAX_MB`` (``max_cache_bytes``).
        FileNotFoundError: no such file.
    """
    if cache is None:
        return _encode_file(path, encoder, tolerant, executor)
    cap = max_cache_bytes()  # a bad value fails before any work, cached or not
    md5 = file_md5(path)
    entry = cache.entry(md5)
    if entry.exists():
        try:
            enc = _load_entry(entry, md5, cache.key)
            os.utime(entry)  # recently used: pruned last
            return enc
        except Exception as e:  # damaged, truncated or foreign: rebuilt, never trusted
            logger.warning("%s: unreadable encoded-cache entry (%s); re-encoding %s", entry, e, path.name)
    enc = _encode_file(path, encoder, tolerant, executor)
    try:
        _save_entry(entry, enc, md5, cache.key)
        cache.prune(cap, keep=entry)
    except OSError as e:  # a full disk costs speed, never the stage
        logger.warning("%s: could not write the encoded-cache entry (%s)", entry, e)
    return enc
