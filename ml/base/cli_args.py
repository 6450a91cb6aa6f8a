"""argparse ``type`` converters of the command lines (``loop.py``, ``python -m ml.api``): a value
parsed, then checked; each refusal is argparse's one line (exit status 2) before any work.

Imports only the standard library: ``--help`` answers with argparse alone (``bench/bench_startup.py``).
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable
from typing import TypeVar

N = TypeVar("N", int, float)


def checked(parse: Callable[[str], N], ok: Callable[[N], bool], what: str, refusal: str) -> Callable[[str], N]:
    """An argparse ``type``: ``parse(text)`` when ``ok`` holds of it.

    Args:
        parse: ``int`` or ``float``.
        ok: the check of the parsed value.
        what: what a value is, for ``not <what>: '<text>'`` when ``parse`` fails (``a port number``).
        refusal: the message when ``ok`` fails, formatted with ``value`` and ``text``.

    Returns:
        The converter; it raises ``argparse.ArgumentTypeError`` with one of the two messages.
    """

    def convert(text: str) -> N:
        try:
            value = parse(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not {what}: {text!r}") from None
        if not ok(value):
            raise argparse.ArgumentTypeError(refusal.format(value=value, text=text))
        return value

    return convert


positive_int = checked(int, lambda v: v >= 1, "a whole number", "must be >= 1, got {value}")
"""An int >= 1."""

mixture_weight = checked(
    float, lambda v: math.isfinite(v) and v >= 0, "a number", "must be a finite number >= 0 (a mixture weight), got {text!r}"
)
"""A finite float >= 0."""

port = checked(int, lambda v: 1 <= v <= 65535, "a port number", "a port is 1 to 65535, got {value}")
"""A TCP port, 1 to 65535."""

body_bytes = checked(int, lambda v: v >= 1, "a number of bytes", "a body limit is at least 1 byte, got {value}")
"""A request-body limit in bytes, >= 1."""
