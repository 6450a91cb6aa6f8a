"""File I/O shared by every stage: atomic writes, JSON reading, and the errors that name file, line and field.

Every output of the project is written through these helpers: the data goes to a temporary
file in the destination directory (its name ends in ``.tmp``, which every reader ignores), is
fsynced, and is then moved over the final name with :func:`os.replace`. A killed writer thus
leaves either the old file or the new one, never a half-written file under the final name.
JSON Lines (reading Forge's quirks, and the appending writer) are ``ml.base.jsonl``.

Errors in user files raise :class:`DataFileError`, whose message reads
``"<file>:<line>: <field>: <problem>"``; a write that fails raises :class:`WriteError`, whose
message names what was being written, the operation and path that failed, and the system's
reason (``cannot write data/pool (creating data/pool.tmp): Operation not permitted``).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any, TypeAlias

_UMASK = os.umask(0)
os.umask(_UMASK)  # read once at import: os.umask can only be read by setting it, racy in threads
_FILE_MODE = 0o666 & ~_UMASK
"""Mode of files written atomically: what ``open()`` would give under the process umask."""

JSONValue: TypeAlias = Any
"""A parsed JSON value: None, bool, int, float, str, a list of JSON values or an object with str keys.

Typed as ``json.loads`` types what it returns (``Any``): every reader checks the shape where it
uses it (a pydantic model, or a :class:`DataFileError` naming the line and field), and a
union here would make each of those readers narrow by hand what it has already validated.
"""
JSONObject: TypeAlias = dict[str, JSONValue]
"""A parsed JSON object (what one JSONL line holds)."""

UTF8_BOM = b"\xef\xbb\xbf"
"""A UTF-8 byte-order mark; ``ml.base.jsonl.iter_jsonl`` skips one at the start of a file."""

TMP_SUFFIX = ".tmp"
"""Suffix of every temporary file; readers and :func:`ml.data.batch_files.classify_file` ignore it."""


class DataFileError(ValueError):
    """A data file (JSON, JSONL, params) holds something that cannot be read.

    The message reads ``"<file>:<line>: <field>: <problem>"``; the line and field parts are
    left out when unknown.

    Attributes:
        path: the offending file.
        line: 1-based line number, or None when not known (e.g. a whole-file problem).
        field: dotted path of the offending field (``players.2.cmdr_dmg``), or None.
        problem: what is wrong, without the location.
    """

    def __init__(self, path: str | os.PathLike[str], line: int | None, field: str | None, problem: str) -> None:
        self.path = Path(path)
        self.line = line
        self.field = field
        self.problem = problem
        location = str(self.path) if line is None else f"{self.path}:{line}"
        parts = [location, *([field] if field else []), problem]
        super().__init__(": ".join(parts))

    def __reduce__(self) -> tuple[Any, ...]:  # keep picklable across worker processes
        return (type(self), (self.path, self.line, self.field, self.problem))


class WriteError(OSError):
    """A write failed: ``cannot write <target> (<doing>): <reason>``.

    An ``OSError`` (``errno`` and ``strerror`` are the failed call's), so a caller that copes
    with one copes with this. Paths are shown relative to the working directory when under it.

    Attributes:
        target: the file or folder being written (its final name: ``data/pool``, not ``data/pool.tmp``).
        doing: the operation that failed and its path (``creating data/pool.tmp``, ``renaming a to b``).
    """

    def __init__(self, target: str | os.PathLike[str], doing: str, errno: int | None, reason: str) -> None:
        super().__init__(errno, reason)
        self.target, self.doing, self.reason = Path(target), doing, reason

    def __str__(self) -> str:
        return f"cannot write {shown(self.target)} ({self.doing}): {self.reason}"

    def __reduce__(self) -> tuple[Any, ...]:  # keep picklable across worker processes
        return (type(self), (self.target, self.doing, self.errno, self.reason))

    @classmethod
    def of(cls, target: str | os.PathLike[str], doing: str, error: OSError) -> WriteError:
        """``error`` (a failed call) as the failure of writing ``target`` while ``doing``."""
        return cls(target, doing, error.errno, error.strerror or str(error))


def shown(path: str | os.PathLike[str]) -> str:
    """``path`` relative to the working directory when it is under it, else as given."""
    p = Path(path)
    with contextlib.suppress(ValueError, OSError):
        return str(p.absolute().relative_to(Path.cwd()))
    return str(p)


@contextlib.contextmanager
def writing(target: str | os.PathLike[str], doing: str) -> Iterator[None]:
    """Raise an ``OSError`` of the block as a :class:`WriteError` of ``target`` while ``doing``
    (a WriteError passes unchanged).

    Raises:
        WriteError: the block raised an OSError.
    """
    try:
        yield
    except WriteError:
        raise
    except OSError as e:
        raise WriteError.of(target, doing, e) from e


def remove_tree(path: Path, target: str | os.PathLike[str] | None = None) -> None:
    """Remove the folder (or file) ``path`` and everything in it; nothing there is fine.

    Raises:
        WriteError: something could not be removed (``removing <that path>``), as part of
            writing ``target`` (default: ``path``).
    """

    def failed(_: Any, name: str, exc: Any) -> None:  # rmtree's own error names the entry alone, not its folder
        error = exc if isinstance(exc, BaseException) else exc[1]
        if isinstance(error, FileNotFoundError):  # removed meanwhile: fine
            return
        if not isinstance(error, OSError):
            raise error
        raise WriteError.of(target or path, f"removing {shown(name)}", error) from error

    if path.is_dir() and not path.is_symlink():
        if sys.version_info >= (3, 12):
            shutil.rmtree(path, onexc=failed)
        else:
            shutil.rmtree(path, onerror=failed)
        return
    try:
        path.unlink(missing_ok=True)
    except OSError as e:
        raise WriteError.of(target or path, f"removing {shown(path)}", e) from e


# --------------------------------------------------------------------------- atomic writes


def fsync_dir(directory: Path) -> None:
    """Best-effort fsync of a directory so a rename survives a power cut (no-op where unsupported)."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def atomic_write_bytes(path: str | os.PathLike[str], data: bytes) -> None:
    """Write ``data`` to ``path`` atomically (temp file in the same directory, fsync, rename).

    Parent directories are created. A unique temporary name (``.<name>.<random>.tmp``) lets
    two writers race safely: the last rename wins and neither sees a partial file.

    Args:
        path: destination file.
        data: the complete new content.

    Raises:
        WriteError: if the directory cannot be created or the file cannot be written (the
            message names ``path`` and the step that failed); the old file (if any) is left
            untouched and the temporary file is removed.
    """
    path = Path(path)
    with writing(path, f"creating the folder {shown(path.parent)}"):
        path.parent.mkdir(parents=True, exist_ok=True)
    with writing(path, f"creating a temporary file in {shown(path.parent)}"):
        fd, tmp_name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=TMP_SUFFIX)
    try:
        with writing(path, f"writing {shown(tmp_name)}"):
            os.chmod(tmp_name, _FILE_MODE)  # mkstemp's 0600 would make state files private
            with os.fdopen(fd, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
        with writing(path, f"renaming {shown(tmp_name)} to {shown(path)}"):
            os.replace(tmp_name, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp_name)
        raise
    fsync_dir(path.parent)


def atomic_write_text(path: str | os.PathLike[str], text: str) -> None:
    """Write ``text`` (UTF-8) to ``path`` atomically; see :func:`atomic_write_bytes`.

    Raises:
        WriteError: as :func:`atomic_write_bytes`.
        UnicodeEncodeError: if ``text`` holds lone surrogates; nothing is written.
    """
    atomic_write_bytes(path, text.encode("utf-8"))


def atomic_write_json(path: str | os.PathLike[str], obj: JSONValue) -> None:
    """Write ``obj`` as indented JSON (indent=2, keys in insertion order, trailing newline).

    The object is serialized before any file is opened, so a serialization failure leaves
    the old file intact and no temporary file behind.

    Args:
        path: destination file.
        obj: a JSON-serializable object. Non-ASCII text is written raw (UTF-8).

    Raises:
        TypeError: if ``obj`` is not JSON-serializable (nothing is written).
        ValueError: on a circular reference (nothing is written).
        WriteError: as :func:`atomic_write_bytes`.
    """
    text = json.dumps(obj, indent=2, sort_keys=False, ensure_ascii=False) + "\n"
    atomic_write_text(path, text)


# --------------------------------------------------------------------------- reading


def read_json(path: str | os.PathLike[str]) -> JSONValue:
    """Read a whole JSON file (UTF-8).

    Args:
        path: the file.

    Returns:
        The parsed JSON value.

    Raises:
        DataFileError: if the file is not valid UTF-8 or not valid JSON; the message names
            the file and the line (and column) of the problem.
        FileNotFoundError: if the file does not exist.
    """
    path = Path(path)
    raw = path.read_bytes()
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        line = raw[: e.start].count(b"\n") + 1
        raise DataFileError(path, line, None, f"not valid UTF-8 ({e.reason})") from None
    try:
        return json.loads(text, strict=False)
    except json.JSONDecodeError as e:
        raise DataFileError(path, e.lineno, None, f"invalid JSON: {e.msg} (column {e.colno})") from None


_MD5_MEMO: dict[tuple[str, int, int, int, int], str] = {}


def file_md5(path: str | os.PathLike[str]) -> str:
    """Hex MD5 of a file's bytes (DVC's content hash of a file); remembered in the process
    while the file's device, inode, size and mtime stay the same.

    Raises:
        OSError: the file cannot be read (FileNotFoundError when missing).
    """
    path = Path(path)
    st = path.stat()
    memo = (str(path.resolve()), st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)
    if memo not in _MD5_MEMO:
        digest = hashlib.md5()
        with path.open("rb") as f:
            while chunk := f.read(1 << 20):
                digest.update(chunk)
        _MD5_MEMO[memo] = digest.hexdigest()
    return _MD5_MEMO[memo]
