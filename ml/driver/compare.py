"""``loop.py compare RUN_A RUN_B``: two runs' results head to head and against the same teachers.

A RUN is a clone's folder (its ``HEAD``), or a branch or commit of the repository ``--repo``. Each
run's result is the policy its ``loop.result`` names (the student, or the PPO agent for the
``ppo_only`` profile) of its last accepted generation (or ``--generation N``), read from the
DVC cache at that commit (``dvc.api.DVCFileSystem``: nothing is checked out). Both play greedily:

* head to head in mixed pods (``ml.judge.head_to_head.head_to_head``: two seats each in a 4-pod,
  1 against 1 in 2-player games), A's share of the first places between them by deal;
* each against ``pod_size - 1`` teachers of the game on the same deals
  (``ml.judge.head_to_head.paired_against``): both rates and their difference by deal;
* in a zero-sum game, chips (mean return per game) in both.

Also printed: the CPU and wall seconds each run spent up to the compared generation (its
attempts' stages, rejected attempts included, from
``state/eval_history.json``; ``<stage>/cpu_s``, ``ml.runtime.cli.write_metrics``), the learner
decisions its self-play made, and the params that differ. Reads only; ``--json`` writes a file.
"""

from __future__ import annotations

import sys
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ml.base.io import JSONValue, atomic_write_json
from ml.config.params import Params, params_from_text
from ml.config.yaml_file import ParamsError
from ml.driver.workspace import LoopError

if TYPE_CHECKING:
    from ml.model.policy import PolicyNet

RESULT_DIRS = {"student": "data/merged/students", "agent": "data/merged/frozen"}
"""Where each kind of result lies at a run's commit (the merge stage's output, every accepted generation)."""
IGNORED_SECTIONS = ("run", "profiles", "curriculum")
"""Sections left out of the params difference (the attempt's own bookkeeping and the named overrides)."""


@dataclass(frozen=True)
class RunRef:
    """A run at one commit.

    Attributes:
        label: what the user wrote (a folder, branch or commit).
        root: the repository's folder.
        sha: the commit (40 hex digits).
    """

    label: str
    root: Path
    sha: str


def resolve_run(text: str, repo: Path) -> RunRef:
    """The run ``text`` names: a clone's folder (its HEAD), else a branch or commit of ``repo``.

    Raises:
        LoopError: neither.
    """
    import git

    folder = Path(text)
    try:
        if folder.is_dir() and (folder / ".git").exists():
            return RunRef(text, folder.resolve(), git.Repo(folder).head.commit.hexsha)
        return RunRef(text, repo.resolve(), git.Repo(repo).commit(text).hexsha)
    except (git.BadName, git.InvalidGitRepositoryError, git.NoSuchPathError, ValueError) as e:
        raise LoopError(f"compare: {text}: not a clone's folder, nor a branch or commit of {repo} ({e})") from None


def _show(ref: RunRef, path: str) -> str | None:
    """The text of ``path`` at ``ref`` (None: not in that commit)."""
    import git

    try:
        return str(git.Repo(ref.root).git.show(f"{ref.sha}:{path}"))
    except git.GitCommandError:
        return None


def run_params(ref: RunRef) -> Params:
    """The params.yaml of ``ref``.

    Raises:
        LoopError: missing or invalid at that commit.
    """
    text = _show(ref, "params.yaml")
    if text is None:
        raise LoopError(f"compare: {ref.label}: no params.yaml at {ref.sha[:10]}")
    try:
        return params_from_text(text, f"{ref.label}:params.yaml")
    except ParamsError as e:
        raise LoopError(f"compare: {e}") from None


def result_path(ref: RunRef, params: Params, generation: int | None) -> str:
    """The repository path of the run's result: its ``loop.result`` policy of generation
    ``generation`` (None: the last accepted one).

    Raises:
        LoopError: no accepted generation, or not that one.
    """
    from dvc.api import DVCFileSystem

    folder = RESULT_DIRS[params.loop.result]
    try:
        names = sorted(Path(p).name for p in DVCFileSystem(str(ref.root), rev=ref.sha).ls(folder, detail=False))
    except FileNotFoundError:
        names = []
    gens = sorted(int(n[3:-3]) for n in names if n.startswith("gen") and n.endswith(".pt") and n[3:-3].isdigit())
    if not gens:
        raise LoopError(f"compare: {ref.label}: no accepted generation in {folder} at {ref.sha[:10]}")
    if generation is not None and generation not in gens:
        raise LoopError(f"compare: {ref.label}: generation {generation} was not accepted (accepted: {gens})")
    return f"{folder}/gen{generation if generation is not None else gens[-1]:03d}.pt"


