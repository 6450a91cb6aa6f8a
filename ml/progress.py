"""Progress bars that also report to the loop's status file.

``ProgressBar(...)`` is ``tqdm`` plus, when the environment names a status file
(``DISTILL_PROGRESS_FILE``, set by ``loop.py`` for the stage it runs), an atomic JSON write
of ``{"desc", "n", "total", "unit", "updated_at"}`` at most every ``REPORT_EVERY_S`` seconds,
so the dashboard can show the progress within a stage without touching the stage's output.
"""

from __future__ import annotations

import os
import sys
import time
from typing import Any

from tqdm import tqdm

from ml.io import atomic_write_json

PROGRESS_FILE_ENV = "DISTILL_PROGRESS_FILE"
REPORT_EVERY_S = 2.0


class ProgressBar(tqdm):
    """``tqdm`` that mirrors its count into ``$DISTILL_PROGRESS_FILE`` (if set), even when disabled."""

    def __init__(self, iterable: Any = None, *args: Any, **kwargs: Any) -> None:
        self._status_path = os.environ.get(PROGRESS_FILE_ENV)
        self._last_report = 0.0
        self._count = 0
        self._label = str(kwargs.get("desc", ""))
        self._unit = str(kwargs.get("unit", "it"))
        total = kwargs.get("total")
        if total is None and iterable is not None and hasattr(iterable, "__len__"):
            total = len(iterable)
        self._total = total
        super().__init__(iterable, *args, **kwargs)
        self._report(force=True)

    def update(self, n: float | None = 1) -> bool | None:
        self._count += n or 0
        out = super().update(n)
        self._report()
        return out

    def __iter__(self):
        for item in super().__iter__():
            yield item
            self._count += 1
            self._report()

    def close(self) -> None:
        self._report(force=True)
        super().close()

    def _report(self, force: bool = False) -> None:
        if not getattr(self, "_status_path", None) or sys.is_finalizing():
            return
        now = time.monotonic()
        if not force and now - self._last_report < REPORT_EVERY_S:
            return
        self._last_report = now
        doc = {"desc": self._label, "n": self._count, "total": self._total, "unit": self._unit, "updated_at": time.time()}
        atomic_write_json(self._status_path, doc)
