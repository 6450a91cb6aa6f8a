"""DVC-tracked data cannot change behind the loop's back (``ml.driver.dataguard``).

Checks, on copies of the two-generation reference run (``reference_run``): a line appended to an
accepted batch in ``data/pool`` through its hard link (so into the DVC cache object the earlier
commits share) makes ``loop.py --max-generations 3`` refuse before it writes anything, naming
the file, the shared object and the commands that restore it, and those commands do restore
the object and the files; an edit of an intact copy is refused with ``dvc checkout --force``;
the README's recipe for editing a tracked data file is accepted by the loop and leaves the
earlier commits' object as it was. Issue 42, item 16: an input's pointer removed by a commit is
refused, naming the commit and the command that restores it, and not made again.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from ml.config.yaml_file import safe_yaml
from ml.driver.dataguard import CACHE_DIR, refuse_changed_data, tracked_changes
from ml.driver.workspace import LoopError
from tests.conftest import ROOT, attempt_commits, git, run_loop

pytestmark = pytest.mark.expensive  # loop.py, git and DVC in copies of a run
FORGE = ROOT / "tests/fixtures/forge/import"
ENV = {**os.environ, "DVC_NO_ANALYTICS": "1", "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}


def _md5(path: Path) -> str:
    return hashlib.md5(path.read_bytes()).hexdigest()


def _snapshot(repo: Path) -> dict:
    """What a refusal must leave as it was: the commits, the work tree's status, params and state."""
    return {
        "log": git(repo, "log", "--format=%H"),
        "status": git(repo, "status", "--porcelain", "--untracked-files=all"),
        "params": (repo / "params.yaml").read_bytes(),
        "state": {p.name: p.read_bytes() for p in sorted((repo / "state").iterdir())},
    }


