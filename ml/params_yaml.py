"""Reading ``params.yaml`` for ``ml.params``: YAML 1.2 floats, no key written twice, the line of every key.

PyYAML reads YAML 1.1, where ``1e-3`` (no dot) is a string; ruamel.yaml (``ml.driver.params_file``)
and DVC read YAML 1.2, where it is a float. ``read_yaml`` reads floats as YAML 1.2 does, refuses
a key written twice in one mapping (PyYAML keeps the later value silently) and returns each
key's line, so an error can name it (``params.yaml:12: train.epochs: ...``).
"""

from __future__ import annotations

import difflib
import re
import typing
from typing import Any

import yaml
from pydantic import BaseModel

KeyPath = tuple[str | int, ...]
"""A place in the params: section, key, sub-key or list index (pydantic's error ``loc``)."""


class ParamsError(ValueError):
    """A bad ``params.yaml``: the message names the file, the line where known, the section and the key
    (``ml.params.ParamsError``: ``ml.params`` raises it, this module only for bad YAML and a key written twice)."""


class At(ValueError):
    """A validator's error about the params at ``loc`` (relative to what the validator checks: from the
    top level for a model validator of ``Params``, from the field for a field validator), so that
    ``error_lines`` can name its line."""

    def __init__(self, loc: KeyPath, text: str) -> None:
        super().__init__(text)
        self.loc = loc


class _Loader(yaml.SafeLoader):
    """PyYAML's safe loader, with floats as YAML 1.2 reads them: ``1e-3``, ``1E5``, ``-2.5e-4``."""


_Loader.add_implicit_resolver(  # after the int and YAML 1.1 float resolvers: only what they leave a string
    "tag:yaml.org,2002:float",
    re.compile(r"^[-+]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)[eE][-+]?[0-9]+$"),
    list("-+0123456789."),
)


def read_yaml(text: str, source: str) -> tuple[Any, dict[KeyPath, int]]:
    """The data of the YAML ``text`` and key path -> line (1-based) of every key and list item.

    Raises:
        ParamsError: not valid YAML (``<source>: not valid YAML: ...``), or a key written
            twice in one mapping (``<source>:<line>: <section>: key '<key>' written twice (first on line <n>)``).
    """
    loader = _Loader(text)
    try:
        node = loader.get_single_node()
        lines: dict[KeyPath, int] = {}
        _key_lines(node, (), lines, source)
        return (loader.construct_document(node) if node is not None else None), lines
    except yaml.YAMLError as e:
        raise ParamsError(f"{source}: not valid YAML: {e}") from e
    finally:
        loader.dispose()


def _key_lines(node: yaml.Node | None, loc: KeyPath, lines: dict[KeyPath, int], source: str) -> None:
    if isinstance(node, yaml.MappingNode):
        for key_node, value in node.value:
            key, line = str(key_node.value), key_node.start_mark.line + 1
            at = (*loc, key)
            if (first := lines.get(at)) is not None:
                where = ".".join(map(str, loc)) or "top level"
                raise ParamsError(f"{source}:{line}: {where}: key {key!r} written twice (first on line {first})")
            lines[at] = line
            _key_lines(value, at, lines, source)
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            at = (*loc, i)
            lines[at] = item.start_mark.line + 1
            _key_lines(item, at, lines, source)


def line_of(lines: dict[KeyPath, int], loc: KeyPath) -> int | None:
    """The line of ``loc``, or of its nearest parent with one (pydantic adds type tags to some locs); None: unknown."""
    return next((lines[loc[:n]] for n in range(len(loc), 0, -1) if loc[:n] in lines), None)


def dotted(loc: KeyPath, raw: Any) -> str:
    """``loc`` as a dotted key; within a curriculum phase with a name, ``curriculum.<i> (phase '<name>'): <key>``."""
    phases = raw.get("curriculum") if isinstance(raw, dict) else None
    if len(loc) > 1 and loc[0] == "curriculum" and isinstance(loc[1], int) and isinstance(phases, list):
        name = phases[loc[1]].get("name") if isinstance(phases[loc[1]], dict) else None
        if isinstance(name, str):
            rest = ".".join(map(str, loc[2:]))
            return f"curriculum.{loc[1]} (phase {name!r})" + (f": {rest}" if rest else "")
    return ".".join(map(str, loc))


def error_lines(
    errors: list[Any], source: str, raw: Any, lines: dict[KeyPath, int], model: type[BaseModel] | None = None
) -> list[str]:
    """pydantic's ``errors()`` as ``<source>[:<line>]: <section>.<key>: <message>``, one per error.

    A phase's problem reads ``<source>[:<line>]: curriculum.<i> (phase '<name>'): <key>: <message>``;
    a validator's ``At`` error gets the line of its ``loc``; an unknown key of ``model`` (the
    validated model) is answered with its nearest field (``message``).
    """
    out = []
    for err in errors:
        line = line_of(lines, (*err["loc"], *getattr(err.get("ctx", {}).get("error"), "loc", ())))
        where = f"{source}:{line}" if line else source
        said = message(err, model)
        out.append(f"{where}: {dotted(err['loc'], raw)}: {said}" if err["loc"] else f"{where}: {said}")
    return out


def message(err: Any, model: type[BaseModel] | None = None) -> str:
    """A pydantic error's message, without the ``Value error, `` prefix of a validator's own ValueError.

    An unknown key (``extra_forbidden``) of ``model``'s data reads ``unknown key; did you mean 'epochs'?``
    with the field of the model holding it (``fields_at``) nearest to it (``difflib.get_close_matches``,
    its default cutoff 0.6), or ``unknown key (known: ...)`` with that model's fields when none is near.
    """
    if err["type"] != "extra_forbidden" or model is None or (known := fields_at(model, err["loc"])) is None:
        return str(err["msg"]).removeprefix("Value error, ")
    near = difflib.get_close_matches(str(err["loc"][-1]), known, n=1)
    return f"unknown key; did you mean {near[0]!r}?" if near else f"unknown key (known: {', '.join(known)})"


def fields_at(model: type[BaseModel], loc: KeyPath) -> list[str] | None:
    """The field names of the model that holds the key at the end of ``loc`` in ``model``'s data
    (``loc[:-1]`` walked down the fields' types: a list index stays at the list's item model);
    None where the path leaves the models (a free mapping such as ``profiles``)."""
    node = model
    for part in loc[:-1]:
        if isinstance(part, int):
            continue
        field = node.model_fields.get(part)
        inner = _model_in(field.annotation) if field is not None else None
        if inner is None:
            return None
        node = inner
    return list(node.model_fields)


def _model_in(annotation: Any) -> type[BaseModel] | None:
    """The pydantic model a field's type holds (itself, or inside ``X | None``, ``list[X]``, ``Annotated``)."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    if typing.get_origin(annotation) is dict:
        return None
    return next((m for a in typing.get_args(annotation) if (m := _model_in(a)) is not None), None)
