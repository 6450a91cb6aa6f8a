"""Compare two loop runs attempt by attempt: ``python -m tests.compare_runs RUN_A RUN_B``.

``RUN_A`` and ``RUN_B`` are clones in which ``loop.py`` ran (a refactoring's before and after, on
the same params). For each attempt commit (subject ``gen ...``, in order) it prints whether the
subjects agree and, for every out of every stage in that commit's ``dvc.lock``: ``same hash``, or
what differs by content (a checkpoint's weights and metadata, its ``fingerprint`` keys aside; a
JSON file's values, its timings and ``git_sha`` aside; each file of a folder). Files are read from
the clone's DVC cache, or from git for outs with ``cache: false`` (metrics, plots).
"""

from __future__ import annotations

import argparse
import io
import json
import subprocess
from pathlib import Path

import torch

from ml.config.yaml_file import safe_yaml

VOLATILE = ("wall_s", "git_sha", "per_s", "elapsed", "env", "seconds", "duration", "started", "time")
"""Key fragments of run-time figures, left out of a JSON comparison."""


def _git(repo: Path, *args: str) -> bytes:
    return subprocess.run(["git", "-C", str(repo), *args], capture_output=True, check=True).stdout


def attempts(repo: Path) -> list[tuple[str, str]]:
    """(sha, subject) of the attempt commits of ``repo``, oldest first."""
    lines = _git(repo, "log", "--format=%H %s", "--grep=^gen ").decode().splitlines()
    return [(line.split(" ", 1)[0], line.split(" ", 1)[1]) for line in reversed(lines)]


def _cached(repo: Path, md5: str) -> Path:
    return repo / ".dvc/cache/files/md5" / md5[:2] / md5[2:]


def _read(repo: Path, md5: str, sha: str, path: str) -> bytes:
    cached = _cached(repo, md5)
    return cached.read_bytes() if md5 and cached.is_file() else _git(repo, "show", f"{sha}:{path}")


def _steady(obj: object) -> object:
    if isinstance(obj, dict):
        return {k: _steady(v) for k, v in obj.items() if not any(s in k for s in VOLATILE)}
    if isinstance(obj, list):
        return [_steady(v) for v in obj]
    return obj


def _no_fingerprint(obj: object) -> object:
    return {k: _no_fingerprint(v) for k, v in obj.items() if "fingerprint" not in k} if isinstance(obj, dict) else obj


def compare_bytes(name: str, a: bytes, b: bytes) -> str:
    """How the contents ``a`` and ``b`` of the file ``name`` differ, in a few words."""
    if a == b:
        return "same bytes"
    if name.endswith(".pt"):
        x, y = (torch.load(io.BytesIO(blob), weights_only=False) for blob in (a, b))
        sx, sy = x.get("state_dict", {}), y.get("state_dict", {})
        weights = sx.keys() == sy.keys() and all(torch.equal(sx[k], sy[k]) for k in sx if torch.is_tensor(sx[k]))
        meta = [_no_fingerprint({k: v for k, v in d.items() if k != "state_dict"}) for d in (x, y)]
        return f"weights {'equal' if weights else 'DIFFER'}, metadata {'equal but the fingerprint' if meta[0] == meta[1] else 'DIFFERS'}"
    if name.endswith(".json"):
        x, y = _steady(json.loads(a)), _steady(json.loads(b))
        if x == y:
            return "equal but timings and git_sha"
        if isinstance(x, dict) and isinstance(y, dict):
            return f"DIFFER at {sorted(k for k in x.keys() | y.keys() if x.get(k) != y.get(k))}"
    return "DIFFER"


def _git_files(repo: Path, sha: str, path: str) -> dict[str, str]:
    rows = _git(repo, "ls-tree", "-r", sha, path.rstrip("/") + "/").decode().splitlines()
    return {row.split("\t", 1)[1]: row.split()[2] for row in rows}


def compare_out(a: Path, sha_a: str, b: Path, sha_b: str, path: str, md5_a: str, md5_b: str) -> str:
    if md5_a == md5_b:
        return "same hash"
    if md5_a.endswith(".dir") and _cached(a, md5_a).is_file():
        fa = {e["relpath"]: e["md5"] for e in json.loads(_cached(a, md5_a).read_bytes())}
        fb = {e["relpath"]: e["md5"] for e in json.loads(_cached(b, md5_b).read_bytes())}
        read = lambda repo, md5: _cached(repo, md5).read_bytes()  # noqa: E731
    elif md5_a.endswith(".dir"):  # a git-tracked folder (plots)
        fa, fb = _git_files(a, sha_a, path), _git_files(b, sha_b, path)
        read = None
    else:
        return compare_bytes(path, _read(a, md5_a, sha_a, path), _read(b, md5_b, sha_b, path))
    diffs = []
    for rel in sorted(fa.keys() | fb.keys()):
        if fa.get(rel) == fb.get(rel):
            continue
        if rel not in fa or rel not in fb:
            diffs.append(f"{rel}: only in {'B' if rel in fb else 'A'}")
            continue
        if read is None:
            blob_a, blob_b = _git(a, "show", f"{sha_a}:{rel}"), _git(b, "show", f"{sha_b}:{rel}")
        else:
            blob_a, blob_b = read(a, fa[rel]), read(b, fb[rel])
        diffs.append(f"{rel}: {compare_bytes(rel, blob_a, blob_b)}")
    return f"{len(fa)} files, {len(fa) - len(diffs)} same; " + "; ".join(diffs)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run_a", type=Path)
    parser.add_argument("run_b", type=Path)
    args = parser.parse_args()
    for run in (args.run_a, args.run_b):
        if not (run / ".git").exists():
            parser.exit(2, f"error: {run}: not a clone (no .git) of a loop run\n")
    runs_a, runs_b = attempts(args.run_a), attempts(args.run_b)
    if not runs_a or not runs_b:
        parser.exit(2, f"error: {args.run_a if not runs_a else args.run_b}: no attempt commits (subjects 'gen ...'): run loop.py there first\n")
    if len(runs_a) != len(runs_b):
        print(f"!! {len(runs_a)} attempts in A, {len(runs_b)} in B")
    for (sha_a, subject_a), (sha_b, subject_b) in zip(runs_a, runs_b, strict=False):  # the counts are said above
        print(f"# {subject_a}" + ("" if subject_a == subject_b else f"\n# !! B: {subject_b}"))
        lock_a = safe_yaml().load(_git(args.run_a, "show", f"{sha_a}:dvc.lock"))["stages"]
        lock_b = safe_yaml().load(_git(args.run_b, "show", f"{sha_b}:dvc.lock"))["stages"]
        for stage, body in lock_a.items():
            outs_b = {o["path"]: o["md5"] for o in lock_b.get(stage, {}).get("outs", [])}
            for out in body.get("outs", []):
                if out["path"] not in outs_b:
                    print(f"  {out['path']}: not in B")
                    continue
                said = compare_out(args.run_a, sha_a, args.run_b, sha_b, out["path"], out["md5"], outs_b[out["path"]])
                print(f"  {out['path']}: {said}")
        for stage in lock_b.keys() - lock_a.keys():
            print(f"  stage {stage}: only in B ({', '.join(o['path'] for o in lock_b[stage].get('outs', []))})")


if __name__ == "__main__":
    main()
