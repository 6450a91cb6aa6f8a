"""Which checkpoint answers: the newest accepted student, a named student or a promoted bot, with provenance.

Names a client may use (``model`` of the policy endpoints, the ``MODEL`` of ``loop.py onnx``):

* ``student`` (the default): the newest accepted student, ``data/merged/students/gen*.pt`` (the
  same rule as ``ml.driver.evaluate.accepted_students``, with ``data/students`` as the fallback);
* ``gen<G>`` (``gen002``): the accepted student of generation G;
* any other name: the promoted bot ``bots/promoted/<name>.pt`` (``ml.driver.bots``).

Provenance: a bot's meta names its attempt and commit (``ml.driver.bots.promote``); a student's
attempt is the accepted attempt of its generation in ``state/eval_history.json`` and its commit is
found by the caller (``commit_of``: the API reads the git log's ``Attempt-Id`` trailers).

:class:`ModelRegistry` serves them: it loads a checkpoint fully before handing it out and swaps
its cached reference under a lock, so a request that already holds a model keeps it.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path

from ml.base.io import DataFileError, read_json
from ml.driver.bots import NAME_RE
from ml.driver.state import HISTORY_FILE, bot_checkpoints
from ml.model.policy import check_shape, load_policy
from ml.model.serving import ServedModel

STUDENT = "student"
"""The name of the newest accepted student."""
STUDENT_DIRS = (Path("data/merged/students"), Path("data/students"))
"""Where accepted students are, in order of preference (see ``ml.driver.evaluate.accepted_students``)."""


class ModelNotFound(LookupError):
    """No checkpoint of that name (the message says which names exist)."""


def student_checkpoints(root: Path) -> list[Path]:
    """Accepted students, oldest first (``data/merged/students``, else ``data/students``)."""
    for rel in STUDENT_DIRS:
        found = sorted((root / rel).glob("gen*.pt"))
        if found:
            return found
    return []


def resolve(root: Path, name: str | None) -> tuple[Path, str]:
    """``(checkpoint path, kind)`` of a model name (see the module docstring); kind is ``student`` or ``bot``.

    Raises:
        ModelNotFound: no accepted student yet, or no student or bot of that name.
    """
    name = name or STUDENT
    students = student_checkpoints(root)
    if name == STUDENT:
        if not students:
            raise ModelNotFound("no accepted student yet (each accepted generation adds one: run `python loop.py`)")
        return students[-1], STUDENT
    by_stem = {p.stem: p for p in students}
    if name in by_stem:
        return by_stem[name], STUDENT
    bots = bot_checkpoints(root)
    if NAME_RE.match(name) and name in bots:
        return bots[name], "bot"
    known = ", ".join([STUDENT, *by_stem, *bots])
    raise ModelNotFound(f"no model named {name!r}; known: {known}")


def accepted_attempt(root: Path, generation: int) -> str | None:
    """Attempt id of the accepted attempt of ``generation`` in ``state/eval_history.json`` (None if unknown)."""
    try:
        history = read_json(root / HISTORY_FILE)
    except (FileNotFoundError, DataFileError):
        return None
    for entry in history if isinstance(history, list) else []:
        if isinstance(entry, dict) and entry.get("generation") == generation and entry.get("verdict") == "accepted":
            return str(entry.get("attempt_id"))
    return None


def load_model(
    root: Path, path: Path, kind: str, commit_of: Callable[[str], str | None], shape: tuple[int, int] | None = None
) -> ServedModel:
    """Load a checkpoint with its provenance.

    Args:
        root: the repository root.
        path: the checkpoint.
        kind: ``student`` or ``bot``.
        commit_of: attempt id -> its commit SHA (None when not committed or unknown).
        shape: ``(obs_dim, num_actions)`` the game's encoder gives; None: not checked.

    Raises:
        ml.model.policy.CheckpointError: unreadable, or it does not fit ``shape``.
    """
    mtime_ns = path.stat().st_mtime_ns if path.exists() else 0
    net, meta = load_policy(path)
    rel = path.relative_to(root).as_posix() if path.is_relative_to(root) else str(path)
    if shape is not None:
        check_shape(net, *shape, what=rel)
    if kind == "bot":
        gen = meta.get("generation")
        return ServedModel(
            net,
            path.stem,
            kind,
            rel,
            meta.get("attempt_id"),
            meta.get("commit"),
            gen if isinstance(gen, int) else None,
            mtime_ns,
        )
    gen = meta.get("generation")
    if not isinstance(gen, int):
        gen = int(path.stem[3:]) if path.stem[3:].isdecimal() else None
    attempt_id = accepted_attempt(root, gen) if gen is not None else None
    commit = commit_of(attempt_id) if attempt_id else None
    return ServedModel(net, path.stem, kind, rel, attempt_id, commit, gen, mtime_ns)


class ModelRegistry:
    """Loaded models by checkpoint path, and the default model name (thread-safe).

    Args:
        root: the repository root.
        commit_of: attempt id -> commit SHA (see :func:`load_model`).
        shape: ``(obs_dim, num_actions)`` every served model must have (None: unchecked).
    """

    def __init__(self, root: Path, commit_of: Callable[[str], str | None], shape: tuple[int, int] | None = None) -> None:
        self.root, self.commit_of, self.shape = Path(root), commit_of, shape
        self.default = STUDENT
        self._loaded: dict[Path, ServedModel] = {}
        self._lock = threading.Lock()

    def get(self, name: str | None = None) -> ServedModel:
        """The model called ``name`` (None: the default), loaded on first use and again when its file changes.

        A newly accepted student becomes ``student`` at the next request; the previous model object
        stays valid for whoever holds it.

        Raises:
            ModelNotFound: see :func:`resolve`.
            ml.model.policy.CheckpointError: the checkpoint cannot be served.
        """
        path, kind = resolve(self.root, name or self.default)
        try:
            mtime_ns = path.stat().st_mtime_ns
        except FileNotFoundError as e:  # replaced between the listing and now: the next request sees the new one
            raise ModelNotFound(f"{path} disappeared while loading; retry") from e
        cached = self._loaded.get(path)
        if cached is not None and cached.mtime_ns == mtime_ns:
            return cached
        model = load_model(self.root, path, kind, self.commit_of, self.shape)  # fully loaded before anyone sees it
        with self._lock:
            self._loaded[path] = model  # one reference swap
        return model

    def select(self, name: str) -> ServedModel:
        """Make ``name`` the default model (it is loaded first; a bad name changes nothing).

        Raises:
            ModelNotFound, ml.model.policy.CheckpointError: as :meth:`get`.
        """
        model = self.get(name)
        with self._lock:
            self.default = name
        return model
