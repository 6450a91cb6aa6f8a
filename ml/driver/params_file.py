"""The one writer of ``params.yaml``, and the one dotted-path helper for params keys.

``params.yaml`` is rewritten with ruamel.yaml's round trip: comments, quotes, the flow
style of lists and the file's indentation of block lists are kept, long lines are never
re-wrapped, so the lines nobody changed stay byte for byte (a leading byte-order mark too), and the result is validated
(``ml.config.params.params_from_text``) before anyone writes it. The loop (``run`` section, queued
nudges, profiles, the end of a curriculum, ``import-forge``) and the dashboard's overrides
(``ml.api.overrides``) all go through here. Keys of params are dotted paths
(``selfplay.learner_decisions``, ``train.source_weights.ppo``); ``ABSENT`` as a value stands for a
key params.yaml does not have (setting it removes the key).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from io import StringIO
from pathlib import Path
from typing import Any

from pydantic import BaseModel
from ruamel.yaml import YAML
from ruamel.yaml.comments import CommentedSeq
from ruamel.yaml.representer import RoundTripRepresenter

from ml.base.io import JSONObject, JSONValue
from ml.config.curriculum import Overrides
from ml.config.params import Params, attempt_seed, params_from_text
from ml.config.sections import BaseParams
from ml.config.yaml_file import ParamsError, read_params_text, read_yaml, yaml_error
from ml.game.checks import check_params

DEFAULT_BASE_SEED: int = BaseParams.model_fields["seed"].default
"""``base.seed`` when params.yaml has none (sync partner: ``ml.config.params.BaseParams.seed``)."""


BOM = "\ufeff"
"""A UTF-8 byte-order mark (U+FEFF), which some editors write first in a file: YAML reads past it,
and the writer keeps it where params.yaml has one (``bom_change`` names it in a hand edit)."""

ABSENT = "<absent from params.yaml>"
"""The value of a key params.yaml does not have: the base of a key a phase adds (``LoopState.phase_restore``)."""


class MergeError(ParamsError):
    """params.yaml with the overrides set does not validate; the message names the file, section and key."""


def get_dotted(params: JSONObject, key: str) -> JSONValue:
    """The value at dotted ``key`` (``section.key[.subkey]``) of nested dicts.

    Raises:
        KeyError: a part of ``key`` is missing.
        TypeError: a part of ``key`` goes below a value that is not a mapping.
    """
    node: Any = params
    for part in key.split("."):
        node = node[part]
    return node


def get_or_absent(params: JSONObject, key: str) -> JSONValue:
    """The value at dotted ``key`` of nested dicts, ``ABSENT`` where a part of it is missing."""
    try:
        return get_dotted(params, key)
    except (KeyError, TypeError):
        return ABSENT


def set_dotted(params: JSONObject, key: str, value: JSONValue) -> None:
    """Set the value at dotted ``key`` of nested dicts in place (every parent must exist);
    ``ABSENT`` removes the key (nothing to remove is fine).

    Raises:
        KeyError: a parent of the leaf is missing.
    """
    *parents, leaf = key.split(".")
    node = params
    for part in parents:
        node = node[part]
    if value == ABSENT:
        node.pop(leaf, None)
    else:
        node[leaf] = value


def file_values(params: Params) -> JSONObject:
    """``params`` as nested dicts (``model_dump(mode="json")``) without the keys params.yaml does not have.

    A key is left out when its section is in the file and the key is not (the default applies);
    a section the file lacks is given whole, with its defaults. So ``get_or_absent`` of it says
    ``ABSENT`` for a key a phase may add, and restoring ``ABSENT`` takes the key out again.
    """
    out = params.model_dump(mode="json")
    for section in params.model_fields_set:
        if isinstance(model := getattr(params, section), BaseModel):
            for key in set(type(model).model_fields) - model.model_fields_set:
                out[section].pop(key, None)
    return out


def _yaml(text: str = "") -> YAML:
    """ruamel's round trip, indenting block lists as ``text`` does (``- `` under its key, or 2 to the right)."""
    yaml = YAML()
    yaml.preserve_quotes = True
    yaml.width = 4096  # never re-wrap the user's long lines
    offset = 2
    if m := re.search(r"^( *)[^\s#-][^\n]*:[ \t]*(?:#[^\n]*)?\n(?:[ \t]*(?:#[^\n]*)?\n)*( *)- ", text, re.M):
        offset = max(0, len(m.group(2)) - len(m.group(1)))
    yaml.indent(mapping=2, sequence=offset + 2, offset=offset)
    if _SPELLED_NULL.search(text):  # ruamel writes a null value as nothing; keep the file's ``null``
        yaml.Representer = _NullRepresenter
    return yaml


_SPELLED_NULL = re.compile(r"^[^#\n]*:[ \t]+(?:null|Null|NULL|~)[ \t]*(?:#[^\n]*)?$", re.M)


class _NullRepresenter(RoundTripRepresenter):
    """ruamel's round-trip representer writing None as ``null``."""

    def represent_none(self, data: None) -> Any:
        return self.represent_scalar("tag:yaml.org,2002:null", "null")


_NullRepresenter.add_representer(type(None), _NullRepresenter.represent_none)


def _load(path: Path) -> tuple[Any, str]:
    """The round-trip data of params.yaml at ``path``, and its text.

    Raises:
        ParamsError: bytes that are not UTF-8 or not YAML characters, not valid YAML, or what else
            ``ml.config.yaml_file.read_yaml`` refuses; one line naming the file and line
            (``ml.config.yaml_file.read_params_text``, ``read_yaml``).
        FileNotFoundError: there is no params.yaml.
    """
    return _parse(read_params_text(path), str(path))


