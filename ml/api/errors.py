"""The one shape of a request error the API reports (FastAPI's 422 ``detail`` items)."""

from __future__ import annotations

from typing_extensions import NotRequired, TypedDict

from ml.base.io import JSONValue


class FieldError(TypedDict):
    """One problem of a request, as FastAPI reports a validation error.

    Keys:
        type: the error kind (``value_error``, ``dict_type``, or pydantic's type of the error).
        loc: where it is: ``("body", ...)`` then the field names and list indices.
        msg: what is wrong, in words.
        input: the offending value (policy endpoints only).
    """

    type: str
    loc: tuple[str | int, ...]
    msg: str
    input: NotRequired[JSONValue]
