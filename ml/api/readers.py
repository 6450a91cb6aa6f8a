"""Read-only views of the loop's files for the API: state, history, metrics, runtime files, git log.

Every reader tolerates a missing file (a fresh clone has no ``state/``) and never calls DVC;
the loop writes all of these files atomically (``ml.base.io``), so a reader sees either the old
or the new content. File paths are fixed here and never come from a request.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from git import GitCommandError, InvalidGitRepositoryError, NoSuchPathError, Repo

from ml.base.io import DataFileError, JSONObject, JSONValue, read_json
from ml.config.params import Params, load_params
from ml.config.yaml_file import ParamsError
from ml.driver.state import HISTORY_FILE, RUNTIME_DIR, STATE_FILE, LoopState
from ml.game.checks import check_params
from ml.judge.elo import ELO_FILE

logger = logging.getLogger(__name__)

TRAIN_METRICS_FILE = Path("metrics/train.json")
LAUNCH_FILE = RUNTIME_DIR / "api-launch.json"
"""Pid and command line of the last loop the API launched (covers the gap before status.json)."""
LOG_FILE = RUNTIME_DIR / "loop.log"
TRAILER = "Attempt-Id"
GIT_LOG_LIMIT = 5000
"""Commits searched for ``Attempt-Id:`` trailers (a long run makes one commit per attempt)."""


class RepoReadError(RuntimeError):
    """A loop file exists but cannot be read; the message names the file."""


@dataclass(frozen=True)
class AttemptCommit:
    """One commit with an ``Attempt-Id:`` trailer."""

    sha: str
    subject: str
    attempt_id: str


def read_json_or(path: Path, default: JSONValue) -> JSONValue:
    """``read_json(path)``, or ``default`` when the file is absent.

    Raises:
        RepoReadError: the file exists but is not valid JSON.
    """
    try:
        return read_json(path)
    except FileNotFoundError:
        return default
    except DataFileError as e:
        raise RepoReadError(str(e)) from e


class RepoView:
    """Reads one loop repository (its root is fixed at construction)."""

    def __init__(self, root: Path) -> None:
        """Args:
            root: the repository root (where ``loop.py`` and ``params.yaml`` are).

        Raises:
            RepoReadError: ``root`` is not a git repository.
        """
        self.root = Path(root).resolve()
        try:
            self._repo = Repo(self.root)
        except (InvalidGitRepositoryError, NoSuchPathError) as e:
            raise RepoReadError(f"{self.root} is not a git repository") from e
        self._git_lock = threading.Lock()
        self._commits_cache: tuple[str, dict[str, AttemptCommit]] | None = None

    def path(self, rel: Path) -> Path:
        return self.root / rel

    # ------------------------------------------------------------------ versioned files
    def state(self) -> LoopState:
        """``state/curriculum_state.json`` (a fresh ``LoopState`` when absent)."""
        raw = read_json_or(self.path(STATE_FILE), None)
        return LoopState() if raw is None else LoopState.model_validate(raw)

    def eval_history(self) -> list[JSONObject]:
        """``state/eval_history.json``: one dict per finished attempt, oldest first."""
        raw = read_json_or(self.path(HISTORY_FILE), [])
        if not isinstance(raw, list):
            raise RepoReadError(f"{self.path(HISTORY_FILE)}: expected a JSON list")
        return raw

    def elo_history(self) -> JSONValue:
        """``state/elo_history.json`` as written, or ``[]`` when absent."""
        return read_json_or(self.path(ELO_FILE), [])

    def train_metrics(self) -> JSONObject:
        """``metrics/train.json`` of the last train stage that ran (``{}`` when absent)."""
        raw = read_json_or(self.path(TRAIN_METRICS_FILE), {})
        return raw if isinstance(raw, dict) else {}

    def params(self) -> Params | None:
        """The validated ``params.yaml``, or None when it is missing or invalid (logged)."""
        try:
            return load_params(self.path(Path("params.yaml")), check=check_params)
        except ParamsError as e:
            logger.warning("params.yaml unreadable: %s", e)
            return None

    # ------------------------------------------------------------------ runtime files (.dvc/tmp/loop)
    def runtime(self, rel: Path) -> JSONObject:
        """A runtime JSON file as a dict; ``{}`` when absent or half-written by a foreign writer."""
        try:
            raw = read_json_or(self.path(rel), {})
        except RepoReadError:
            return {}
        return raw if isinstance(raw, dict) else {}

    # ------------------------------------------------------------------ git
    def git(self, *args: str, env: dict[str, str] | None = None) -> str:
        """Run ``git <args>`` in the repository (serialized with the other git calls of this view).

        Raises:
            git.GitCommandError: git failed.
        """
        with self._git_lock:
            return self._repo.git.execute(["git", *args], env=env)

    def head(self) -> tuple[str | None, str | None]:
        """(sha, subject) of HEAD, or (None, None) before the first commit."""
        with self._git_lock:
            try:
                commit = self._repo.head.commit
            except ValueError:
                return None, None
            return commit.hexsha, commit.summary if isinstance(commit.summary, str) else commit.summary.decode()

    def attempt_commits(self) -> dict[str, AttemptCommit]:
        """Commits with an ``Attempt-Id:`` trailer, keyed by attempt id (cached per HEAD)."""
        head, _ = self.head()
        if head is None:
            return {}
        if self._commits_cache and self._commits_cache[0] == head:
            return self._commits_cache[1]
        fmt = f"--format=%H%x1f%s%x1f%(trailers:key={TRAILER},valueonly,separator=%x2c)%x1e"
        try:
            out = self.git("log", f"-{GIT_LOG_LIMIT}", fmt, f"--grep=^{TRAILER}:")
        except GitCommandError as e:
            logger.warning("git log failed: %s", e)
            return {}
        found: dict[str, AttemptCommit] = {}
        for record in out.split("\x1e"):
            parts = record.strip("\n").split("\x1f")
            if len(parts) != 3:
                continue
            sha, subject, ids = parts
            for attempt_id in filter(None, (s.strip() for s in ids.split(","))):
                found.setdefault(attempt_id, AttemptCommit(sha=sha, subject=subject, attempt_id=attempt_id))
        self._commits_cache = (head, found)
        return found

    def history_with_commits(self, include_metrics: bool = True) -> list[JSONObject]:
        """Every attempt of ``eval_history.json`` plus ``commit`` (its SHA, or None while uncommitted)."""
        commits = self.attempt_commits()
        out = []
        for entry in self.eval_history():
            row = dict(entry) if include_metrics else {k: v for k, v in entry.items() if k != "metrics"}
            found = commits.get(str(entry.get("attempt_id")))
            row["commit"] = found.sha if found else None
            out.append(row)
        return out


def per_generation(history: list[JSONObject]) -> list[JSONObject]:
    """One attempt per generation: its accepted attempt, else its last attempt; sorted by generation.

    Args:
        history: entries of ``eval_history.json`` (each with ``generation`` and ``verdict``).

    Returns:
        The chosen entries, each with an extra ``attempts`` count (attempts of that generation).
    """
    chosen: dict[int, JSONObject] = {}
    counts: dict[int, int] = {}
    for entry in history:
        gen = int(entry.get("generation", 0))
        counts[gen] = counts.get(gen, 0) + 1
        if chosen.get(gen, {}).get("verdict") != "accepted":
            chosen[gen] = entry
    return [{**chosen[g], "attempts": counts[g]} for g in sorted(chosen)]


def sampled_share(entry: Mapping[str, JSONValue]) -> dict[str, float]:
    """``train/sampled_share`` of a history entry (from its metrics, else its figures); ``{}`` if none."""
    share = (entry.get("metrics") or {}).get("train", {}).get("train/sampled_share")
    if share is None:
        share = (entry.get("figures") or {}).get("sampled_share")
    return {str(k): float(v) for k, v in (share or {}).items()}