def _sh(repo: Path, script: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", "-e", "-c", script], cwd=repo, env={**ENV, **(env or {})}, capture_output=True, text=True)


def test_edit_through_the_hard_link_is_refused_and_the_printed_commands_restore_it(reference_run, tmp_path: Path):
    repo = reference_run[0]  # this test's copy (cp -a: data/, data/merged and the cache stay one inode)
    batch = sorted((repo / "data/pool").glob("ml-decisions-ppo-*.jsonl"))[0]
    md5 = _md5(batch)
    obj = repo / CACHE_DIR / md5[:2] / md5[2:]
    assert obj.samefile(batch) and obj.samefile(repo / "data/merged/pool" / batch.name)  # one inode: pool, merged, cache
    before = _snapshot(repo)
    os.chmod(batch, 0o644)  # what root's write ignores: the read-only mode
    with batch.open("a") as f:
        f.write(batch.read_text().splitlines()[-1] + "\n")
    os.chmod(batch, 0o444)
    assert _md5(obj) != md5  # the object the earlier commits point to no longer matches its name

    res = run_loop(repo, "--max-generations", "3")
    err = res.stderr
    assert res.returncode == 2 and "Traceback" not in err, res.stdout[-2000:] + err[-3000:]
    rel = str(batch.relative_to(repo))
    merged = f"data/merged/pool/{batch.name}"
    assert f"edited in place: {merged} (recorded in dvc.lock, stage merge), {rel} (recorded in data/pool.dvc)" in err
    first, last = attempt_commits(repo)[0][0], attempt_commits(repo)[-1][0]
    assert f"cache object {obj.relative_to(repo)}, so the edit changed that object too: the 2 commits that record it" in err
    assert f"({first[:7]} " in err and f"{last[:7]} " in err and "checking them out brings the edit back" in err
    assert f"stage export made it at {first[:7]}" in err  # the attempt that exported the batch, not merge which carries it
    assert _snapshot(repo) == before  # no commit, nothing written, params and state as they were

    # the commands it prints restore the object (the stage run again makes the same bytes) and the files
    commands = [line.strip() for line in err.splitlines() if line.startswith("      ")]
    assert commands[0] == f"rm -f {obj.relative_to(repo)}" and commands[-1] == "dvc checkout --force data/merged data/pool"
    done = _sh(repo, "\n".join(commands))
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert _md5(obj) == md5 and _md5(batch) == md5 and _md5(repo / "data/merged/pool" / batch.name) == md5
    assert tracked_changes(repo) == [] and _snapshot(repo) == before
    assert git(repo, "worktree", "list").count("\n") == 1  # the rebuild's worktree is gone

    # this process remembers that clean check by the files' stat: an edit of the same size after it is still seen
    body = batch.read_bytes()
    os.chmod(batch, 0o644)
    batch.write_bytes(b"[" + body[1:])
    os.chmod(batch, 0o444)
    assert rel in [c.path for c in tracked_changes(repo)]


def test_readme_edit_recipe_is_accepted_and_keeps_the_earlier_commits(reference_run, tmp_path: Path):
    repo = reference_run[0]  # this test's copy (cp -a: data/, data/merged and the cache stay one inode)
    res = run_loop(repo, "import-forge", "--cards", str(FORGE / "cards.yaml"), str(FORGE / "ml-decisions-5d0c3f19.jsonl"))
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]
    cards = repo / "data/forge/cards.yaml"
    md5 = _md5(cards)
    obj = repo / CACHE_DIR / md5[:2] / md5[2:]
    imported = git(repo, "rev-parse", "HEAD").strip()
    editor = tmp_path / "editor.sh"
    editor.write_text('#!/bin/sh\necho "Recipe Test Card: land" >> "$1"\n')
    editor.chmod(0o755)

    # an edit of the unprotected copy left unrecorded is refused, the object intact; checkout restores it
    _sh(repo, f'dvc unprotect {cards.relative_to(repo)} && "$EDITOR" {cards.relative_to(repo)}', {"EDITOR": str(editor)})
    with pytest.raises(LoopError) as refused:
        refuse_changed_data(repo, promotion_pending=True)
    said = str(refused.value)
    assert "edited: data/forge/cards.yaml (recorded in data/forge.dvc; its cache object is intact)" in said
    assert "`dvc checkout --force data/forge`" in said and "`dvc add data/forge && git commit" in said
    assert _sh(repo, "dvc checkout --force data/forge").returncode == 0 and _md5(cards) == md5
    assert obj.samefile(cards)  # checked out: a hard link to the object, what the recipe's `dvc unprotect` is for
    refuse_changed_data(repo, promotion_pending=True)

    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    recipe = re.search(r"To edit a\s+tracked data file.*?```bash\n(.*?)```", readme, re.S)
    assert recipe is not None, "README: the recipe 'To edit a tracked data file' is gone"
    done = _sh(repo, recipe.group(1), {"EDITOR": str(editor)})
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert cards.read_text().endswith("Recipe Test Card: land\n") and _md5(obj) == md5  # the earlier commits' object kept
    assert git(repo, "status", "--porcelain", "--untracked-files=no") == ""
    assert git(repo, "rev-parse", "HEAD~1").strip() == imported
    recorded = safe_yaml().load((repo / "data/forge.dvc").read_text())["outs"][0]["md5"]
    listing = json.loads((repo / CACHE_DIR / recorded[:2] / recorded[2:]).read_text())
    assert {e["relpath"]: e["md5"] for e in listing}["cards.yaml"] == _md5(cards)

    res = run_loop(repo, "--max-generations", "3", "--max-attempts", "1")
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-3000:]
    assert len(attempt_commits(repo)) == 3
    assert git(repo, "show", "HEAD:data/forge.dvc") == (repo / "data/forge.dvc").read_text()


