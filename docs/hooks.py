"""The manual's generated parts, written when ``mkdocs build`` runs (``hooks:`` in ``mkdocs.yml``).

- ``params.md``, the params reference: one table per section of ``params.yaml``, built from the
  pydantic models of ``ml.config.sections`` (each field's docstring is its description, pydantic's
  ``use_attribute_docstrings``), their defaults and bounds, and the stages whose ``params:`` in
  ``dvc.yaml`` name the key. ``tests/test_docs.py`` checks that it names every key of ``params.yaml``.
- the endpoint reference at the end of ``api.md``: every path of the dashboard server's OpenAPI schema
  (``ml.api.app.create_app``), with its summary, description, parameters, request body and answers.

Nothing is fetched and nothing is written into ``docs/``: the params page is a generated file of the
build (``File.generated``), the endpoint list replaces a marker in ``api.md``'s Markdown.
"""

from __future__ import annotations

import json
import re
import types
import typing
from pathlib import Path
from typing import Any

from pydantic import BaseModel

ROOT = Path(__file__).resolve().parents[1]
"""The repository root (``params.yaml``, ``dvc.yaml``)."""
PARAMS_PAGE = "params.md"
"""Where the params reference appears in the manual (``mkdocs.yml``'s nav names it)."""
API_MARKER = "<!-- endpoints: generated from the OpenAPI schema by docs/hooks.py -->"
"""The line of ``api.md`` that the endpoint reference replaces."""


def _text(doc: str | None) -> str:
    """A docstring as one Markdown line: RST ``code`` as `code`, lines joined, ``|`` escaped for tables."""
    if not doc:
        return ""
    text = re.sub(r"``(.+?)``", r"`\1`", doc)
    text = " ".join(part.strip() for part in text.strip().splitlines() if part.strip())
    return text.replace("|", "\\|")


def _type(annotation: Any) -> str:
    """A field's type in words: ``int``, ``one of `a`, `b```, ``list of int``, ``mapping of str to float``."""
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is typing.Annotated:
        return _type(args[0])
    if origin is typing.Literal:
        return "one of " + ", ".join(f"`{a}`" for a in args)
    if origin in (typing.Union, types.UnionType):
        kinds = [_type(a) for a in args if a is not type(None)]
        return " or ".join(kinds) + (" or null" if type(None) in args else "")
    if origin in (list, tuple):
        return f"list of {_type(args[0])}" if args else "list"
    if origin is dict:
        return f"mapping of {_type(args[0])} to {_type(args[1])}" if args else "mapping"
    if annotation is Any:
        return "any"
    return getattr(annotation, "__name__", str(annotation))


def _bounds(field: Any) -> str:
    """A field's constraints (``>= 1``, ``< 0.5``, a pattern) from its pydantic metadata."""
    out = []
    for m in field.metadata:
        for attr, sign in (("ge", ">="), ("gt", ">"), ("le", "<="), ("lt", "<")):
            if (v := getattr(m, attr, None)) is not None:
                out.append(f"{sign} {v}")
        if (p := getattr(m, "pattern", None)) is not None:
            out.append(f"pattern `{p}`".replace("|", "\\|"))
    return ", ".join(out)


def _default(field: Any) -> str:
    """A field's default as ``params.yaml`` writes it (JSON flow style), or ``required``."""
    if field.is_required():
        return "required"
    value = field.default_factory() if field.default_factory is not None else field.default
    if isinstance(value, BaseModel):
        value = value.model_dump()
    if isinstance(value, tuple):
        value = list(value)
    return f"`{json.dumps(value)}`".replace("|", "\\|")


def _readers() -> dict[str, list[str]]:
    """Each ``params:`` entry of ``dvc.yaml`` (``train``, ``base.seed``) -> the stages that name it."""
    from ml.config.yaml_file import safe_yaml

    stages = safe_yaml().load((ROOT / "dvc.yaml").read_text(encoding="utf-8"))["stages"]
    readers: dict[str, list[str]] = {}
    for name, stage in stages.items():
        for entry in stage.get("params") or []:
            readers.setdefault(str(entry), []).append(name)
    return readers


def _profiles() -> dict[str, list[str]]:
    """Each profile of ``params.yaml`` -> the sections it sets."""
    from ml.config.yaml_file import safe_yaml

    profiles = safe_yaml().load((ROOT / "params.yaml").read_text(encoding="utf-8")).get("profiles") or {}
    return {str(name): [str(s) for s in sections] for name, sections in profiles.items()}


def _model_table(model: type[BaseModel], prefix: str, readers: dict[str, list[str]] | None) -> list[str]:
    """One Markdown table row per field of ``model``, keys written ``prefix.field``."""
    head = (
        "| key | default | type | bounds | read by | meaning |"
        if readers is not None
        else "| key | default | type | bounds | meaning |"
    )
    rows = [head, "|" + "---|" * (head.count("|") - 1)]
    for name, field in model.model_fields.items():
        key = f"{prefix}.{name}" if prefix else name
        cells = [f"`{key}`", _default(field), _text(_type(field.annotation)), _bounds(field)]
        if readers is not None:
            section = prefix.split(".")[0]
            stages = sorted({s for entry in (section, key) for s in readers.get(entry, [])})
            cells.append(", ".join(stages) or "-")
        cells.append(_text(field.description))
        rows.append("| " + " | ".join(cells) + " |")
    return rows


