"""Benchmark: wall time of one generation by stage.

Runs ``python loop.py --max-generations 1`` in fresh temporary clones (committed files
only) and prints each stage's seconds (teacher, train, selfplay, export, gate, merge, from
``state/eval_history.json``), the attempt's wall time (which also counts the loop's commits,
DVC bookkeeping and the Elo tournament) and a ratio against a reference measured in the
same run:

* default: the default params (the reference) and ``--profile full`` of this checkout's HEAD;
  ratio full / default.
* ``--compare BASE``: ``--profile full`` on the commit ``BASE`` (the reference) and on HEAD,
  one after the other, each with its own ``full`` profile; ratio HEAD / BASE of each stage, of
  the wall and of the learner decisions a generation plays. ``--same-sizes`` gives HEAD's clone
  ``BASE``'s ``full`` profile instead (written into its params.yaml and committed): a speed-up
  at the same sizes.

Each row also prints the PPO update's samples/s (``selfplay/update_samples_per_s``: decisions
times update epochs, per second of update) and its share of one core's fp32 FMA peak: FLOPs per
sample ``6 * W`` (W: the policy's weights, two FLOPs each forward and four backward), over the
FLOP/s of a 1024 x 1024 x 1024 fp32 matrix product on one torch thread timed in the same run, under
the stages' CPU cap (the practical peak of one core's FMA units as the update may use them).

``--from-run PATH`` instead prints the same split for every attempt of a finished run (e.g.
the clone a `python loop.py --profile full` ran in), without running anything.

Usage: python bench/bench_generation.py [--keep] [--compare BASE [--same-sizes]] | --from-run PATH
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
STAGES = ("teacher", "train", "selfplay", "export", "gate", "merge")


def history(repo: Path) -> list[dict]:
    """The attempts of the run in ``repo`` (``state/eval_history.json``).

    Raises:
        SystemExit: no such file, or no attempt in it.
    """
    path = repo / "state" / "eval_history.json"
    if not path.exists():
        raise SystemExit(f"{path}: no such file (not a loop run?)")
    entries = json.loads(path.read_text())
    if not entries:
        raise SystemExit(f"{path}: no attempt recorded yet")
    return entries


def decisions(entry: dict) -> float:
    """Learner decisions of the attempt's self-play (0 when it did not run)."""
    return float(entry.get("metrics", {}).get("selfplay", {}).get("selfplay/decisions", 0))


def row(label: str, entry: dict, peak: float | None = None) -> str:
    stages = entry.get("stage_wall_s", {})
    cells = " ".join(f"{stages[s]:8.1f}" if s in stages else f"{'-':>8s}" for s in STAGES)
    sp = entry.get("metrics", {}).get("selfplay", {})
    rate = float(sp.get("selfplay/update_samples_per_s", 0.0))
    share = (
        f"{rate * entry.get('flops_per_sample', 0) / peak:8.1%}" if peak and entry.get("flops_per_sample") else f"{'-':>8s}"
    )
    return f"{label:28s} {cells} {entry['wall_s']:8.1f} {decisions(entry):11,.0f} {rate:9,.0f} {share}"


def header() -> str:
    return (f"{'attempt':28s} " + " ".join(f"{s:>8s}" for s in STAGES)
            + f" {'wall':>8s} {'decisions':>11s} {'upd/s':>9s} {'FMA peak':>8s}")  # fmt: skip


def fma_peak_flops() -> float:
    """FLOP/s of a 1024^3 fp32 matrix product on one torch thread (the best of 5 after a warm-up)."""
    import time

    import torch

    import ml  # noqa: F401  (the stages' CPU cap, ml/base/determinism.py, applies to the peak too)

    torch.set_num_threads(1)
    a, b = torch.randn(1024, 1024), torch.randn(1024, 1024)
    torch.mm(a, b)
    best = float("inf")
    for _ in range(5):
        t = time.perf_counter()
        torch.mm(a, b)
        best = min(best, time.perf_counter() - t)
    return 2 * 1024**3 / best


def flops_per_sample(repo: Path) -> float:
    """``6 * W`` for the PPO agent of the run in ``repo`` (W: its Linear layers' weights; 0 without one)."""
    import torch

    path = repo / "data" / "models" / "ppo.pt"
    if not path.is_file():
        return 0.0
    state = torch.load(path, map_location="cpu", weights_only=True)["state_dict"]
    return 6.0 * sum(v.numel() for k, v in state.items() if k.endswith("weight"))


