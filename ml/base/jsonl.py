"""JSON Lines: reading with file:line:field errors, and the writer that appends whole records atomically.

Reading follows the quirks of real Forge files (``shared/docs/forge-decision-format.md``):

* Forge's hand-built JSON escapes only ``\\\\ \\" \\n \\r \\t``, so other control characters
  and non-ASCII letters appear raw (UTF-8) inside strings. Lines are split on ``\\n`` only
  and parsed with ``json.loads(strict=False)``.
* Forge appends and flushes per game, so a killed run can leave a truncated last line with
  no trailing newline. :func:`iter_jsonl` skips such a line with a warning.
* An empty (or whitespace-only) line is a bad line like any other: JSON Lines
  (https://jsonlines.org) holds one JSON value on every line. The newline that ends the
  last line makes no empty line.

Bad lines raise ``ml.base.io.DataFileError`` (``"<file>:<line>: <field>: <problem>"``).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from types import TracebackType
from typing import IO

from ml.base.io import (
    TMP_SUFFIX,
    UTF8_BOM,
    DataFileError,
    JSONObject,
    JSONValue,
    WriteError,
    fsync_dir,
    shown,
    writing,
)

logger = logging.getLogger(__name__)


def _parse_line(path: Path, line_no: int, raw: bytes) -> JSONObject:
    """Parse one JSONL line into a dict, raising :class:`DataFileError` on any problem."""
    if not raw.strip():
        raise DataFileError(path, line_no, None, "empty line (a JSONL line holds one JSON object)")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise DataFileError(path, line_no, None, f"not valid UTF-8 ({e.reason} at byte {e.start})") from None
    try:
        obj = json.loads(text, strict=False)
    except json.JSONDecodeError as e:
        # e.colno restarts after the line's own newline: a line cut short would read "column 1"
        raise DataFileError(path, line_no, None, f"invalid JSON: {e.msg} (column {e.pos + 1})") from None
    if not isinstance(obj, dict):
        raise DataFileError(path, line_no, None, f"expected a JSON object, got {type(obj).__name__}")
    return obj


def iter_jsonl(
    path: str | os.PathLike[str],
    *,
    allow_truncated_last: bool = True,
    on_error: Callable[[DataFileError], None] | None = None,
    span: tuple[int, int, int] | None = None,
) -> Iterator[tuple[int, JSONObject]]:
    """Stream the JSON objects of a JSONL file, one line at a time.

    Lines are split on ``\\n`` only (a raw ``\\r`` or U+2028 inside a string does not end a
    line); an empty or whitespace-only line is a bad line (the newline ending the last line
    makes none). Raw control characters inside strings are accepted.
    A UTF-8 byte-order mark at the start of the file (Windows editors write one) is skipped.

    Args:
        path: the file.
        allow_truncated_last: if true, a last line that lacks its trailing newline and does
            not parse (a killed Forge worker's truncated write) is skipped with a logged
            warning (or, with ``on_error``, reported to it). If false, it is a bad line like any other.
        on_error: if given, every bad line is passed to it as a :class:`DataFileError` and
            skipped, and reading goes on with the next line (a caller that keeps the good
            lines of a file and reports all bad ones); if None, the first bad line raises.
        span: ``(start, end, first_line)``: only the lines that start at byte offsets in
            ``[start, end)``, ``start`` the offset of a line's start whose number is ``first_line``
            (:func:`line_spans`); None: the whole file.

    Yields:
        ``(line_no, obj)``: the 1-based line number and the parsed object.

    Raises:
        DataFileError: without ``on_error``, for a line that is empty, not valid UTF-8, not
            valid JSON or not an object, naming the file and the line.
        FileNotFoundError: if the file does not exist.
    """
    path = Path(path)
    start, end, first = span if span is not None else (0, None, 1)
    with open(path, "rb") as f:
        f.seek(start)
        at = start
        for line_no, raw in enumerate(f, start=first):
            if end is not None and at >= end:
                return
            at += len(raw)
            if line_no == 1 and raw.startswith(UTF8_BOM):  # a byte-order mark is never JSON: not part of line 1
                raw = raw[len(UTF8_BOM) :]
            try:
                obj = _parse_line(path, line_no, raw)
            except DataFileError as e:
                if raw.endswith(b"\n") or not allow_truncated_last:
                    if on_error is None:
                        raise
                    on_error(e)
                    continue
                problem = f"truncated last line ({len(raw)} bytes, no newline): {e.problem}"
                if on_error is None:
                    logger.warning("%s:%d: skipping %s", path, line_no, problem)
                else:
                    on_error(DataFileError(path, line_no, None, problem))
                return
            yield line_no, obj


def line_spans(path: str | os.PathLike[str], parts: int) -> list[tuple[int, int, int]]:
    """``path`` cut into at most ``parts`` consecutive ``iter_jsonl`` spans of about equal bytes, each
    starting at a line's start: ``(start, end, first_line)``, covering the file once.

    Raises:
        FileNotFoundError: if the file does not exist.
    """
    size = Path(path).stat().st_size
    cuts = [0]
    with open(path, "rb") as f:
        for k in range(1, max(parts, 1)):
            f.seek(max(size * k // parts - 1, cuts[-1]))
            f.readline()  # to the start of the next line
            if (at := f.tell()) >= size:
                break
            if at > cuts[-1]:
                cuts.append(at)
        spans, line, prev = [], 1, 0
        for a, b in zip(cuts, [*cuts[1:], size], strict=True):
            f.seek(prev)
            line += f.read(a - prev).count(b"\n")
            spans.append((a, b, line))
            prev = a
    return spans


# --------------------------------------------------------------------------- JSONL writing


class JsonlWriter:
    """Write a JSONL file atomically: lines go to ``<path>.tmp``, renamed to ``<path>`` on close.

    Use as a context manager. On a clean exit (or :meth:`close`) the temporary file is
    fsynced and renamed over the final name; if the block raises (or :meth:`abort` is
    called) the temporary file is removed, so a killed or failed writer never leaves a half
    batch under the final name. A stale ``.tmp`` from an earlier killed run is overwritten.

    Args:
        path: the final file name. Parent directories are created.

    Raises:
        WriteError: the folder or the temporary file cannot be created (naming ``path`` and the step).

    Attributes:
        path: the final file.
        tmp_path: the temporary file being written (``<path>.tmp``).
        count: number of lines (records) written so far.
        closed: whether the writer has been closed or aborted.
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self.tmp_path = self.path.with_name(self.path.name + TMP_SUFFIX)
        self.count = 0
        self.closed = False
        with writing(self.path, f"creating the folder {shown(self.path.parent)}"):
            self.path.parent.mkdir(parents=True, exist_ok=True)
        with writing(self.path, f"creating {shown(self.tmp_path)}"):
            self._f: IO[str] | None = open(self.tmp_path, "w", encoding="utf-8", newline="\n")

    def write(self, obj: Mapping[str, JSONValue]) -> None:
        """Append ``obj`` as one compact JSON line (non-ASCII written raw).

        Raises:
            TypeError: if ``obj`` is not JSON-serializable (nothing is appended).
            ValueError: if the writer is closed.
        """
        self.write_line(json.dumps(obj, ensure_ascii=False, separators=(",", ":")))

    def write_line(self, line: str) -> None:
        """Append an already-serialized JSON line (without its newline).

        Raises:
            ValueError: if ``line`` contains a newline or the writer is closed.
            WriteError: the temporary file cannot be written (a full disk).
        """
        if self._f is None:
            raise ValueError(f"{self.tmp_path}: write on a closed JsonlWriter")
        if "\n" in line:
            raise ValueError(f"{self.tmp_path}: a JSONL line must not contain a newline")
        try:
            self._f.write(line)
            self._f.write("\n")
        except OSError as e:
            raise WriteError.of(self.path, f"writing {shown(self.tmp_path)}", e) from e
        self.count += 1

    def close(self) -> None:
        """Flush, fsync and rename the temporary file to the final name. Idempotent.

        Raises:
            WriteError: if the flush or rename fails (the temporary file is then removed).
        """
        if self._f is None:
            return
        f, self._f = self._f, None
        try:
            with writing(self.path, f"writing {shown(self.tmp_path)}"):
                f.flush()
                os.fsync(f.fileno())
                f.close()
            with writing(self.path, f"renaming {shown(self.tmp_path)} to {shown(self.path)}"):
                os.replace(self.tmp_path, self.path)
        except BaseException:
            f.close()
            with contextlib.suppress(FileNotFoundError):
                self.tmp_path.unlink()
            raise
        finally:
            self.closed = True
        fsync_dir(self.path.parent)

    def abort(self) -> None:
        """Discard everything written: close and remove the temporary file. Idempotent."""
        if self._f is not None:
            f, self._f = self._f, None
            f.close()
        self.closed = True
        with contextlib.suppress(FileNotFoundError):
            self.tmp_path.unlink()

    def __enter__(self) -> JsonlWriter:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        if exc_type is None:
            self.close()
        else:
            self.abort()
