"""Benchmark: cost of one attempt's data bookkeeping as the run grows (issue #14, item 4).

Fills a run with 1, 10 and 100 accepted PPO batches of realistic size (``--batch-mb``, 35 MB
of JSONL each: a real export batch of an untrained agent, replicated with new game ids, so
the benchmark stays fast; won games only, as ``export.only_wins`` writes them), then times
attempts as the loop runs them:

* ``merge``: ``dvc repro --single-item merge`` (the merge stage of ``dvc.yaml``, in a
  pipeline of its own: DVC checks its deps, runs it and commits ``data/merged``),
* ``promote``: what ``ml.driver.orchestrator.Loop.promote`` does (``ml.data.merge.promote_folders``,
  then ``dvc add``; before this change: compare every file by SHA-256, copy changed folders),
* ``status``: ``dvc status``,
* ``load``: the data loading of the gate (pool + candidate) and of the next train stage
  (pool), as ``ml.learn.supervised.build_and_train`` does it with ``train.ppo_window`` 1 (the
  ``full`` profile) and a ``--teacher-mb`` teacher batch; training itself is skipped.

Each size gets one untimed attempt first (the state a long run is in), then ``--attempts``
timed ones; the median per attempt is printed with its ratio to the 1-batch figure, measured
in the same run (the issue asks for at most 1.5 at 100 batches).

``--code DIR`` runs the same measurement on another checkout's ``ml/`` and ``stages/`` (e.g. a
``git worktree`` of the commit before this change): the "before" figures.
``--teacher-load MB`` instead times loading one teacher batch of that size (the ``full``
profile's is 251 MB): parsed (no cache, as before this change), first load through the
encoded-batch cache (parse + write the entry) and a cached load.

Needs about ``(N + 3) * batch-mb`` of disk per size three times over (the batches, DVC's cache and,
before this change, the merged copies) under ``--workdir`` (default: a temporary folder); check
``df -h`` first.

Usage: python bench/bench_growth.py [--sizes 1,10,100] [--batch-mb 35] [--teacher-mb 25]
       [--attempts 3] [--code DIR] [--workdir DIR] [--keep] | --teacher-load MB
"""

from __future__ import annotations