def load_result(ref: RunRef, path: str) -> PolicyNet:
    """The policy at ``path`` of ``ref`` (``ml.model.policy.load_policy`` of the bytes in the DVC cache)."""
    from dvc.api import DVCFileSystem

    from ml.model.policy import load_policy

    data = DVCFileSystem(str(ref.root), rev=ref.sha).read_bytes(path)
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "policy.pt").write_bytes(data)
        return load_policy(Path(tmp) / "policy.pt")[0]


def spent(ref: RunRef, through: int | None = None) -> dict[str, float]:
    """CPU and wall seconds of the attempts' stages that ran, and the learner decisions, at ``ref``
    (``state/eval_history.json``; a stage without ``cpu_s``, from before it was measured, counts its wall):
    every attempt, or those of generations up to ``through`` (the generation compared), rejected ones included."""
    import json

    text = _show(ref, "state/eval_history.json")
    return spent_by(json.loads(text) if text else [], through)


def spent_by(history: list[dict[str, JSONValue]], through: int | None = None) -> dict[str, float]:
    """``spent`` of the attempt entries ``history`` (``state/eval_history.json``), up to generation ``through``."""
    cpu = wall = decisions = 0.0
    attempts = 0
    for entry in history:
        if through is not None and int(entry["generation"]) > through:
            continue
        attempts += 1
        metrics = entry.get("metrics") or {}
        for stage, stage_wall in (entry.get("stage_wall_s") or {}).items():
            m = metrics.get(stage) or {}
            wall += float(stage_wall)
            cpu += float(m.get(f"{stage}/cpu_s", stage_wall))
            if stage == "selfplay":
                decisions += float(m.get("selfplay/decisions", 0))
    return {"attempts": attempts, "cpu_s": round(cpu, 1), "wall_s": round(wall, 1), "learner_decisions": decisions}


def _generation_of(path: str) -> int | None:
    """The generation of a result's file name (``data/merged/students/gen007.pt``: 7; None: not so named)."""
    stem = Path(path).stem
    return int(stem[3:]) if stem.startswith("gen") and stem[3:].isdigit() else None


def params_difference(a: Params, b: Params) -> list[tuple[str, JSONValue, JSONValue]]:
    """``(section.key, value in a, value in b)`` of every key whose value differs (``IGNORED_SECTIONS`` left out)."""
    da, db = (p.model_dump(mode="json", exclude=set(IGNORED_SECTIONS)) for p in (a, b))
    out = []
    for section in sorted(set(da) | set(db)):
        sa, sb = da.get(section) or {}, db.get(section) or {}
        for key in sorted(set(sa) | set(sb)):
            if sa.get(key) != sb.get(key):
                out.append((f"{section}.{key}", sa.get(key), sb.get(key)))
    return out


def same_game(a: Params, b: Params, label_a: str, label_b: str) -> None:
    """Raise LoopError (one line) unless both runs play the same game."""
    ga, gb = a.game.model_dump(mode="json"), b.game.model_dump(mode="json")
    if ga != gb:
        key = next(k for k in sorted(set(ga) | set(gb)) if ga.get(k) != gb.get(k))
        raise LoopError(
            f"compare: {label_a} and {label_b} play different games (game.{key}: {ga.get(key)!r} vs {gb.get(key)!r})"
        )


def _iv(x: Any) -> str:
    return f"{x['mean']:+.3f}" if x["low"] is None else f"{x['mean']:+.3f} [{x['low']:+.3f}, {x['high']:+.3f}]"


def _rate(x: Any) -> str:
    return f"{x['mean']:.3f}" if x["low"] is None else f"{x['mean']:.3f} [{x['low']:.3f}, {x['high']:.3f}]"