def _parse(text: str, source: str) -> tuple[Any, str]:
    # what the reader refuses (bad characters, a key written twice, an unreadable integer) is refused here alike
    read_yaml(text, source)
    try:
        data = _yaml(text).load(text)
    except Exception as e:  # ruamel raises several YAMLError subclasses
        raise ParamsError(yaml_error(e, source)) from e
    if not isinstance(data, dict):
        raise ParamsError(f"{source}: top level must be a mapping of sections (the file is empty or holds no sections)")
    return data, text


def _dump(data: Any, like: str) -> str:
    """``data`` as YAML laid out as ``like``, starting with a byte-order mark where ``like`` does."""
    buf = StringIO()
    _yaml(like).dump(data, buf)
    return (BOM if like.startswith(BOM) else "") + buf.getvalue()


def attempt_params_text(path: Path, generation: int, attempt: int, nudges: Mapping[str, JSONValue] | None = None) -> str:
    """The text of params.yaml at ``path`` with the ``run`` section set for (generation, attempt)
    and ``nudges`` (dotted key -> value) applied, comments kept. Not validated, not written.

    ``run.seed`` is ``ml.config.params.attempt_seed`` of ``base.seed`` (``DEFAULT_BASE_SEED`` without one).

    Raises:
        ParamsError: the file is not valid YAML (one line naming its line and column).
        KeyError: a nudge's parent section or key is missing from the file.
    """
    return attempt_text(read_params_text(path), str(path), generation, attempt, nudges)


def attempt_text(text: str, source: str, generation: int, attempt: int, nudges: Mapping[str, JSONValue] | None = None) -> str:
    """``attempt_params_text`` of the params.yaml ``text`` (``source`` names it in errors)."""
    data, original = _parse(text, source)
    base_seed = int(data.get("base", {}).get("seed", DEFAULT_BASE_SEED))
    data["run"] = {"generation": generation, "attempt": attempt, "seed": attempt_seed(base_seed, generation, attempt)}
    for key, value in (nudges or {}).items():
        set_dotted(data, key, value)
    return _dump(data, original)


def overrides_text(path: Path, overrides: Overrides) -> tuple[str, list[str]]:
    """The text of params.yaml at ``path`` with ``overrides`` (section -> key -> value) set, validated.

    A list replacing a flow-style list (``[a, b]``) stays flow style.

    Returns:
        The new text, and ``section.key=value`` for each value that changed (empty: the
        text equals the file's).

    Raises:
        ParamsError: the file is not valid YAML (one line naming its line and column).
        MergeError: the result does not validate (the message names the file, section and key).
    """
    data, original = _load(path)
    changed = []
    for section, values in overrides.items():
        target = data.setdefault(section, {})
        for key, value in values.items():
            old = target.get(key)
            if old == value:
                continue
            if isinstance(value, list) and isinstance(old, CommentedSeq):
                seq = CommentedSeq(value)
                if old.fa.flow_style():
                    seq.fa.set_flow_style()
                value = seq
            target[key] = value
            changed.append(f"{section}.{key}={_short(value)}")
    text = _dump(data, original)
    try:
        check_text(path, text)
    except ParamsError as e:
        raise MergeError(str(e)) from e
    return text, changed


def check_text(path: Path, text: str) -> None:
    """Validate ``text`` as the new content of params.yaml at ``path`` (nothing is written).

    Raises:
        ParamsError: it does not validate; the message names ``path``, the section and the key.
    """
    params_from_text(text, str(path), check_params)


def value_changes(old: str, new: str, source: str = "params.yaml") -> list[str]:
    """``<dotted key> <old> -> <new>`` for each value that differs between two params.yaml texts.

    Mappings are walked down to their keys (``train.epochs``, ``train.source_weights.ppo``); a list
    is one value. A key one text lacks reads ``(unset)`` on that side. Keys come in the new text's
    order, then the removed ones. Read as ``ml.config.params`` reads the file (``ml.config.yaml_file.read_yaml``):
    a comment, quote or layout change is no change.

    Raises:
        ParamsError: a text is not valid YAML (``source`` names it).
    """
    before, after = _flat(read_yaml(old, f"{source} at HEAD")[0]), _flat(read_yaml(new, source)[0])
    keys = [*after, *(k for k in before if k not in after)]
    unset = "(unset)"
    return [
        f"{k} {_short(before.get(k, unset))} -> {_short(after.get(k, unset))}"
        for k in keys
        if before.get(k, unset) != after.get(k, unset)
    ]


def bom_change(old: str, new: str) -> str | None:
    """``byte-order mark added`` or ``byte-order mark removed`` where one params.yaml text starts with
    a UTF-8 byte-order mark (``BOM``) and the other does not; None where both do or neither does."""
    if old.startswith(BOM) == new.startswith(BOM):
        return None
    return "byte-order mark added" if new.startswith(BOM) else "byte-order mark removed"


def _flat(data: Any, prefix: str = "") -> dict[str, Any]:
    """Dotted key -> value of nested mappings (an empty mapping, a list or a scalar is a value)."""
    if isinstance(data, dict) and data:
        return {
            k: v for key, value in data.items() for k, v in _flat(value, f"{prefix}.{key}" if prefix else str(key)).items()
        }
    return {prefix: data} if prefix else {}


def _short(value: Any) -> str:
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}: {v}" for k, v in value.items()) + "}"
    if isinstance(value, list):
        return "[" + ", ".join(map(str, value)) + "]"
    return str(value)
