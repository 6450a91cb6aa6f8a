"""Compare two loop runs' attempts: dvc.lock outs, by content where hashes differ (bench/compare_runs-like, for the closing note)."""
import io, json, subprocess, sys
from pathlib import Path
import torch
from ruamel.yaml import YAML
A, B = Path(sys.argv[1]), Path(sys.argv[2])
VOLATILE = ("wall_s", "git_sha", "per_s", "_s\"", "elapsed", "env", "seconds", "duration", "started", "time")
def commits(repo):
    out = subprocess.run(["git", "-C", str(repo), "log", "--format=%H %s", "--grep=^gen "], capture_output=True, text=True).stdout.splitlines()
    return [l.split(" ", 1) for l in reversed(out)]
def lock(repo, h):
    return YAML(typ="safe").load(subprocess.run(["git", "-C", str(repo), "show", f"{h}:dvc.lock"], capture_output=True, text=True).stdout)
def blob(repo, md5, commit=None, path=None):
    f = repo / ".dvc/cache/files/md5" / md5[:2] / md5[2:]
    if f.is_file() or commit is None:
        return f.read_bytes()
    return subprocess.run(["git", "-C", str(repo), "show", f"{commit}:{path}"], capture_output=True, check=True).stdout
def strip(obj):
    if isinstance(obj, dict):
        return {k: strip(v) for k, v in obj.items() if not any(s.strip('"') in k for s in VOLATILE)}
    if isinstance(obj, list):
        return [strip(v) for v in obj]
    return obj
def same_pt(a, b):
    x, y = torch.load(io.BytesIO(a), weights_only=False), torch.load(io.BytesIO(b), weights_only=False)
    def norm(d):
        if isinstance(d, dict):
            return {k: norm(v) for k, v in d.items() if "fingerprint" not in k}
        return d
    sa, sb = x.get("state_dict", x), y.get("state_dict", y)
    tens = all(torch.equal(sa[k], sb[k]) for k in sa if torch.is_tensor(sa[k])) and sa.keys() == sb.keys()
    meta = {k: v for k, v in x.items() if k != "state_dict"}, {k: v for k, v in y.items() if k != "state_dict"}
    return tens, norm(meta[0]) == norm(meta[1])
def compare_file(name, a, b):
    if a == b:
        return "same bytes"
    if name.endswith(".pt"):
        t, m = same_pt(a, b)
        return f"weights {'equal' if t else 'DIFFER'}, metadata {'equal but the fingerprint' if m else 'DIFFERS'}"
    if name.endswith(".json"):
        x, y = strip(json.loads(a)), strip(json.loads(b))
        if x == y:
            return "equal without timings and git_sha"
        if isinstance(x, dict) and isinstance(y, dict):
            keys = sorted(k for k in x.keys() | y.keys() if x.get(k) != y.get(k))
            return f"equal without timings and git_sha but {keys}"
        return "DIFFER"
    return "DIFFER"
for (ha, sa), (hb, sb) in zip(commits(A), commits(B)):
    print(f"# {sa}" + ("" if sa == sb else f"\n#   !! subject differs: {sb}"))
    la, lb = lock(A, ha)["stages"], lock(B, hb)["stages"]
    for st in la:
        for oa in la[st].get("outs", []):
            ob = next((o for o in lb.get(st, {}).get("outs", []) if o["path"] == oa["path"]), None)
            if ob is None:
                print(f"  {oa['path']}: missing in B"); continue
            if oa["md5"] == ob["md5"]:
                print(f"  {oa['path']}: same hash"); continue
            if oa["md5"].endswith(".dir") and not (A / ".dvc/cache/files/md5" / oa["md5"][:2] / oa["md5"][2:]).is_file():
                ls = lambda r, h, pth: dict(l.split(" ", 2)[2].split("\t")[::-1] for l in subprocess.run(["git", "-C", str(r), "ls-tree", "-r", h, pth + "/"], capture_output=True, text=True).stdout.splitlines())
                fa, fb = ls(A, ha, oa["path"]), ls(B, hb, ob["path"])
                diffs = [f"{p}: {compare_file(p, blob(A, '', ha, p), blob(B, '', hb, p))}" for p in sorted(fa) if fa[p] != fb.get(p)]
                print(f"  {oa['path']} (git): {len(fa)} files; " + "; ".join(diffs))
                continue
            if oa["md5"].endswith(".dir"):
                da = {e["relpath"]: e["md5"] for e in json.loads(blob(A, oa["md5"]))}
                db = {e["relpath"]: e["md5"] for e in json.loads(blob(B, ob["md5"]))}
                diffs = [f"{p}: {compare_file(p, blob(A, da[p]), blob(B, db[p]))}" for p in sorted(da) if da[p] != db.get(p)]
                print(f"  {oa['path']}: {len(da)} files, {len(da) - len(diffs)} same hash; " + "; ".join(diffs) + ("" if da.keys() == db.keys() else " FILE SETS DIFFER"))
            else:
                print(f"  {oa['path']}: {compare_file(oa['path'], blob(A, oa['md5'], ha, oa['path']), blob(B, ob['md5'], hb, ob['path']))}")
    for st in lb:
        if st not in la:
            print(f"  stage {st}: only in B ({', '.join(o['path'] for o in lb[st].get('outs', []))})")
