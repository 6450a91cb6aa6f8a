"""The import structure of the tree: packages in one order, no circle, no upward import (docs/layering.md).

Imports are read from the source (``ast``): every ``import`` statement counts, lazy ones inside
functions and ``TYPE_CHECKING`` ones too. ``python -m tests.test_layering [--root DIR]`` prints the
figures of docs/layering.md for any checkout (an older commit in a ``git worktree`` too): rooms (a
top-level file or folder of ``ml/``, and ``stages/``, ``loop.py``), floors, arrows, arrows that run
up and circles, at the level of rooms and of files.
"""

from __future__ import annotations

import argparse
import ast
from collections import defaultdict
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

ORDER = ("base", "config", "game", "runtime", "data", "model", "play", "learn", "judge", "driver", "api")
"""The packages of ``ml/``, bottom to top: each imports only itself and packages before it."""
GENERIC = ("base", "config", "runtime", "data", "model", "play", "learn", "judge")
"""Packages that know no particular game and no driver: they reach a game through ``ml.game``'s
protocol, spec and registry, never ``ml.game.commander``."""


def project_files(root: Path) -> list[Path]:
    """The project's Python files: ``ml/``, ``stages/`` and ``loop.py`` (tests and bench are no rooms)."""
    files = [*sorted((root / "ml").rglob("*.py")), *sorted((root / "stages").glob("*.py"))]
    return [f for f in files if "__pycache__" not in f.parts] + ([root / "loop.py"] if (root / "loop.py").is_file() else [])


def module_of(root: Path, path: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports(path: Path) -> set[str]:
    """Project modules ``path`` names in any import statement (``from a import b``: ``a`` and ``a.b``)."""
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out |= {node.module, *(f"{node.module}.{a.name}" for a in node.names)}
    return {m for m in out if m.split(".")[0] in ("ml", "stages")}


def _face(path: Path) -> bool:
    """A package's ``__init__.py`` holding only its docstring: importing through it is no arrow to it."""
    body = ast.parse(path.read_text(encoding="utf-8")).body
    return path.name == "__init__.py" and all(isinstance(n, ast.Expr) and isinstance(n.value, ast.Constant) for n in body)


def file_graph(root: Path) -> dict[str, set[str]]:
    """File -> project files it imports (repo-relative paths; no arrow to a docstring-only ``__init__.py``)."""
    files = project_files(root)
    by_module = {module_of(root, f): f for f in files}
    graph: dict[str, set[str]] = {}
    for f in files:
        me = f.relative_to(root).as_posix()
        targets = {by_module[m] for m in imports(f) if m in by_module}
        graph[me] = {t.relative_to(root).as_posix() for t in targets if not _face(t)} - {me}
    return graph


def room_of(path: str) -> str:
    """A top-level file or folder of ``ml/`` (``ml/game/``), or ``stages/``, or ``loop.py``."""
    parts = path.split("/")
    if parts[0] == "ml" and len(parts) > 2:
        return f"ml/{parts[1]}/"
    if parts[0] == "stages":
        return "stages/"
    return path


def collapse(graph: dict[str, set[str]], key) -> dict[str, set[str]]:
    out: dict[str, set[str]] = defaultdict(set)
    for a, bs in graph.items():
        out[key(a)]
        for b in bs:
            if key(a) != key(b):
                out[key(a)].add(key(b))
    return dict(out)


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one node (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []
    counter = 0
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph.get(start, ()))))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on.add(start)
        while work:
            node, it = work[-1]
            for nxt in it:
                if nxt not in index:
                    index[nxt] = low[nxt] = counter
                    counter += 1
                    stack.append(nxt)
                    on.add(nxt)
                    work.append((nxt, iter(sorted(graph.get(nxt, ())))))
                    break
                if nxt in on:
                    low[node] = min(low[node], index[nxt])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    comp = []
                    while True:
                        n = stack.pop()
                        on.discard(n)
                        comp.append(n)
                        if n == node:
                            break
                    if len(comp) > 1:
                        out.append(sorted(comp))
    return out


