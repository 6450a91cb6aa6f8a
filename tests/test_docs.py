"""The README and the manual (``docs/``, ``mkdocs.yml``).

Checks: the params reference that ``docs/hooks.py`` generates names every key of
``params.yaml`` (each section's keys, and those of its profiles) and every field of the
params models; the README stays a short tour (at most 200 lines) whose relative links all
point at files that exist; every page of ``docs/`` is in the manual's nav. The manual's own
links are checked by ``mkdocs build --strict`` (``.ci/run``).
"""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path
from types import ModuleType

from ml.config.params import Params
from ml.config.yaml_file import safe_yaml

ROOT = Path(__file__).resolve().parents[1]
README_MAX_LINES = 200


def _hooks() -> ModuleType:
    spec = importlib.util.spec_from_file_location("docs_hooks", ROOT / "docs" / "hooks.py")
    assert spec is not None and spec.loader is not None, "docs/hooks.py is missing"
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _keys(params: dict[str, object]) -> set[str]:
    """``section.key`` for every key of every section of a params mapping (profiles and curriculum left out)."""
    return {
        f"{section}.{key}"
        for section, values in params.items()
        if section not in ("profiles", "curriculum") and isinstance(values, dict)
        for key in values
    }


def test_params_reference_names_every_key_of_params_yaml() -> None:
    page = _hooks().params_reference()
    named = set(re.findall(r"^\| `([a-z_]+\.[a-z_]+)` \|", page, re.M))
    params = safe_yaml().load((ROOT / "params.yaml").read_text(encoding="utf-8"))
    in_file = _keys(params)
    for profile in (params.get("profiles") or {}).values():
        in_file |= _keys(profile)
    assert in_file - named == set(), f"params.yaml keys missing from the generated reference: {sorted(in_file - named)}"
    sections = {s: f.annotation for s, f in Params.model_fields.items() if s not in ("profiles", "curriculum")}
    fields = {f"{s}.{k}" for s, model in sections.items() if isinstance(model, type) for k in model.model_fields}
    assert fields == named, f"reference and models differ: {sorted(fields ^ named)}"
    assert "## `curriculum`" in page and "## `profiles`" in page


def test_readme_is_a_short_tour_with_working_links() -> None:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(text.splitlines()) <= README_MAX_LINES, (
        f"README.md has {len(text.splitlines())} lines (at most {README_MAX_LINES})"
    )
    assert "bash .ci/run" in text
    targets = re.findall(r"\]\(([^)#:]+)(?:#[^)]*)?\)", text)
    assert targets, "README.md links to no page of the manual"
    missing = [t for t in targets if not (ROOT / t).exists()]
    assert missing == [], f"README.md links to missing files: {missing}"


def test_every_page_is_in_the_nav() -> None:
    nav = (ROOT / "mkdocs.yml").read_text(encoding="utf-8")
    pages = {p.name for p in (ROOT / "docs").glob("*.md")} | {_hooks().PARAMS_PAGE}
    listed = set(re.findall(r":\s+([\w-]+\.md)\s*$", nav, re.M))
    assert pages == listed, f"docs pages and mkdocs.yml's nav differ: {sorted(pages ^ listed)}"