import argparse
import hashlib
import importlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
ENV = {**os.environ, "DVC_NO_ANALYTICS": "1", "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
STEPS = ("merge", "promote", "status", "load")


def _seed_lines(tmp: Path, source: str, code: Path) -> list[tuple[str, str, str]]:
    """A real batch of ``source`` (``ppo``: an untrained agent's export; ``sim``: the teacher),
    as ``(before, game_id, after)`` per line so copies can get new game ids cheaply."""
    sys.path.insert(0, str(code))
    from ml.config.params import load_params
    from ml.game.registry import make_game

    params = load_params(ROOT / "params.yaml")
    game = make_game(params.game, params.teacher)
    out = tmp / f"seed-{source}"
    if source == "ppo":
        from ml.config.sections import ExportParams, RunParams
        from ml.model.policy import PolicyNet
        from ml.play.export import export_batch
        from ml.play.runner import StagePlay

        net = PolicyNet(game.obs_dim, (64,), game.num_actions)
        export_batch(net, out, ExportParams(games=48), RunParams(), game, StagePlay(1), num_envs=8)
    else:
        from ml.play.runner import StagePlay
        from ml.play.teacher import write_teacher_batch

        write_teacher_batch(out, game, params.teacher.model_copy(update={"games": 24}), "seed", StagePlay(1))
    (path,) = out.glob("*.jsonl")
    lines = []
    for line in path.read_text(encoding="utf-8").splitlines():
        gid = json.loads(line)["game_id"]
        before, after = line.split(f'"game_id":"{gid}"', 1)
        lines.append((before, gid, after))
    return lines


def write_batch(path: Path, seed: list[tuple[str, str, str]], tag: str, mb: float) -> None:
    """A batch of about ``mb`` MB: copies of ``seed`` whose game ids end in ``-<tag>r<copy>``."""
    target, size, copy = mb * 1e6, 0, 0
    tmp = path.with_name(path.name + ".part")
    with tmp.open("w", encoding="utf-8") as f:
        while size < target:
            for before, gid, after in seed:
                line = f'{before}"game_id":"{gid}-{tag}r{copy}"{after}\n'
                f.write(line)
                size += len(line)
            copy += 1
    tmp.rename(path)


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def _atomic_bytes(path: Path, data: bytes) -> None:
    tmp = path.with_name(path.name + ".part")
    tmp.write_bytes(data)
    tmp.rename(path)  # a new file: the merged links to the old one keep their bytes


def _sh(cmd: list[str], cwd: Path) -> str:
    return subprocess.run(cmd, cwd=cwd, env=ENV, check=True, capture_output=True, text=True).stdout


def _dvc_yaml(new: bool) -> str:
    extra = " --candidate-student data/models/candidate_student.pt --next-student data/next_student" if new else ""
    deps = ["metrics/gate.json", "data/candidate", "data/models/ppo.pt", "data/models/student.pt", "data/pool",
            "data/rejected", "data/frozen", "data/students"]  # fmt: skip
    if new:
        deps += ["data/models/candidate_student.pt", "data/next_student"]
    cmd = (
        "python -m stages.merge --gate metrics/gate.json --candidate data/candidate --model data/models/ppo.pt"
        " --student data/models/student.pt --pool data/pool --rejected data/rejected --frozen data/frozen"
        f" --students data/students{extra} --out data/merged --metrics metrics/merge.json"
    )
    lines = ["stages:", "  merge:", f"    cmd: {cmd}", "    deps:", *(f"      - {d}" for d in deps)]
    lines += ["    params:", "      - run.generation", "    outs:", "      - data/merged", "    metrics:"]
    lines += ["      - metrics/merge.json:", "          cache: false", ""]
    return "\n".join(lines)


class Run:
    """A repository holding ``n`` accepted batches, run with the code in ``code``."""

    def __init__(self, root: Path, code: Path, n: int, batches: list[Path], teacher: Path, args: argparse.Namespace):
        self.root, self.code, self.args = root, code, args
        self.new = "--next-student" in (code / "stages/merge.py").read_text()
        self.promoted = ("pool", "rejected", "frozen", "students", *(("next_student",) if self.new else ()))
        self.spare = list(batches[n:])
        root.mkdir(parents=True)
        shutil.copytree(code / "ml", root / "ml", ignore=shutil.ignore_patterns("__pycache__"))
        shutil.copytree(code / "stages", root / "stages", ignore=shutil.ignore_patterns("__pycache__"))
        shutil.copy2(ROOT / "params.yaml", root / "params.yaml")
        (root / "dvc.yaml").write_text(_dvc_yaml(self.new))
        (root / "metrics").mkdir()
        (root / "metrics/gate.json").write_text(json.dumps({"gate/accepted": True}))
        for name in (*self.promoted, "candidate", "models", "teacher"):
            (root / "data" / name).mkdir(parents=True)
        for b in batches[:n]:
            os.link(b, root / "data/pool" / b.name)
        os.link(teacher, root / "data/teacher" / teacher.name)
        _sh(["git", "init", "-q"], root)
        _sh(["git", "config", "user.email", "bench@localhost"], root)
        _sh(["git", "config", "user.name", "bench"], root)
        _sh([sys.executable, "-m", "dvc", "init", "-q"], root)
        if (code / ".dvc/config").exists():  # the cache link types of the code measured
            shutil.copy2(code / ".dvc/config", root / ".dvc/config")
        (root / ".gitignore").write_text("__pycache__/\n")
        _sh([sys.executable, "-m", "dvc", "add", "-q", *(f"data/{p}" for p in self.promoted)], root)
        _sh(["git", "add", "-A"], root)
        _sh(["git", "commit", "-qm", "setup"], root)
        self.generation = n

    def prepare(self) -> None:
        """What the stages before the merge leave (untimed): a new candidate batch and checkpoints."""
        g = self.generation
        for f in (self.root / "data/candidate").iterdir():
            f.unlink()
        os.link(self.spare.pop(0), self.root / "data/candidate" / f"ml-decisions-ppo-gen{g:03d}-a1.jsonl")
        for name in ("ppo", "student", "candidate_student"):
            _atomic_bytes(self.root / f"data/models/{name}.pt", os.urandom(300_000))
        text = (self.root / "params.yaml").read_text()
        head, rest = text.split("run:\n", 1)
        rest = rest.split("\n", 1)[1]  # the generation line
        (self.root / "params.yaml").write_text(f"{head}run:\n  generation: {g}\n{rest}")

    def attempt(self) -> dict[str, float]:
        """One attempt's timed steps; returns seconds per step."""
        t: dict[str, float] = {}
        t["load"] = self.load([self.root / "data/pool", self.root / "data/candidate"])
        s = time.perf_counter()
        _sh([sys.executable, "-m", "dvc", "repro", "--single-item", "merge"], self.root)
        t["merge"] = time.perf_counter() - s
        s = time.perf_counter()
        self.promote()
        t["promote"] = time.perf_counter() - s
        s = time.perf_counter()
        _sh([sys.executable, "-m", "dvc", "status"], self.root)
        t["status"] = time.perf_counter() - s
        t["load"] += self.load([self.root / "data/pool"])
        self.generation += 1
        return t

    def promote(self) -> None:
        """What ``Loop.promote`` does: the merged folders into ``data/``, then ``dvc add`` them
        (a bench may not import the driver, docs/layering.md; the journal write is left out)."""
        import ml.data.merge

        merged, data = self.root / "data/merged", self.root / "data"
        if hasattr(ml.data.merge, "promote_folders"):
            ml.data.merge.promote_folders(merged, data, self.promoted)
        else:  # the promotion before issue #14: compare every file by SHA-256, copy a changed folder
            for name in self.promoted:
                src, dst = merged / name, data / name
                want, have = ({f.name: f for f in d.iterdir()} if d.is_dir() else {} for d in (src, dst))
                if want.keys() == have.keys() and all(_sha256(want[k]) == _sha256(have[k]) for k in want):
                    continue
                tmp = dst.with_name(dst.name + ".tmp")
                shutil.rmtree(tmp, ignore_errors=True)
                shutil.copytree(src, tmp)
                shutil.rmtree(dst, ignore_errors=True)
                tmp.rename(dst)
        _sh([sys.executable, "-m", "dvc", "add", *(f"data/{name}" for name in self.promoted)], self.root)

    def load(self, pool_dirs: list[Path]) -> float:
        """Seconds ``build_and_train`` takes with training skipped (a fresh process's memos cleared)."""
        import ml.learn.supervised as supervised
        from ml.config.params import load_params
        from ml.game.registry import make_game
        from ml.learn.settings import RunSettings
        from ml.model.policy import PolicyNet

        params = load_params(self.root / "params.yaml")
        cfg = params.train.model_copy(update={"ppo_window": 1})
        game = make_game(params.game, params.teacher)
        import ml.base.io

        getattr(ml.base.io, "_MD5_MEMO", {}).clear()
        saved = supervised.train_student
        supervised.train_student = lambda train, *a, **k: (
            PolicyNet(train.obs.shape[1], (8,), train.action_mask.shape[1]),
            {"train/sampled_share": {}},
        )
        cwd = os.getcwd()
        os.chdir(self.root)
        try:
            s = time.perf_counter()
            data = supervised.TrainingData(
                self.root / "data/teacher", tuple(pool_dirs), cache_dir=self.root / ".dvc/tmp/encoded"
            )
            supervised.build_and_train(cfg, game, data, RunSettings(1))
            return time.perf_counter() - s
        finally:
            os.chdir(cwd)
            supervised.train_student = saved


def growth(args: argparse.Namespace) -> None:
    code = Path(args.code).resolve() if args.code else ROOT
    sys.path.insert(0, str(code))
    for mod in [m for m in sys.modules if m == "ml" or m.startswith(("ml.", "stages"))]:
        del sys.modules[mod]
    importlib.invalidate_caches()
    work = Path(args.workdir or tempfile.mkdtemp(prefix="bench-growth-"))
    sizes = [int(x) for x in args.sizes.split(",")]
    need = max(sizes) + args.attempts + 2
    shared = work / "batches"
    shared.mkdir(parents=True, exist_ok=True)
    seed = None
    batches = []
    for i in range(need):
        path = shared / f"ml-decisions-ppo-gen{i:03d}-a1.jsonl"
        if not path.exists():
            seed = seed or _seed_lines(work, "ppo", code)
            write_batch(path, seed, f"b{i}", args.batch_mb)
        batches.append(path)
    teacher = shared / f"ml-decisions-sim-teacher-{round(args.teacher_mb)}mb.jsonl"  # a name ml.data.batch_files reads
    if not teacher.exists():
        write_batch(teacher, _seed_lines(work, "sim", code), "t", args.teacher_mb)
    print(f"code: {code}  batch: {batches[0].stat().st_size / 1e6:.1f} MB  teacher: {teacher.stat().st_size / 1e6:.1f} MB")
    print(f"{'batches':>8s} " + " ".join(f"{s:>9s}" for s in STEPS) + f" {'total':>9s} {'vs 1':>6s}")
    first = None
    try:
        for n in sizes:
            run = Run(work / f"run-{n}-{os.getpid()}", code, n, batches, teacher, args)
            run.prepare()
            run.attempt()  # untimed: the state of a long run (dvc.lock, data/merged, hash state, cache)
            times = []
            for _ in range(args.attempts):
                run.prepare()
                times.append(run.attempt())
            mean = {s: statistics.median(t[s] for t in times) for s in STEPS}
            total = sum(mean.values())
            first = first or mean
            ratios = " ".join(f"{mean[s] / first[s]:5.2f}x" for s in STEPS)
            print(f"{n:8d} " + " ".join(f"{mean[s]:9.2f}" for s in STEPS) + f" {total:9.2f} {total / sum(first.values()):5.2f}x"
                  f"   (per step vs 1: {ratios})", flush=True)  # fmt: skip
            if not args.keep:
                shutil.rmtree(run.root)
    finally:
        if not args.keep and not args.workdir:  # a given --workdir keeps its batches for the next run
            shutil.rmtree(work, ignore_errors=True)


def teacher_load(args: argparse.Namespace) -> None:
    sys.path.insert(0, str(ROOT))
    import ml.base.io
    from ml.config.params import load_params
    from ml.data.dataset import load_teacher
    from ml.data.encoded_cache import EncodedCache
    from ml.game.registry import make_game

    work = Path(args.workdir or tempfile.mkdtemp(prefix="bench-teacher-"))
    folder = work / "teacher"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "ml-decisions-sim-teacher.jsonl"
    if not path.exists():
        write_batch(path, _seed_lines(work, "sim", ROOT), "t", args.teacher_load)
    params = load_params(ROOT / "params.yaml")
    encoder = make_game(params.game, params.teacher).teacher_encoder(None)
    cache = EncodedCache.for_encoder(work / "cache", encoder)
    shutil.rmtree(cache.directory, ignore_errors=True)
    print(f"teacher batch {path.stat().st_size / 1e6:.0f} MB")
    rows = []
    for label, c in (("parsed (no cache, as before)", None), ("first load (parse + cache)", cache), ("cached", cache)):
        ml.base.io._MD5_MEMO.clear()  # a stage is a fresh process: it hashes the file again
        s = time.perf_counter()
        train, hold, _ = load_teacher([folder], params.train.holdout_fraction, encoder, cache=c)
        rows.append((label, time.perf_counter() - s))
        print(f"{label:30s} {rows[-1][1]:8.2f} s  ({len(train) + len(hold)} decisions)", flush=True)
    print(f"cached / parsed: {rows[2][1] / rows[0][1]:.3f}")
    if not args.keep:
        shutil.rmtree(work, ignore_errors=True)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--sizes", default="1,10,100", help="accepted batches in the run, comma-separated")
    p.add_argument("--batch-mb", type=float, default=35.0, help="size of each PPO batch (MB of JSONL)")
    p.add_argument("--teacher-mb", type=float, default=25.0, help="size of the teacher batch of the growth runs")
    p.add_argument("--attempts", type=int, default=3, help="timed attempts per size (the median is shown)")
    p.add_argument("--code", help="checkout whose ml/ and stages/ are measured (default: this one)")
    p.add_argument("--workdir", help="folder for the runs (default: a temporary one)")
    p.add_argument("--keep", action="store_true", help="keep the runs and batches")
    p.add_argument("--teacher-load", type=float, metavar="MB", help="time loading one teacher batch of MB instead")
    args = p.parse_args()
    teacher_load(args) if args.teacher_load else growth(args)


if __name__ == "__main__":
    main()
