"""Promoted bots: students kept as opponents for good, and the final report against them.

``promote`` copies the student of a committed attempt (from the DVC cache, by the hash its
``dvc.lock`` recorded) to ``bots/promoted/<name>.pt``: the policy checkpoint format
(``ml.model.policy.CHECKPOINT_FORMAT``) plus ``bot_format`` and the provenance in its meta, and
``dvc add``s the folder. ``final_report`` plays the final student against every promoted
bot in seat-rotated duplicate deals (informational: it decides nothing); ``ml.judge.deals.pod_win_rate``
is that measurement for any two controllers (``loop.py eval`` uses it against the teacher).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Protocol

from ml.config.yaml_file import safe_yaml
from ml.driver.state import BOTS_DIR, bot_checkpoints
from ml.driver.workspace import LoopError
from ml.game.protocol import GameSpec
from ml.judge.deals import pod_win_rate
from ml.model.policy import PolicyNet, load_policy, save_policy
from ml.play.controller import Controller
from ml.runtime.executor import LOCAL, Executor

BOT_FORMAT = 1
"""Bumped when a promoted bot's meta changes; the weights follow ml.model.policy.CHECKPOINT_FORMAT."""
NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")


class Git(Protocol):
    """A callable running ``git`` with the given arguments in the repository, returning its stdout
    (``ml.driver.workspace.Workspace.git``)."""

    def __call__(self, *args: str) -> str: ...


BotReportRow = dict[str, str | int | float | None]
"""A row of :func:`final_report`: ``bot`` (its name) plus the keys of ``ml.judge.deals.PodRate.row``."""


class PromoteError(LoopError):
    """The attempt or its student cannot be promoted; the message says why."""


def find_attempt(git: Git, query: str) -> tuple[str, str]:
    """``(commit sha, attempt id)`` of the attempt whose id equals or uniquely contains ``query``.

    Args:
        git: a callable running ``git`` with the given arguments and returning stdout.
        query: an attempt id or a unique part of one (``gen003-a1``).

    Raises:
        PromoteError: no attempt or several attempts match.
    """
    out = git("log", "--format=%H %(trailers:key=Attempt-Id,valueonly,separator=)")
    found = [line.split(" ", 1) for line in out.splitlines() if " " in line and line.split(" ", 1)[1].strip()]
    exact = [(sha, aid.strip()) for sha, aid in found if aid.strip() == query]
    hits = exact or [(sha, aid.strip()) for sha, aid in found if query in aid and "override" not in aid]
    if len(hits) != 1:
        names = ", ".join(a for _, a in hits[:5])
        raise PromoteError(f"{'no' if not hits else len(hits)} attempts match {query!r}" + (f": {names}" if hits else ""))
    return hits[0]


def student_from_commit(root: Path, git: Git, sha: str) -> Path:
    """Path in the DVC cache of the student checkpoint recorded in ``dvc.lock`` at ``sha``.

    Raises:
        PromoteError: the commit has no student, or the cache lacks it (``dvc pull`` first).
    """
    lock = safe_yaml().load(git("show", f"{sha}:dvc.lock"))
    md5: str | None = next(
        (
            str(o["md5"])
            for st in lock.get("stages", {}).values()
            for o in st.get("outs", [])
            if o["path"] == "data/models/student.pt"
        ),
        None,
    )
    if md5 is None:
        raise PromoteError(f"commit {sha[:10]} records no data/models/student.pt in dvc.lock")
    path = root / ".dvc" / "cache" / "files" / "md5" / md5[:2] / md5[2:]
    if not path.is_file():
        raise PromoteError(f"student {md5} of commit {sha[:10]} is not in the DVC cache ({path}); run `dvc pull` first")
    return path


def promote(root: Path, git: Git, query: str, name: str | None = None) -> Path:
    """Write ``bots/promoted/<name>.pt`` from an attempt's student. Returns its path.

    Raises:
        PromoteError: bad name, unknown attempt, missing student, or a name already taken.
    """
    sha, attempt_id = find_attempt(git, query)
    name = name or attempt_id
    if not NAME_RE.match(name):
        raise PromoteError(f"bot name {name!r}: use letters, digits, '.', '_' or '-' (at most 64)")
    out = root / BOTS_DIR / f"{name}.pt"
    if out.exists():
        raise PromoteError(f"{out} exists already; choose another --name")
    net, meta = load_policy(student_from_commit(root, git, sha))
    save_policy(
        net,
        out,
        {**meta, "bot_format": BOT_FORMAT, "name": name, "attempt_id": attempt_id, "commit": sha, "obs_dim": net.obs_dim},
    )
    return out


def load_bots(root: Path) -> dict[str, PolicyNet]:
    """Every promoted bot, by name."""
    return {name: load_policy(path)[0] for name, path in bot_checkpoints(root).items()}


def final_report(
    student: PolicyNet,
    bots: dict[str, PolicyNet],
    *,
    games: int,
    game: GameSpec,
    num_envs: int,
    seed: int,
    executor: Executor = LOCAL,
) -> list[BotReportRow]:
    """Win rate of ``student`` in pods of ``game`` (``ml.game.protocol.GameSpec``) against
    ``game.num_players - 1`` copies of each bot (both greedy).

    ``executor`` (``ml.runtime.compute``) plays the pods, here or on the Ray cluster of ``compute``,
    with the same rows.

    Returns:
        Rows ``bot`` plus the keys of ``pod_win_rate``.
    """
    rows: list[BotReportRow] = []
    for i, (name, bot) in enumerate(sorted(bots.items())):
        row = pod_win_rate(
            Controller("net", student, greedy=True), Controller("net", bot, greedy=True), games=games,
            game=game, num_envs=num_envs, seed=seed + i, executor=executor,
        )  # fmt: skip
        rows.append({"bot": name, **row.row()})
    return rows
