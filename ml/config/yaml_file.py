"""The project's YAML (ruamel.yaml, YAML 1.2 as DVC reads it), and reading ``params.yaml`` for ``ml.config.params``.

Every YAML file the project reads or writes goes through ruamel.yaml: :func:`safe_yaml` for
plain data (``dvc.lock``, the card pool and decks, the Forge card table), the round trip of
``ml.driver.params_file`` for rewriting ``params.yaml``. YAML 1.2 is what DVC reads (``1e-3``
is a float, ``yes`` a string). ``read_yaml`` refuses a key written twice in one mapping and
returns each key's line, so an error can name it (``params.yaml:12: train.epochs: ...``); a decimal
integer longer than Python reads (``sys.get_int_max_str_digits``) is named there too.

Bytes that are not YAML are named at their line and column (1-based), one line each, before
either YAML library sees them (``read_params_text``, ``check_characters``): bytes that are not
UTF-8, a NUL or another character outside YAML's printable set (YAML 1.2 spec, 5.1 "Character
Set"), and, from the scanner's mark (``yaml_error``), a tab where YAML wants spaces.
"""

from __future__ import annotations

import difflib
import re
import sys
import typing
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pydantic import BaseModel
from pydantic_core import ErrorDetails
from ruamel.yaml import YAML
from ruamel.yaml.error import YAMLError
from ruamel.yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from ml.base.io import JSONValue

KeyPath = tuple[str | int, ...]
"""A place in the params: section, key, sub-key or list index (pydantic's error ``loc``)."""


class ParamsError(ValueError):
    """A bad ``params.yaml``: the message names the file, the line where known, the section and the key
    (``ml.config.params.ParamsError``: ``ml.config.params`` raises it, this module only for bad YAML and a key written twice)."""


_NOT_PRINTABLE = re.compile("[^\x09\x0a\x0d\x20-\x7e\x85\xa0-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")
"""A character YAML does not allow in a stream (YAML 1.2 spec, 5.1 ``c-printable``; PyYAML's ``Reader.NON_PRINTABLE``)."""


class At(ValueError):
    """A validator's error about the params at ``loc`` (relative to what the validator checks: from the
    top level for a model validator of ``Params``, from the field for a field validator), so that
    ``error_lines`` can name its line."""

    def __init__(self, loc: KeyPath, text: str) -> None:
        super().__init__(text)
        self.loc = loc


def safe_yaml() -> YAML:
    """A ruamel.yaml reader/writer of plain data: YAML 1.2, safe types only (dicts, lists, scalars),
    a key written twice refused (``DuplicateKeyError``), keys written in their order, long lines never re-wrapped.

    Not thread-safe: make one per use."""
    yaml = YAML(typ="safe", pure=True)
    yaml.width = 4096
    yaml.default_flow_style = False
    yaml.sort_base_mapping_type_on_output = False  # type: ignore[assignment]  # keys in their order, as the round trip keeps them
    yaml.allow_unicode = True
    return yaml


def read_params_text(path: Path) -> str:
    """The text of the params file at ``path``, decoded as UTF-8 (a leading BOM is kept; YAML skips it).

    Raises:
        FileNotFoundError: there is no file at ``path``.
        ParamsError: its bytes are not UTF-8 (``<path>:<line>:<col>: not valid UTF-8 (byte 0xff)``;
            the column counts characters before the bad byte), or it cannot be read
            (``<path>: cannot read: <reason>``).
    """
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise
    except OSError as e:
        raise ParamsError(f"{path}: cannot read: {e.strerror or e}") from e
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        before = data[: e.start].decode("utf-8")
        place = _place(before, len(before), str(path))
        raise ParamsError(f"{place}: not valid UTF-8 (byte 0x{data[e.start]:02x}); save the file as UTF-8") from e


