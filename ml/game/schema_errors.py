"""Messages of a broken record bound that name the whole range, read from the record model's JSON schema.

``name_ranges`` is the wrap validator of the record models (``ml.game.commander.forge_record``):
a value out of its ``Field`` bounds gets ``"<pydantic's message>; allowed <low>..<high>: <reason>"``
(the reason: the field's ``description``), so a bad line of a Forge file says what would be right.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Sequence
from typing import Any

from pydantic import BaseModel, ValidationError, ValidatorFunctionWrapHandler
from pydantic_core import InitErrorDetails, PydanticCustomError

UNION_TAG_RE = re.compile(r"^(?:(?:constrained-)?(?:int|str|float|bool)|dict\[.*\]|list\[.*\]|\[key\])$")
"""The loc parts pydantic adds for a union's member (``cmdr_dmg``'s ``constrained-int``), not field names."""

RANGE_ERRORS: dict[str, tuple[str, str, str]] = {
    **dict.fromkeys(("greater_than_equal", "less_than_equal", "greater_than", "less_than"), ("minimum", "maximum", "")),
    **dict.fromkeys(("too_short", "too_long"), ("minItems", "maxItems", " length")),
    **dict.fromkeys(("string_too_short", "string_too_long"), ("minLength", "maxLength", " length")),
}
"""Pydantic's error types of a Field bound -> the JSON-schema keys of that bound's two ends."""



@functools.cache
def _json_schema(model: type[BaseModel]) -> dict[str, Any]:
    return model.model_json_schema()


def _schema_node(model: type[BaseModel], loc: Sequence[str | int]) -> tuple[dict[str, Any], str | None] | None:
    """The JSON-schema node of ``model`` at an error's ``loc`` and its reason (``description``), or None.

    A list index goes to ``items``, a name to ``properties`` (else a dict's ``additionalProperties``,
    which keeps the dict's reason), a union tag (``UNION_TAG_RE``) to the member of that type, and an
    Optional to its one non-null member.
    """
    root = _json_schema(model)
    defs = root.get("$defs", {})
    kinds = {"i": "integer", "s": "string", "f": "number", "b": "boolean", "d": "object", "l": "array"}

    def resolve(node: dict[str, Any]) -> dict[str, Any]:
        return defs[node["$ref"].rsplit("/", 1)[1]] if "$ref" in node else node

    node, why = resolve(root), None
    for part in (*loc, None):  # None: the end, where an Optional's member is the field
        if "anyOf" in node:
            members = [resolve(m) for m in node["anyOf"] if m.get("type") != "null"]
            tag = part if isinstance(part, str) and UNION_TAG_RE.match(part) else None
            kind = kinds.get(tag.removeprefix("constrained-")[0]) if tag else None
            found = [m for m in members if m.get("type") == kind] if tag else members
            if len(found) != 1:
                return None
            node, why = found[0], found[0].get("description", why)
            if tag:
                continue
        if part is None:
            break
        props = node.get("properties", {})
        child = node.get("items") if isinstance(part, int) else props.get(part, node.get("additionalProperties"))
        if not isinstance(child, dict):
            return None
        own = child.get("description", resolve(child).get("description"))
        why = why if own is None and part not in props and not isinstance(part, int) else own
        node = resolve(child)
    return node, why


def allowed_range(
    model: type[BaseModel], loc: Sequence[str | int], error_type: str
) -> tuple[float | None, float | None, str | None] | None:
    """The bound that a pydantic error of ``error_type`` at ``loc`` broke, from ``model``'s JSON schema.

    Returns:
        ``(low, high, reason)``: the field's value (or length) range, either end None when open
        (integer ``lt``/``gt`` bounds given inclusive, lengths from 0), and the field's ``description``
        (the bound's reason); None when ``loc`` or the bound is not found.
    """
    found = _schema_node(model, loc) if error_type in RANGE_ERRORS else None
    if found is None:
        return None
    node, why = found
    lo_key, hi_key, length = RANGE_ERRORS[error_type]
    lo, hi = node.get(lo_key, 0 if length else None), node.get(hi_key)
    if node.get("type") == "integer":
        lo = node["exclusiveMinimum"] + 1 if "exclusiveMinimum" in node else lo
        hi = node["exclusiveMaximum"] - 1 if "exclusiveMaximum" in node else hi
    if lo is None and hi is None:
        return None
    return lo, hi, why


def name_ranges(model: type[BaseModel], data: Any, handler: ValidatorFunctionWrapHandler) -> Any:
    """Validate ``data`` with ``handler``; each broken Field bound's message then names its whole range.

    For a model's ``mode="wrap"`` model validator. A bound error (``RANGE_ERRORS``) gets the message
    ``"<pydantic's message>; allowed <low>..<high>: <reason>"`` and ``ctx["allowed"] = [low, high]``
    (:func:`allowed_range`); every other error is kept as it is.

    Raises:
        ValidationError: ``data`` does not fit ``model``.
    """
    try:
        return handler(data)
    except ValidationError as e:
        errors = e.errors(include_url=False)
        ranges = [allowed_range(model, err["loc"], err["type"]) for err in errors]
        if not any(ranges):
            raise
        details: list[InitErrorDetails] = []
        for err, found in zip(errors, ranges, strict=True):
            ctx, msg = dict(err.get("ctx") or {}), err["msg"]
            if found is not None:
                lo, hi, why = found
                span = f"{'' if lo is None else lo}..{'' if hi is None else hi}"
                msg = f"{msg}; allowed{RANGE_ERRORS[err['type']][2]} {span}" + (f": {why}" if why else "")
                ctx["allowed"] = [lo, hi]
            details.append({"type": PydanticCustomError(err["type"], msg, ctx), "loc": err["loc"], "input": err["input"]})
        raise ValidationError.from_exception_data(e.title, details) from None
