"""A stage's learning curves, logged with DVCLive while the stage runs.

One ``Curves`` per stage writes ``<dir>/plots/metrics/<name>.tsv`` (columns ``step`` and
``<name>``; one line appended per logged step, so a reader sees the curve grow) and
``<dir>/metrics.json`` (the latest values). ``<dir>`` is ``plots/<stage>``, a stage output
of ``dvc.yaml`` with ``cache: false``: git tracks it, so each attempt's commit pins its
curves, and the top-level ``plots:`` of ``dvc.yaml`` draw them (titles, axes).

DVCLive runs with ``save_dvc_exp=False`` (the loop commits, not ``dvc exp``), ``dvcyaml=None``
(``dvc.yaml`` declares the plots), no report and no DVC Studio (``DVC_STUDIO_OFFLINE``).
Logging reads values already computed: it draws no random numbers and changes no result.
"""

from __future__ import annotations

import logging
import math
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

METRICS_SUBDIR = Path("plots/metrics")
"""Where DVCLive puts the TSV of each metric under a stage's folder (``Live.plots_dir`` / ``metrics``)."""

logger = logging.getLogger(__name__)


class Curves:
    """DVCLive logger of one stage (see the module docstring).

    Args:
        directory: the stage's curve folder (``plots/<stage>``); emptied of earlier curves.
    """

    def __init__(self, directory: Path) -> None:
        os.environ.setdefault("DVC_STUDIO_OFFLINE", "true")  # never post to DVC Studio
        os.environ.setdefault("DVC_NO_ANALYTICS", "1")
        from dvclive.live import Live  # lazy: dvclive imports dvc, slow to load

        for name in ("dvclive", "dvc"):  # DVCLive's "Logging to experiment ..." is noise in a stage log
            logging.getLogger(name).setLevel(logging.WARNING)
        self.directory = directory
        self._live: Any = Live(str(directory), resume=False, report=None, save_dvc_exp=False, dvcyaml=None)

    def log(self, step: int, values: Mapping[str, float | int]) -> None:
        """Append one point to each named curve (a non-finite value is left out).

        Args:
            step: the x value (epoch, PPO update, games played).
            values: curve name (a file name: ``[a-z_]+``) -> value.
        """
        self._live.step = step
        for name, value in values.items():
            if math.isfinite(float(value)):
                self._live.log_metric(name, float(value), plot=True)
        self._live.make_summary()

    def close(self) -> None:
        """Write the summary once more; the folder is complete."""
        self._live.make_summary()


def open_curves(directory: Path | None) -> Curves | None:
    """``Curves(directory)``, or None when no folder is given (a stage run outside ``dvc.yaml``)."""
    return Curves(directory) if directory is not None else None