def test_an_output_of_the_attempt_in_flight_edited_in_place_is_rebuilt_by_its_stage(reference_run, tmp_path: Path):
    """A stage's output edited through its hard link before the attempt's commit (no commit records it): the advice
    is to run that stage again, and the printed commands restore the bytes and finish the attempt."""
    repo = reference_run[0]  # this test's copy (cp -a: data/, data/merged and the cache stay one inode)
    killed = run_loop(repo, "--max-generations", "3", env={"DISTILL_FAULT": "g002.repro.rate.done"})
    assert killed.returncode != 0 and (repo / "data/tournament.json").is_file(), killed.stderr[-2000:]
    played = repo / "data/tournament.json"
    md5 = _md5(played)
    os.chmod(played, 0o644)
    played.write_text("{bad")  # in place: the cache object changes with it
    res = run_loop(repo, "--max-generations", "3")
    err = res.stderr
    assert res.returncode == 2 and "Traceback" not in err, res.stdout[-2000:] + err[-3000:]
    assert "edited in place: data/tournament.json (recorded in dvc.lock, stage rate)" in err
    assert "stage rate made it in the attempt in flight" in err and "dvc add" not in err
    commands = [line.strip() for line in err.splitlines() if line.startswith("      ")]
    assert commands[-2:] == ["dvc repro --single-item --force rate", "python loop.py"]
    done = _sh(repo, "\n".join([*commands[:-1], f"{sys.executable} loop.py --max-generations 3"]))
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert _md5(played) == md5 and tracked_changes(repo) == []
    assert len(attempt_commits(repo)) == 3 and git(repo, "status", "--porcelain", "--untracked-files=no") == ""


def test_a_pointer_removed_by_a_commit_is_refused_not_made_again(tmp_path: Path):
    """Issue 42, item 16: a committed ``git rm data/pool.dvc`` was made again by the next attempt's
    ``ensure_data_dirs`` (``dvc add``) and committed without a word. Now the guard loop.py runs at start,
    and ``ensure_data_dirs`` itself, refuse in one line naming the pointer, the commit that removed it and
    the command that restores it; nothing is written. A pointer no commit ever had (a fresh clone's) is
    not refused; one deleted in the work tree alone is named with ``git checkout HEAD``."""
    from ml.driver.dataguard import refuse_removed_inputs
    from ml.driver.steps import AttemptSteps

    repo = tmp_path / "repo"
    (repo / "data/pool").mkdir(parents=True)
    git(repo, "init", "-q", "-b", "main")
    git(repo, "config", "user.email", "test@example.com")
    git(repo, "config", "user.name", "test")
    (repo / "README.md").write_text("a run\n")
    git(repo, "add", "README.md")
    git(repo, "commit", "-qm", "project")
    refuse_removed_inputs(repo)  # a fresh clone: no pointer yet, none removed
    (repo / "data/pool.dvc").write_text("outs:\n- md5: 0123456789abcdef0123456789abcdef.dir\n  path: pool\n")
    git(repo, "add", "data/pool.dvc")
    git(repo, "commit", "-qm", "gen 000 attempt 1: accepted")
    refuse_removed_inputs(repo)
    (repo / "data/pool.dvc").unlink()
    with pytest.raises(LoopError) as deleted:
        refuse_removed_inputs(repo)
    assert str(deleted.value) == (
        "data/pool.dvc is deleted from the work tree, but the loop needs it: it records data/pool, which the pipeline "
        "reads, and the loop would make a new one without a word. Restore it: `git checkout HEAD -- data/pool.dvc`, "
        "then run loop.py again."
    )
    git(repo, "rm", "-q", "--cached", "data/pool.dvc")
    git(repo, "commit", "-qm", "drop the pool")
    sha = git(repo, "rev-parse", "--short=7", "HEAD").strip()
    head = git(repo, "rev-parse", "HEAD")
    with pytest.raises(LoopError) as removed:
        refuse_removed_inputs(repo)
    said = str(removed.value)
    assert said == (
        f'data/pool.dvc was removed by commit {sha} "drop the pool", but the loop needs it: it records data/pool, which '
        "the pipeline reads, and the loop would make a new one without a word. Restore it: "
        f"`git checkout {sha}~1 -- data/pool.dvc && git commit -m 'restore data/pool.dvc' data/pool.dvc`, "
        "then run loop.py again."
    )
    with pytest.raises(LoopError, match=r"data/pool\.dvc was removed by commit"):
        AttemptSteps(repo).ensure_data_dirs()  # the step that made it again
    assert not (repo / "data/pool.dvc").exists() and git(repo, "rev-parse", "HEAD") == head
    restore = said.split("Restore it: `", 1)[1].split("`", 1)[0]
    assert subprocess.run(restore, shell=True, cwd=repo, capture_output=True).returncode == 0  # as a user runs it
    refuse_removed_inputs(repo)