def params_reference() -> str:
    """The params reference page: one table per section of ``Params``, then the curriculum's phase keys."""
    from ml.config.curriculum import AbortIf, Phase
    from ml.config.params import Params

    readers = _readers()
    lines = [
        "# Params reference",
        "",
        "Every key of `params.yaml`, generated from the pydantic models of `ml/config/sections.py` when the",
        "manual is built (`docs/hooks.py`): the default is the value `params.yaml` writes, the meaning is the",
        "field's docstring. *Read by* lists the DVC stages whose `params:` in `dvc.yaml` name the key or its",
        "section (a change re-runs them); a key no stage names (-) is read by `loop.py`, or, in `compute`, by",
        "the stages without being a DVC param (it changes no result). How to change a value:",
        "[Configuration](configuration.md).",
        "",
    ]
    for section, field in Params.model_fields.items():
        lines += [f"## `{section}`", ""]
        if field.description:
            lines += [_text(field.description), ""]
        model = field.annotation
        if section == "curriculum":
            lines += ["Each phase of the list (what each key does: [Curriculum phases](curriculum.md)):", ""]
            lines += [*_model_table(Phase, "curriculum[]", None), ""]
            lines += [f"`abort_if` (of a phase, and `selfplay.abort_if`): {_text(AbortIf.__doc__)}", ""]
            lines += [*_model_table(AbortIf, "curriculum[].abort_if", None), ""]
        elif section == "profiles":
            lines += [
                "A profile's keys are those of the sections above. The profiles of `params.yaml` and the sections each sets:",
                "",
            ]
            lines += [*(f"- `{name}`: {', '.join(f'`{s}`' for s in sections)}" for name, sections in _profiles().items()), ""]
        elif isinstance(model, type) and issubclass(model, BaseModel):
            if own := model.__dict__.get("__doc__"):
                lines += [_text(own), ""]
            lines += [*_model_table(model, section, readers), ""]
    return "\n".join(lines)


def _ref(schema: dict[str, Any]) -> str | None:
    """The component name a schema refers to, directly or as one branch of ``anyOf`` (an optional body)."""
    if ref := schema.get("$ref"):
        return str(ref).rsplit("/", 1)[-1]
    return next((name for branch in schema.get("anyOf", []) if (name := _ref(branch))), None)


def _schema_fields(name: str, components: dict[str, Any]) -> list[str]:
    """The top-level fields of a component schema, one nested bullet each, with their descriptions."""
    schema = components[name]
    required = schema.get("required", [])
    return [
        f"    - `{field}`{' (required)' if field in required else ''}: {_text(prop.get('description') or prop.get('title'))}"
        for field, prop in (schema.get("properties") or {}).items()
    ]


def _endpoint(method: str, path: str, op: dict[str, Any], components: dict[str, Any]) -> list[str]:
    """One endpoint: its description, parameters, body and answers (with the fields of each named schema)."""
    lines = [f"### `{method.upper()} {path}`", "", _text(op.get("description") or op.get("summary")), ""]
    params = [
        f"`{p['name']}` ({p['in']}): {_text(p.get('description') or p.get('schema', {}).get('title'))}"
        for p in op.get("parameters", [])
    ]
    if params:
        lines.append("- parameters: " + "; ".join(params))
    body = op.get("requestBody", {}).get("content", {}).get("application/json", {}).get("schema")
    if body and (name := _ref(body)):
        optional = "" if op["requestBody"].get("required") else " (optional)"
        lines += [f"- body{optional}: `{name}`", *_schema_fields(name, components)]
    for code, answer in op["responses"].items():
        schema = answer.get("content", {}).get("application/json", {}).get("schema", {})
        name = _ref(schema) if code.startswith("2") else None
        lines.append(f"- {code}: {_text(answer.get('description'))}" + (f", `{name}`" if name else ""))
        if name:
            lines += _schema_fields(name, components)
    return [*lines, ""]


def api_reference() -> str:
    """Every endpoint of the dashboard server's OpenAPI schema, as Markdown (``create_app`` on this repository)."""
    from ml.api.app import create_app

    spec = create_app(ROOT).openapi()
    components = spec.get("components", {}).get("schemas", {})
    lines = [f"Generated from the server's OpenAPI schema ({spec['info']['title']}, version {spec['info']['version']}).", ""]
    for path, ops in spec["paths"].items():
        for method, op in ops.items():
            lines += _endpoint(method, path, op, components)
    return "\n".join(lines)


def on_files(files: Any, config: Any) -> Any:
    """mkdocs hook: add the generated params reference to the manual's files."""
    from mkdocs.structure.files import File

    files.append(File.generated(config, PARAMS_PAGE, content=params_reference()))
    return files


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    """mkdocs hook: put the endpoint reference where ``api.md`` has its marker."""
    if API_MARKER in markdown:
        markdown = markdown.replace(API_MARKER, api_reference())
    return markdown