def compare(
    repo: Path, runs: tuple[str, str], games: int, generations: tuple[int | None, int | None], out: Path | None
) -> int:
    """``loop.py compare``: print (and with ``out``, write as JSON) the figures of the module docstring.

    Args:
        repo: the repository a branch or commit is looked up in.
        runs: the runs A and B (``resolve_run``).
        games: games of each measure, rounded down to whole deals (at least one).
        generations: the generation of each run to compare (None: its last accepted).
        out: also write the report to this JSON file (None: do not).

    Returns:
        The exit status: 0, or 2 (one line on stderr) for a bad run, generation, game or ``games``.
    """
    from ml.game.registry import make_game
    from ml.judge.head_to_head import Play, head_to_head, mixed_seatings, paired_against
    from ml.play.controller import Controller
    from ml.runtime.compute import open_executor

    if out is not None and out.is_dir():
        print(f"loop.py compare: --json {out} is a directory; give a file path", file=sys.stderr)
        return 2
    try:
        refs = [resolve_run(r, repo) for r in runs]
        params = [run_params(r) for r in refs]
        same_game(params[0], params[1], *runs)
        paths = [result_path(r, p, g) for r, p, g in zip(refs, params, generations, strict=True)]
    except LoopError as e:
        print(f"loop.py {e}", file=sys.stderr)
        return 2
    game = make_game(params[0].game, params[0].teacher)
    n = game.num_players
    if games < n:
        print(f"loop.py compare: --games must be at least {n}, one deal of the teacher comparison", file=sys.stderr)
        return 2
    a, b = (Controller("net", load_result(r, p), greedy=True) for r, p in zip(refs, paths, strict=True))
    seed, envs = params[0].stage_seed("eval") + 1, params[0].selfplay.num_envs
    with open_executor(params[0].compute, params[0].base.torch_threads) as executor:
        play = Play(game, envs, seed, executor=executor)
        mixed = head_to_head(a, b, max(1, games // len(mixed_seatings(n))), play)
        paired = paired_against(a, b, Controller("teacher"), max(1, games // n), play)
    report = {
        "runs": [
            {
                "run": r.label,
                "repo": str(r.root),
                "commit": r.sha,
                "result": p.loop.result,
                "policy": path,
                **spent(r, _generation_of(path)),
            }
            for r, p, path in zip(refs, params, paths, strict=True)
        ],
        "game": params[0].game.name,
        "head_to_head": asdict(mixed),
        "against_teachers": asdict(paired),
        "params_difference": [{"key": k, "a": va, "b": vb} for k, va, vb in params_difference(*params)],
    }
    _print(report, game.zero_sum, game.teacher_name, n)
    if out is not None:
        atomic_write_json(out, report)
    return 0


def _print(report: dict[str, Any], zero_sum: bool, teacher: str, n: int) -> None:
    """The report as a few lines of text on stdout."""
    ra, rb = report["runs"]
    for tag, r in (("A", ra), ("B", rb)):
        print(f"{tag}: {r['run']} ({r['commit'][:10]}) {r['policy']}; {r['attempts']} attempt{'s' if r['attempts'] != 1 else ''} to it, CPU {r['cpu_s']:.0f} s, "
              f"wall {r['wall_s']:.0f} s, {r['learner_decisions']:,.0f} learner decisions")  # fmt: skip
    h = report["head_to_head"]
    print(f"head to head ({h['deals']} mixed deals, {h['games']} games, {h['draws']} draws): A's share of the first places "
          f"{h['a_first_share']:.3f} [{h['low']:.3f}, {h['high']:.3f}]" + (f"; A's chips {_iv(h['a_return'])}" if zero_sum else ""))  # fmt: skip
    p = report["against_teachers"]
    print(f"against {n - 1} teachers ({teacher}), the same {p['deals']} deals: A {_rate(p['a_rate'])}, B {_rate(p['b_rate'])}, "
          f"A - B {_iv(p['difference'])}" + (f"; chips A - B {_iv(p['return_difference'])}" if zero_sum else ""))  # fmt: skip
    diff = report["params_difference"]
    print("params that differ: " + ("none" if not diff else ", ".join(f"{d['key']} {d['a']} vs {d['b']}" for d in diff)))
