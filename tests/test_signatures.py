"""Signatures of ``ml/``: at most 8 parameters a function, no bare ``dict`` or ``Any`` in a public one.

Read from the source (``ast``). A parameter is any but ``self``/``cls`` (``*args`` and ``**kwargs``
count one each). Public: a function or method whose name, its class's and its module's do not start
with ``_``. ``tests/signature_exceptions.py`` lists the few kept, each with its reason.
"""

from __future__ import annotations

import ast
from pathlib import Path

from tests.signature_exceptions import SIGNATURE_EXCEPTIONS

ROOT = Path(__file__).resolve().parents[1]
MAX_PARAMETERS = 8
KEPT = {where for where, _ in SIGNATURE_EXCEPTIONS}


def _bare(annotation: ast.expr) -> bool:
    """A ``dict`` without type arguments or an ``Any`` anywhere in ``annotation`` (string annotations parsed)."""
    subscripted = {id(n.value) for n in ast.walk(annotation) if isinstance(n, ast.Subscript)}
    for n in ast.walk(annotation):
        if isinstance(n, ast.Name) and ((n.id in ("dict", "Dict") and id(n) not in subscripted) or n.id == "Any"):
            return True
        if isinstance(n, ast.Constant) and isinstance(n.value, str):
            try:
                if _bare(ast.parse(n.value, mode="eval").body):
                    return True
            except SyntaxError:
                continue
    return False


def _functions() -> list[tuple[str, ast.FunctionDef | ast.AsyncFunctionDef, bool]]:
    """(``path:Qualified.name``, node, public) of every function and method in ``ml/``."""
    out = []

    def visit(node: ast.AST, path: str, prefix: str, public: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.ClassDef):
                visit(child, path, f"{prefix}{child.name}.", public and not child.name.startswith("_"))
            elif isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                dunder = child.name in ("__init__", "__call__")
                out.append((f"{path}:{prefix}{child.name}", child, public and (dunder or not child.name.startswith("_"))))
                visit(child, path, f"{prefix}{child.name}.", False)

    for file in sorted((ROOT / "ml").rglob("*.py")):
        path = file.relative_to(ROOT).as_posix()
        visit(
            ast.parse(file.read_text(encoding="utf-8")), path, "", not file.name.startswith("_") or file.name == "__init__.py"
        )
    return out


def _parameters(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> list[ast.arg]:
    a = fn.args
    named = [p for p in a.posonlyargs + a.args + a.kwonlyargs if p.arg not in ("self", "cls")]
    return named + [p for p in (a.vararg, a.kwarg) if p is not None]


def test_no_function_takes_more_than_eight_parameters() -> None:
    wide = [
        f"{where} ({len(_parameters(fn))})"
        for where, fn, _ in _functions()
        if len(_parameters(fn)) > MAX_PARAMETERS and where not in KEPT
    ]
    assert not wide, f"more than {MAX_PARAMETERS} parameters (take a typed section or a small frozen dataclass): {wide}"


def test_no_bare_dict_or_any_in_a_public_signature() -> None:
    bare = [
        where
        for where, fn, public in _functions()
        if public
        and where not in KEPT
        and any(
            _bare(a)
            for a in [
                *(p.annotation for p in _parameters(fn) if p.annotation is not None),
                *([fn.returns] if fn.returns else []),
            ]
        )
    ]
    assert not bare, (
        f"bare dict or Any in a public signature (type it, or list it with a reason in tests/signature_exceptions.py): {bare}"
    )


def _module_names() -> set[str]:
    """``path:NAME`` of every module-level assignment in ``ml/`` (a type alias may be an exception too)."""
    out = set()
    for file in sorted((ROOT / "ml").rglob("*.py")):
        for node in ast.parse(file.read_text(encoding="utf-8")).body:
            targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, ast.AnnAssign) else []
            out |= {f"{file.relative_to(ROOT).as_posix()}:{t.id}" for t in targets if isinstance(t, ast.Name)}
    return out


def test_every_listed_exception_exists_and_says_why() -> None:
    names = {where for where, _, _ in _functions()} | _module_names()
    assert not [w for w in KEPT if w not in names], "an exception names no function: remove it"
    assert all(len(why) > 20 for _, why in SIGNATURE_EXCEPTIONS)


def test_the_scan_sees_a_bare_dict_and_any() -> None:
    for text, bad in (
        ("dict", True),
        ("dict[str, int]", False),
        ("list[dict]", True),
        ("Any", True),
        ("'Mapping[str, Any]'", True),
        ("int", False),
    ):
        assert _bare(ast.parse(text, mode="eval").body) is bad, text