def check_characters(text: str, source: str) -> None:
    """Refuse a character YAML does not allow (a NUL, another control character, a lone surrogate).

    Raises:
        ParamsError: ``<source>:<line>:<col>: <what> is not allowed in YAML`` for the first one.
    """
    if (m := _NOT_PRINTABLE.search(text)) is None:
        return
    ch = m.group()
    what = "a NUL byte (U+0000)" if ch == "\0" else f"the control character U+{ord(ch):04X}"
    raise ParamsError(f"{_place(text, m.start(), source)}: {what} is not allowed in YAML")


def yaml_error(e: Exception, source: str) -> str:
    """ruamel.yaml's error about ``source`` as one line, ``<source>:<line>:<col>: <problem>``.

    A marked error (scanner, parser) gives its problem's line and column (1-based) and what it
    was parsing (``(while parsing a flow sequence from line 3)``); a tab that cannot start a token
    is named as such; an error without a mark gives its first line.
    """
    mark, problem = getattr(e, "problem_mark", None), getattr(e, "problem", None)
    if mark is None or problem is None:
        return f"{source}: not valid YAML: {str(e).splitlines()[0] if str(e) else type(e).__name__}"
    where = f"{source}:{mark.line + 1}:{mark.column + 1}"
    if "'\\t'" in problem:
        return f"{where}: a tab character where YAML needs spaces (replace it with spaces)"
    context, context_mark = getattr(e, "context", None), getattr(e, "context_mark", None)
    if context and context_mark is not None and context_mark.line != mark.line:
        return f"{where}: not valid YAML: {problem} ({context} from line {context_mark.line + 1})"
    return f"{where}: not valid YAML: {problem}" + (f" ({context})" if context else "")


def _place(text: str, pos: int, source: str) -> str:
    """``<source>:<line>:<col>`` of character ``pos`` of ``text`` (both 1-based)."""
    line, line_start = text.count("\n", 0, pos) + 1, text.rfind("\n", 0, pos) + 1
    return f"{source}:{line}:{pos - line_start + 1}"


def read_yaml(text: str, source: str) -> tuple[JSONValue, dict[KeyPath, int]]:
    """The data of the YAML ``text`` and key path -> line (1-based) of every key and list item.

    Raises:
        ParamsError: a character YAML does not allow (``check_characters``), not valid YAML
            (``<source>:<line>:<col>: not valid YAML: ...``, ``yaml_error``), a key written
            twice in one mapping (``<source>:<line>: <section>: key '<key>' written twice (first on line <n>)``),
            or a decimal integer longer than Python reads
            (``<source>:<line>: <section>.<key>: an integer of <n> digits is too long to read (at most <limit>)``).
    """
    check_characters(text, source)
    try:
        yaml = safe_yaml()
        node = yaml.compose(text)
        lines: dict[KeyPath, int] = {}
        _key_lines(node, (), lines, source)  # before loading: names the first of a key written twice
        # the data from the composed node: the text is parsed once (the parse is most of a load)
        return (yaml.constructor.construct_document(node) if node is not None else None), lines
    except YAMLError as e:
        raise ParamsError(yaml_error(e, source)) from e


def _key_lines(node: Node | None, loc: KeyPath, lines: dict[KeyPath, int], source: str) -> None:
    if isinstance(node, MappingNode):
        for key_node, value in node.value:
            key, line = str(key_node.value), key_node.start_mark.line + 1
            where = ".".join(map(str, loc)) or "top level"
            _check_int(key_node, where, source)
            at = (*loc, key)
            if (first := lines.get(at)) is not None:
                raise ParamsError(f"{source}:{line}: {where}: key {key!r} written twice (first on line {first})")
            lines[at] = line
            _key_lines(value, at, lines, source)
    elif isinstance(node, ScalarNode):
        _check_int(node, ".".join(map(str, loc)) or "top level", source)
    elif isinstance(node, SequenceNode):
        for i, item in enumerate(node.value):
            at = (*loc, i)
            lines[at] = item.start_mark.line + 1
            _key_lines(item, at, lines, source)