def floors(graph: dict[str, set[str]]) -> dict[str, int]:
    """Floor of each node: 1 for a node importing nothing, else 1 + the highest floor it imports;
    the nodes of a circle share one floor (the circle counted as one node)."""
    comp_of = {n: i for i, c in enumerate(circles(graph)) for n in c}
    key = {n: f"#{comp_of[n]}" if n in comp_of else n for n in graph}
    dag = collapse({n: {b for b in bs if b in graph} for n, bs in graph.items()}, lambda n: key[n])
    memo: dict[str, int] = {}

    def floor(n: str) -> int:
        if n not in memo:
            memo[n] = 1 + max((floor(b) for b in dag.get(n, ())), default=0)
        return memo[n]

    return {n: floor(key[n]) for n in graph}


def upward(graph: dict[str, set[str]]) -> list[tuple[str, str]]:
    """Arrows inside a circle: whichever floor order is drawn, some of them run up."""
    comp = {n: i for i, c in enumerate(circles(graph)) for n in c}
    return sorted((a, b) for a, bs in graph.items() for b in bs if a in comp and comp.get(b) == comp[a])


def figures(root: Path) -> dict[str, dict[str, int]]:
    files = file_graph(root)
    rooms = collapse(files, room_of)
    out = {}
    for name, g in (("rooms", rooms), ("files", files)):
        fl = floors(g)
        out[name] = {
            "count": len(g),
            "floors": max(fl.values(), default=0),
            "arrows": sum(len(v) for v in g.values()),
            "arrows inside circles": len(upward(g)),
            "circles": len(circles(g)),
        }
    return out


def package_of(path: str) -> str | None:
    parts = path.split("/")
    return parts[1] if parts[0] == "ml" and len(parts) > 2 else None


def test_packages_import_only_downward() -> None:
    """Each package of ``ml/`` imports only itself and the packages before it in ``ORDER``."""
    bad = []
    for a, bs in file_graph(ROOT).items():
        pa = package_of(a)
        for b in bs:
            pb = package_of(b)
            if pa is not None and pb is not None and ORDER.index(pb) > ORDER.index(pa):
                bad.append(f"{a} -> {b}")
    assert not bad, bad
    found = {p.name for p in (ROOT / "ml").iterdir() if (p / "__init__.py").is_file()}
    assert found == set(ORDER), (
        f"ml/ packages {sorted(found)} differ from ORDER {ORDER}: add the new one to ORDER and docs/layering.md"
    )
    assert not [p.name for p in (ROOT / "ml").glob("*.py") if p.name != "__init__.py"], (
        "a module at the top of ml/: give it a package"
    )


def test_no_circle_of_files_or_rooms() -> None:
    files = file_graph(ROOT)
    assert circles(files) == [], circles(files)
    assert circles(collapse(files, room_of)) == []


@pytest.mark.parametrize("package", GENERIC)
def test_generic_packages_import_no_commander_driver_or_api(package: str) -> None:
    bad = {
        f"{p.relative_to(ROOT)} -> {m}"
        for p in (ROOT / "ml" / package).rglob("*.py")
        for m in imports(p)
        if m.startswith(("ml.game.commander", "ml.driver", "ml.api"))
    }
    assert not bad, sorted(bad)


def test_the_walk_sees_a_circle_and_an_upward_import(tmp_path: Path) -> None:
    """The figures are measured: a planted circle is counted (and would fail the tests above)."""
    (tmp_path / "ml" / "base").mkdir(parents=True)
    (tmp_path / "ml" / "judge").mkdir()
    for pkg in ("", "base/", "judge/"):
        (tmp_path / "ml" / pkg / "__init__.py").write_text('"""x"""\n')
    (tmp_path / "ml" / "base" / "a.py").write_text("from ml.judge.b import f\n")
    (tmp_path / "ml" / "judge" / "b.py").write_text("def f():\n    from ml.base.a import g  # lazy counts\n")
    got = figures(tmp_path)
    assert got["files"]["circles"] == 1 and got["files"]["arrows inside circles"] == 2
    assert got["rooms"]["circles"] == 1 and got["rooms"]["floors"] == 1


def _print(root: Path) -> None:
    for level, f in figures(root).items():
        print(f"{level:>5}: " + ", ".join(f"{k} {v}" for k, v in f.items()))
    files = file_graph(root)
    for c in circles(files):
        print("circle:", " <-> ".join(c))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", type=Path, default=ROOT, help="a checkout of the project (default: this one)")
    _print(parser.parse_args().root)
