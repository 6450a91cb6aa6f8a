"""Params overrides sent with a start request: validation against ``ml.config.params.Params`` and the write.

A request names values as ``{section: {key: value}}``. Each section is validated with its
pydantic model from ``ml.config.params`` (so types, bounds and unknown keys are checked exactly as
``params.yaml`` is), then the whole file with the overrides merged in is validated again.
``params.yaml`` is rewritten by the loop's one writer (``ml.driver.params_file``), keeping its comments.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from pydantic import BaseModel, ValidationError

from ml.api.errors import FieldError
from ml.base.io import JSONValue, atomic_write_text
from ml.config.curriculum import Overrides
from ml.config.params import Params
from ml.driver.params_file import MergeError, overrides_text

LOOP_OWNED_SECTIONS = frozenset({"run"})
"""Sections ``loop.py`` rewrites for every attempt; an override of them is refused."""


class OverrideError(ValueError):
    """A bad override. ``errors`` are FastAPI-style dicts (``loc``, ``msg``, ``type``), one per problem."""

    def __init__(self, errors: list[FieldError]) -> None:
        self.errors = errors
        super().__init__("; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in errors))


def _section_model(section: str) -> type[BaseModel] | None:
    """The pydantic model of a ``{key: value}`` section of ``Params``; None for other fields (``profiles``)."""
    field = Params.model_fields.get(section)
    annotation = field.annotation if field is not None else None
    return annotation if isinstance(annotation, type) and issubclass(annotation, BaseModel) else None


def validate_overrides(overrides: Mapping[str, JSONValue], loc: tuple[str, ...] = ("body", "params")) -> Overrides:
    """Check ``{section: {key: value}}`` against the section models of ``ml.config.params.Params``.

    Args:
        overrides: the request's ``params`` object.
        loc: location prefix of the reported errors.

    Returns:
        The overrides as the section models parsed them, in JSON types. The models are
        strict, as for ``params.yaml``: ``"3"`` or ``true`` for an int field is an error.

    Raises:
        OverrideError: an unknown, loop-owned or non-``{key: value}`` section (``profiles``), an unknown key, or a bad value;
            each error's ``loc`` ends with the section and key.
    """
    errors: list[FieldError] = []
    clean: Overrides = {}
    for section, values in overrides.items():
        model = _section_model(section)
        if model is None:
            msg = f"unknown params section {section!r}"
            if section in Params.model_fields:
                msg = f"{section!r} is not a {{key: value}} section; edit params.yaml for it"
            errors.append({"loc": (*loc, section), "msg": msg, "type": "value_error"})
            continue
        if section in LOOP_OWNED_SECTIONS:
            errors.append({"loc": (*loc, section), "msg": "set by loop.py for every attempt", "type": "value_error"})
            continue
        if not isinstance(values, dict):
            errors.append({"loc": (*loc, section), "msg": "must be an object of {key: value}", "type": "dict_type"})
            continue
        try:
            validated = model.model_validate(values)
        except ValidationError as e:
            for err in e.errors():
                where = err["loc"] or ("",)
                msg = f"unknown key {where[0]!r}" if err["type"] == "extra_forbidden" else err["msg"]
                errors.append({"loc": (*loc, section, *where), "msg": msg, "type": err["type"]})
            continue
        dumped = validated.model_dump(mode="json")
        clean[section] = {key: dumped[key] for key in values}
    if errors:
        raise OverrideError(errors)
    return clean


def write_overrides(params_path: Path, overrides: Overrides) -> list[str]:
    """Merge validated overrides into ``params.yaml`` (comments kept) and write it atomically,
    through the loop's one writer of params.yaml (``ml.driver.params_file.overrides_text``).

    Args:
        params_path: the repository's ``params.yaml``.
        overrides: output of :func:`validate_overrides`.

    Returns:
        ``section.key=value`` for each value that changed (empty: nothing was written).

    Raises:
        OverrideError: the merged file does not validate (e.g. a combination of values).
        ParamsError: ``params.yaml`` itself is not valid YAML.
    """
    try:
        text, changed = overrides_text(params_path, overrides)
    except MergeError as e:
        raise OverrideError([{"loc": ("body", "params"), "msg": str(e), "type": "value_error"}]) from e
    if changed:
        atomic_write_text(params_path, text)
    return changed