def profile_block(text: str, name: str) -> list[str]:
    """The lines of profile ``name`` (its ``  name:`` line and the more indented lines under it) in a params.yaml text.

    Raises:
        SystemExit: no such profile.
    """
    lines = text.splitlines()
    try:
        start = next(i for i, line in enumerate(lines) if line.startswith(f"  {name}:"))
    except StopIteration:
        raise SystemExit(f"params.yaml has no profile {name!r}") from None
    end = start + 1
    while end < len(lines) and (lines[end].startswith("    ") or not lines[end].strip()):
        end += 1
    return lines[start:end]


def use_profile_of(repo: Path, base: str, name: str) -> None:
    """Replace profile ``name`` in ``repo``'s params.yaml by commit ``base``'s and commit it (the same sizes)."""
    theirs = subprocess.run(
        ["git", "show", f"{base}:params.yaml"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout
    path = repo / "params.yaml"
    text = path.read_text()
    ours = profile_block(text, name)
    path.write_text(text.replace("\n".join(ours), "\n".join(profile_block(theirs, name)), 1))
    subprocess.run(["git", "commit", "-q", "-m", f"bench: the {name} profile of {base}", "params.yaml"], cwd=repo, check=True)


def run_one(profile: str | None, keep: bool, commit: str = "HEAD", sizes_of: str | None = None) -> dict:
    """One generation in a fresh clone of ``commit`` (with ``profile`` as commit ``sizes_of`` defines it,
    when given); returns its eval-history entry (seconds)."""
    tmp = Path(tempfile.mkdtemp(prefix=f"bench-gen-{profile or 'default'}-"))
    repo = tmp / "repo"
    subprocess.run(["git", "clone", "-q", str(ROOT), str(repo)], check=True)
    subprocess.run(["git", "checkout", "-q", "-B", "main", commit], cwd=repo, check=True)
    if sizes_of and profile:
        use_profile_of(repo, sizes_of, profile)
    env = {**os.environ, "DVC_NO_ANALYTICS": "1", "DVC_NO_UPDATE_CHECK": "1", "PYTHONHASHSEED": "0"}
    cmd = [sys.executable, "loop.py", "--max-generations", "1", "--max-attempts", "1"]
    if profile:
        cmd += ["--profile", profile]
    print(f"running one {profile or 'default'} generation of {commit} in {repo} ...", flush=True)
    done = subprocess.run(cmd, cwd=repo, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"loop.py failed in {repo} (exit {done.returncode}):\n{done.stdout[-2000:]}{done.stderr[-2000:]}")
    entry = {**history(repo)[0], "flops_per_sample": flops_per_sample(repo)}
    if not keep:
        shutil.rmtree(tmp, ignore_errors=True)
    return entry


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--from-run", type=Path, help="print the stage split of every attempt of this run instead")
    parser.add_argument("--keep", action="store_true", help="keep the temporary clones")
    parser.add_argument("--compare", metavar="BASE", help="a `full` generation on commit BASE (reference) and on HEAD")
    parser.add_argument("--same-sizes", action="store_true", help="with --compare: HEAD runs BASE's full profile")
    args = parser.parse_args()
    if args.from_run:
        entries = history(args.from_run)
        print(f"seconds per stage, run in {args.from_run}")
        print(header())
        for e in entries:
            print(row(f"{e['attempt_id']} {e['verdict'][:3]}", e))
        return
    if args.compare:
        base = subprocess.run(["git", "rev-parse", "--short", args.compare], cwd=ROOT, capture_output=True, text=True)
        if base.returncode != 0:
            raise SystemExit(f"--compare {args.compare}: no such commit in {ROOT}")
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip()
        reference = run_one("full", args.keep, base.stdout.strip())
        full = run_one("full", args.keep, head, sizes_of=base.stdout.strip() if args.same_sizes else None)
        labels = (f"full, {base.stdout.strip()} (reference)", f"full, {head} (HEAD)", "HEAD / reference")
    else:
        reference = run_one(None, args.keep)
        full = run_one("full", args.keep)
        labels = ("default profile (reference)", "full profile", "full / default")
    peak = fma_peak_flops()
    print("seconds per stage of one generation (generation 0: the teacher stage runs only once per project), learner")
    print(f"decisions, PPO update samples/s and its share of one core's fp32 FMA peak ({peak / 1e9:.1f} GFLOP/s measured)")
    print(header())
    print(row(labels[0], reference, peak))
    print(row(labels[1], full, peak))
    print(f"{labels[2]:28s} " + " ".join(
        f"{full['stage_wall_s'][s] / reference['stage_wall_s'][s]:7.2f}x"
        if s in full.get("stage_wall_s", {}) and reference.get("stage_wall_s", {}).get(s) else f"{'-':>8s}"
        for s in STAGES
    ) + f" {full['wall_s'] / reference['wall_s']:7.2f}x"
      + (f" {decisions(full) / decisions(reference):10.2f}x" if decisions(reference) else ""))  # fmt: skip


if __name__ == "__main__":
    main()
