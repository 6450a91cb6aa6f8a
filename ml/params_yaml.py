"""Reading ``params.yaml`` for ``ml.params``: YAML 1.2 floats, no key written twice, the line of every key.

PyYAML reads YAML 1.1, where ``1e-3`` (no dot) is a string; ruamel.yaml (``ml.driver.params_file``)
and DVC read YAML 1.2, where it is a float. ``read_yaml`` reads floats as YAML 1.2 does, refuses
a key written twice in one mapping (PyYAML keeps the later value silently) and returns each
key's line, so an error can name it (``params.yaml:12: train.epochs: ...``).
"""

from __future__ import annotations

import re
from typing import Any

import yaml

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


def error_lines(errors: list[Any], source: str, raw: Any, lines: dict[KeyPath, int]) -> list[str]:
    """pydantic's ``errors()`` as ``<source>[:<line>]: <section>.<key>: <message>``, one per error.

    A phase's problem reads ``<source>[:<line>]: curriculum.<i> (phase '<name>'): <key>: <message>``;
    a validator's ``At`` error gets the line of its ``loc``.
    """
    out = []
    for err in errors:
        line = line_of(lines, (*err["loc"], *getattr(err.get("ctx", {}).get("error"), "loc", ())))
        where = f"{source}:{line}" if line else source
        out.append(f"{where}: {dotted(err['loc'], raw)}: {message(err)}" if err["loc"] else f"{where}: {message(err)}")
    return out


def message(err: Any) -> str:
    """A pydantic error's message, without the ``Value error, `` prefix of a validator's own ValueError."""
    return str(err["msg"]).removeprefix("Value error, ")
