"""Named seams of the driver and the stages, where a test can kill the run (fault injection).

Every step of an attempt that leaves something on disk calls ``seam(name)`` before and after
it. In normal runs this reads two environment variables and returns. Two variables turn it on:

``DISTILL_SEAMS_LOG=<file>``
    append each seam reached to ``<file>``, one name a line (``O_APPEND`` writes, so the
    loop and its stage processes can share the file). A run with it set lists the seams of
    the code as it is, in the order they are reached: the fault-injection test kills at each
    name of that list instead of a hand-kept one.
``DISTILL_FAULT=<name>``
    ``SIGKILL`` the whole process group at the first seam called ``<name>``: the loop, its
    ``dvc`` and the stage processes die together, as with ``kill -9 -PGID``. A name ending in
    ``@during`` is matched by ``during(name)``, which returns a delay in seconds after which
    the caller kills the command it is running (a kill inside ``dvc add``, say).

Seam names carry the generation (``g001.promote.dvc_add``), so one attempt's seam is
distinct from the next one's.
"""

from __future__ import annotations

import os
import signal

SEAMS_LOG_ENV = "DISTILL_SEAMS_LOG"
FAULT_ENV = "DISTILL_FAULT"
DURING_DELAY_ENV = "DISTILL_FAULT_DELAY_S"
DURING_SUFFIX = "@during"


def _record(name: str) -> None:
    log = os.environ.get(SEAMS_LOG_ENV)
    if log:
        fd = os.open(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, (name + "\n").encode())
        finally:
            os.close(fd)


def kill_group() -> None:
    """``SIGKILL`` this process's whole process group (never returns)."""
    os.killpg(os.getpgrp(), signal.SIGKILL)


def seam(name: str) -> None:
    """Mark the seam ``name``: record it, and die here if ``$DISTILL_FAULT`` names it."""
    _record(name)
    if os.environ.get(FAULT_ENV) == name:
        kill_group()


def during(name: str) -> float | None:
    """Seam inside a command: record ``name@during``; the delay (s) before the kill, if asked.

    Returns:
        ``$DISTILL_FAULT_DELAY_S`` (default 0.3 s) when ``$DISTILL_FAULT`` is
        ``name@during``, else None (run the command normally).
    """
    full = name + DURING_SUFFIX
    _record(full)
    if os.environ.get(FAULT_ENV) != full:
        return None
    return float(os.environ.get(DURING_DELAY_ENV, "0.3"))
