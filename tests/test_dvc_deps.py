"""``dvc.yaml``: each stage's code deps are package folders that cover every project module it imports,
and nothing of the driver.

A stage's code deps are its own file, ``stages/__init__.py``, ``ml/__init__.py`` and whole package
folders (``ml/play``, ``ml/learn``, ...): DVC hashes a folder dep, so an import of another module of a
package the stage already reaches needs no edit of ``dvc.yaml``. A module a stage imports (directly,
through another module, or lazily inside a function) outside its deps would let DVC skip a needed
rerun after that module changed; a dep on ``ml/driver/`` or ``ml/api/`` (loop.py, the dashboard)
would re-run stages for changes that cannot alter their outputs. The imports are read from the
source (``ast``), so every branch counts, the ``TYPE_CHECKING`` ones too. Each stage module imports
nothing from another stage and nothing from ``ml/driver/``. ``.dvcignore`` keeps the caches Python
and numba write into those folders out of their hashes.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from ml.config.yaml_file import safe_yaml
from tests.test_layering import imports as _imports

ROOT = Path(__file__).resolve().parents[1]
STAGES = ("teacher", "train", "selfplay", "export", "gate", "merge", "rate")
PACKAGES = ("ml", "stages")
NEVER = ("ml/driver", "ml/api")
GAME_DATA = "ml/game/commander/data"
"""Read at run time by ``ml/game/commander/cards.py`` (cards and decks), not imported."""
SHARED_FILES = ("stages/__init__.py", "ml/__init__.py")
"""The code deps of every stage that are files: the rest are its own file and package folders."""


def _module_file(name: str) -> Path | None:
    p = ROOT.joinpath(*name.split("."))
    for f in (p.with_suffix(".py"), p / "__init__.py"):
        if f.is_file():
            return f
    return None


def _closure(stage: str) -> set[str]:
    """Repo-relative files of every project module ``stages.<stage>`` runs (packages' ``__init__`` included)."""
    todo, seen, files = [f"stages.{stage}"], set(), set()
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        parts = name.split(".")
        for i in range(1, len(parts) + 1):
            f = _module_file(".".join(parts[:i]))
            if f is not None and f not in files:
                files.add(f)
                todo.extend(_imports(f))
    return {f.relative_to(ROOT).as_posix() for f in files}


def _deps(stage: str) -> list[str]:
    return safe_yaml().load((ROOT / "dvc.yaml").read_text())["stages"][stage]["deps"]


def _covered(path: str, deps: list[str]) -> bool:
    return any(path == d or path.startswith(d.rstrip("/") + "/") for d in deps)


@pytest.mark.parametrize("stage", STAGES)
def test_deps_cover_every_imported_module(stage: str) -> None:
    deps, files = _deps(stage), _closure(stage)
    missing = sorted(f for f in files if not _covered(f, deps))
    folders = sorted({"/".join(f.split("/")[:2]) if f.count("/") > 1 else f for f in missing})
    assert not missing, f"dvc.yaml stage {stage}: add to deps {folders}: stages/{stage}.py imports {missing}"
    if "ml/game/commander/cards.py" in files:
        assert _covered(GAME_DATA, deps), f"dvc.yaml stage {stage}: deps lack {GAME_DATA} (cards and decks)"


@pytest.mark.parametrize("stage", STAGES)
def test_deps_name_no_driver_and_nothing_unused(stage: str) -> None:
    deps, files = _deps(stage), _closure(stage)
    code = [d for d in deps if d.split("/")[0] in PACKAGES]
    assert not [d for d in code if _covered(d, list(NEVER)) or any(_covered(n, [d]) for n in NEVER)], deps
    unused = [d for d in code if not any(_covered(f, [d]) for f in files)]
    assert not unused, f"dvc.yaml stage {stage}: deps {unused} are not imported by stages/{stage}.py"


@pytest.mark.parametrize("stage", STAGES)
def test_code_deps_are_package_folders(stage: str) -> None:
    """No hand-kept module list: a code dep that is a file is the stage's own or a shared ``__init__.py``."""
    code = [d for d in _deps(stage) if d.split("/")[0] in PACKAGES]
    files = [d for d in code if d not in (f"stages/{stage}.py", *SHARED_FILES)]
    modules = [d for d in files if not (ROOT / d / "__init__.py").is_file()]
    assert not modules, f"dvc.yaml stage {stage}: name the package folder instead of {modules}"
    nested = [d for d in files if d.count("/") != 1]
    assert not nested, f"dvc.yaml stage {stage}: name the top package folder (ml/<package>) instead of {nested}"


def test_dvcignore_keeps_caches_out_of_the_folder_deps() -> None:
    """Bytecode and numba's cache files (``__pycache__``, ``*.pyc``, ``*.nbi``, ``*.nbc``) written into a
    package folder by a run or a test do not change the folder's hash, so they re-run no stage."""
    from dvc.fs import LocalFileSystem
    from dvc.ignore import DvcIgnorePatterns

    ignore = DvcIgnorePatterns.from_file(str(ROOT / ".dvcignore"), LocalFileSystem(), ".dvcignore")
    core = "ml/game/commander/core"
    caches = [(core, "__pycache__", True)] + [
        (folder, name, False)
        for folder in (core, f"{core}/__pycache__")
        for name in ("kernels.step_kernel-100.py311.nbi", "kernels.step_kernel-100.py311.1.nbc", "kernels.pyc")
    ]
    kept = [f"{d}/{n}" for d, n, is_dir in caches if not ignore.matches(str(ROOT / d), n, is_dir)]
    assert not kept, f".dvcignore: ignore {kept} (a cache in a dep folder would re-run the stages)"
    code = [(core, "kernels.py"), (GAME_DATA, "cards.yaml")]
    dropped = [f"{d}/{n}" for d, n in code if ignore.matches(str(ROOT / d), n)]
    assert not dropped, f".dvcignore hides {dropped} from DVC: a change to them would re-run nothing"


@pytest.mark.parametrize("stage", STAGES)
def test_a_stage_imports_no_other_stage_and_no_driver(stage: str) -> None:
    direct = _imports(ROOT / "stages" / f"{stage}.py")
    assert not [m for m in direct if m.startswith("stages.")], direct
    files = _closure(stage)
    assert not [f for f in files if _covered(f, list(NEVER))], sorted(files)


def test_only_loop_and_api_import_the_driver():
    users = {
        p.relative_to(ROOT).as_posix()
        for p in [*ROOT.glob("ml/**/*.py"), *ROOT.glob("stages/*.py"), *ROOT.glob("bench/*.py")]
        if not p.is_relative_to(ROOT / "ml/driver") and any(m.startswith("ml.driver") for m in _imports(p))
    }
    assert all(u.startswith("ml/api/") for u in users), sorted(users)


@pytest.mark.parametrize("stage", STAGES)
def test_every_input_the_command_names_is_a_dep(stage: str) -> None:
    """A path the stage's command reads (``data/...``, ``${mdir}/...``, not one of its outs) is in its deps,
    so DVC re-runs the stage when that input changes."""
    body = safe_yaml().load((ROOT / "dvc.yaml").read_text())["stages"][stage]
    outs = {next(iter(o)) if isinstance(o, dict) else o for key in ("outs", "metrics", "plots") for o in body.get(key, [])}
    named = [w for w in body["cmd"].split() if w.startswith(("data/", "${mdir}/"))]
    inputs = [w for w in named if not any(w == o or w.startswith(o.rstrip("/") + "/") for o in outs)]
    missing = [w for w in inputs if w not in body["deps"]]
    assert not missing, f"dvc.yaml stage {stage}: deps lack {missing}, which its command reads"