def _check_int(node: Node, where: str, source: str) -> None:
    """Refuse a decimal integer scalar with more digits than ``int()`` reads (``sys.get_int_max_str_digits``;
    0: no limit), which the YAML loaders would raise as a bare ValueError. Binary, octal and hex have no limit."""
    limit = sys.get_int_max_str_digits()
    if not isinstance(node, ScalarNode) or node.tag != "tag:yaml.org,2002:int" or limit == 0:
        return
    digits = str(node.value).replace("_", "").lstrip("+-")
    if len(digits) > limit and not digits.startswith(("0b", "0o", "0x")):
        raise ParamsError(
            f"{source}:{node.start_mark.line + 1}: {where}: an integer of {len(digits)} digits is too long to read "
            f"(at most {limit})"
        )


def line_of(lines: dict[KeyPath, int], loc: KeyPath) -> int | None:
    """The line of ``loc``, or of its nearest parent with one (pydantic adds type tags to some locs); None: unknown."""
    return next((lines[loc[:n]] for n in range(len(loc), 0, -1) if loc[:n] in lines), None)


def dotted(loc: KeyPath, raw: JSONValue) -> str:
    """``loc`` as a dotted key; within a curriculum phase with a name, ``curriculum.<i> (phase '<name>'): <key>``."""
    phases = raw.get("curriculum") if isinstance(raw, dict) else None
    if len(loc) > 1 and loc[0] == "curriculum" and isinstance(loc[1], int) and isinstance(phases, list):
        name = phases[loc[1]].get("name") if isinstance(phases[loc[1]], dict) else None
        if isinstance(name, str):
            rest = ".".join(map(str, loc[2:]))
            return f"curriculum.{loc[1]} (phase {name!r})" + (f": {rest}" if rest else "")
    return ".".join(map(str, loc))


def error_lines(
    errors: Sequence[ErrorDetails],
    source: str,
    raw: JSONValue,
    lines: dict[KeyPath, int],
    model: type[BaseModel] | None = None,
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


def message(err: ErrorDetails, model: type[BaseModel] | None = None) -> str:
    """A pydantic error's message, without the ``Value error, `` prefix of a validator's own ValueError.

    An unknown key (``extra_forbidden``) of ``model``'s data reads ``unknown key; did you mean 'epochs'?``
    with the field of the model holding it (``model_at``) nearest to it (``difflib.get_close_matches``,
    its default cutoff 0.6), or ``unknown key (known: ...)`` with that model's fields when none is near;
    a key in that model's ``renamed`` table (old name -> new name) reads ``renamed; now '<new>' (same meaning)``.
    """
    if err["type"] != "extra_forbidden" or model is None or (holder := model_at(model, err["loc"])) is None:
        return str(err["msg"]).removeprefix("Value error, ")
    known = list(holder.model_fields)
    if (now := getattr(holder, "renamed", {}).get(str(err["loc"][-1]))) is not None:
        return f"renamed; now {now!r} (same meaning)"
    near = difflib.get_close_matches(str(err["loc"][-1]), known, n=1)
    return f"unknown key; did you mean {near[0]!r}?" if near else f"unknown key (known: {', '.join(known)})"


def model_at(model: type[BaseModel], loc: KeyPath) -> type[BaseModel] | None:
    """The model that holds the key at the end of ``loc`` in ``model``'s data (``loc[:-1]`` walked
    down the fields' types: a list index stays at the list's item model); None where the path
    leaves the models (a free mapping such as ``profiles``)."""
    node = model
    for part in loc[:-1]:
        if isinstance(part, int):
            continue
        field = node.model_fields.get(part)
        inner = _model_in(field.annotation) if field is not None else None
        if inner is None:
            return None
        node = inner
    return node


def _model_in(annotation: Any) -> type[BaseModel] | None:
    """The pydantic model a field's type holds (itself, or inside ``X | None``, ``list[X]``, ``Annotated``)."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    if typing.get_origin(annotation) is dict:
        return None
    return next((m for a in typing.get_args(annotation) if (m := _model_in(a)) is not None), None)
