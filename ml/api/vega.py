"""Vega-Lite specs of the dashboard's charts, from the files ``dvc plots show`` draws.

One chart language: the per-attempt generation series come from ``plots/generations.json``
(``ml.driver.generations``; rebuilt from the history while the file is absent) and the
learning curves from each stage's DVCLive TSVs (``plots/<stage>/plots/metrics/*.tsv``,
``ml.learn.curves``), read while the stage writes them. The page draws every spec with
vega-embed from the copies vendored in ``ml/api/static/vendor/`` (nothing from a CDN).

Each chart is a ``Chart``: ``id`` (the element id, stable for tests), a title and the spec
with its data inline, named ``DATA`` (``data: {name, values}``) so the page can swap in new rows.
"""

from __future__ import annotations

import csv
import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ml.api.readers import read_json_or
from ml.base.io import JSONObject
from ml.driver.generations import GENERATIONS_FILE, generation_rows
from ml.driver.state import HistoryEntry
from ml.learn.curves import METRICS_SUBDIR

if TYPE_CHECKING:
    from ml.judge.elo import EloEntry

SCHEMA = "https://vega.github.io/schema/vega-lite/v6.json"
"""An identifier only: vega-embed reads it to pick the parser and fetches nothing."""
CURVE_STAGES = ("train", "selfplay", "gate")
"""Stages with learning curves (sync partner: the ``--plots`` outputs of ``dvc.yaml``)."""
CURVE_X = {"train": "epoch", "selfplay": "PPO update", "gate": "games"}
VERDICT_COLOURS = {"domain": ["accepted", "rejected", "aborted"], "range": ["#2e7d32", "#c62828", "#757575"]}
WIDTH = 560
STEP_AXIS = {"tickMinStep": 1, "format": "d"}
"""The x axis of a count (epoch, PPO update, games): whole-number ticks, never 1.0, 1.1, ..."""
ELO_SCALE = {"zero": False, "padding": 16, "nice": True}
"""The Elo chart's y scale: fitted to the data (Vega-Lite puts 0 in a quantitative domain by default), padded in pixels."""
DATA = "table"
"""The name of each chart's main data set: the page swaps new rows into a drawn chart with
``view.data(DATA, rows)`` when only the rows changed (no redraw, no flicker)."""
POINTS = "gate_points"
"""The name of the win-rate chart's gate-point layer: Vega draws its marks in a group of class
``gate_points_marks`` (tests count them; legend symbols and the student line's points are not in it)."""


@dataclass
class Chart:
    """One chart of the page: element ``id``, ``title`` and the Vega-Lite ``spec``."""

    id: str
    title: str
    spec: dict[str, Any]
    live: bool = False


def _base(values: list[JSONObject], height: int = 220) -> JSONObject:
    return {"$schema": SCHEMA, "width": WIDTH, "height": height, "data": {"name": DATA, "values": values}}


def generation_data(root: Path, history: list[JSONObject], elo_history: list[EloEntry]) -> list[JSONObject]:
    """The rows of ``plots/generations.json`` under ``root``, or the same rows built from the history."""
    rows = read_json_or(root / GENERATIONS_FILE, None)
    return rows if isinstance(rows, list) else generation_rows([HistoryEntry.model_validate(e) for e in history], elo_history)


def winrate_chart(rows: list[JSONObject], target: float | None, parity: float | None) -> Chart:
    """Gate win rate per attempt with its interval (coloured by verdict), the student win rate, the bars."""
    gated = [r for r in rows if r.get("gate_win_rate") is not None]
    x = {"field": "attempt_no", "type": "ordinal", "title": "attempt (run order)"}
    layers: list[dict[str, Any]] = [
        {
            "mark": "rule",
            "encoding": {"x": x, "y": {"field": "gate_win_low", "type": "quantitative"}, "y2": {"field": "gate_win_high"}},
        },
        {
            "name": POINTS,
            "mark": {"type": "point", "filled": True, "size": 70},
            "encoding": {
                "x": x,
                "y": {"field": "gate_win_rate", "type": "quantitative", "title": "win rate", "scale": {"domain": [0, 1]}},
                "color": {"field": "verdict", "type": "nominal", "scale": VERDICT_COLOURS},
                "tooltip": [
                    {"field": f}
                    for f in ("generation", "attempt", "verdict", "gate_win_rate", "gate_win_low", "gate_win_high")
                ],
            },
        },
        {
            "mark": {"type": "line", "point": True, "strokeDash": [4, 3], "color": "#4e79a7"},
            "encoding": {"x": x, "y": {"field": "student_win_rate", "type": "quantitative"}},
        },
    ]
    for value, label in ((target, "target"), (parity, "parity")):
        if value is not None:
            layers.append({"data": {"values": [{"y": value, "label": label}]}, "mark": {"type": "rule", "strokeDash": [2, 2]},
                           "encoding": {"y": {"field": "y", "type": "quantitative"}, "tooltip": [{"field": "label"}]}})  # fmt: skip
    spec = {**_base(gated), "layer": layers}
    return Chart("winrate-chart", "Gate win rate (95% interval; dashed: candidate student vs current)", spec)


def elo_chart(rows: list[JSONObject]) -> Chart:
    """Elo of each accepted generation's student with its 95% interval.

    The y scale is fitted to the intervals (``ELO_SCALE``: no zero, padded), so 1516 against
    1599 and their intervals stand apart instead of sitting as dots near the top of a 0..1600 axis.
    """
    rated = [r for r in rows if r.get("elo") is not None]
    x = {"field": "generation", "type": "ordinal", "title": "generation", "axis": {"labelAngle": 0}}
    y = {"type": "quantitative", "scale": ELO_SCALE, "title": "Elo (heuristic = 1500)"}
    layers = [
        {"mark": {"type": "errorbar", "ticks": {"size": 16}, "thickness": 2, "color": "#4e79a7"},
         "encoding": {"x": x, "y": {"field": "elo_low", **y}, "y2": {"field": "elo_high"}}},
        {"mark": {"type": "point", "filled": True, "size": 70},
         "encoding": {"x": x, "y": {"field": "elo", **y},
                      "tooltip": [{"field": f} for f in ("generation", "elo", "elo_low", "elo_high")]}},
    ]  # fmt: skip
    return Chart("elo-chart", "Elo of each accepted student", {**_base(rated), "layer": layers})


def composition_chart(history: list[JSONObject], current: Mapping[str, float]) -> Chart:
    """Sampled source shares of the training set per attempt, plus the current ``metrics/train.json``."""
    values = []
    for no, entry in enumerate(history, start=1):
        share = ((entry.get("metrics") or {}).get("train") or {}).get("train/sampled_share") or {}
        values += [{"attempt": str(no), "source": str(s), "share": float(v)} for s, v in share.items()]
    values += [{"attempt": "current", "source": str(s), "share": float(v)} for s, v in current.items()]
    spec = {**_base(values, 160), "mark": "bar", "encoding": {
        "x": {"field": "attempt", "type": "ordinal", "sort": None, "title": "attempt (run order)"},
        "y": {"field": "share", "type": "quantitative", "stack": "normalize", "title": "share of sampled decisions"},
        "color": {"field": "source", "type": "nominal"}, "tooltip": [{"field": "attempt"}, {"field": "source"}, {"field": "share"}]}}  # fmt: skip
    return Chart("composition-chart", "Training-set composition (train/sampled_share)", spec)


def read_curves(root: Path, stage: str) -> list[JSONObject]:
    """Every point of ``stage``'s DVCLive curves under ``root``: ``{metric, step, value}``, a half-written line left out."""
    values = []
    folder = root / "plots" / stage / METRICS_SUBDIR
    for tsv in sorted(folder.glob("*.tsv")) if folder.is_dir() else []:
        try:
            with tsv.open(newline="") as f:
                for row in csv.DictReader(f, delimiter="\t"):
                    try:
                        step, value = int(row["step"]), float(row[tsv.stem])
                    except (KeyError, TypeError, ValueError):
                        continue
                    if math.isfinite(value):
                        values.append({"metric": tsv.stem, "step": step, "value": value})
        except OSError:
            continue
    return values


def curve_chart(root: Path, stage: str, live: bool) -> Chart | None:
    """One panel per curve of ``stage`` (independent y scales); None while it has none."""
    values = read_curves(root, stage)
    if not values:
        return None
    spec = {
        "$schema": SCHEMA, "data": {"name": DATA, "values": values}, "columns": 3, "resolve": {"scale": {"y": "independent"}},
        "facet": {"field": "metric", "type": "nominal", "title": None},
        "spec": {"width": 170, "height": 110, "mark": {"type": "line", "point": len(values) < 60},
                 "encoding": {"x": {"field": "step", "type": "quantitative", "title": CURVE_X[stage], "axis": STEP_AXIS},
                              "y": {"field": "value", "type": "quantitative", "title": None},
                              "tooltip": [{"field": "metric"}, {"field": "step"}, {"field": "value"}]}},
    }  # fmt: skip
    return Chart(f"curves-{stage}", f"{stage}{' (running)' if live else ''}", spec, live=live)


def curve_charts(root: Path, running_stage: str | None) -> list[Chart]:
    """The learning curves of each stage that has them; the running stage's first, marked live."""
    order = sorted(CURVE_STAGES, key=lambda s: s != running_stage)
    return [c for s in order if (c := curve_chart(root, s, live=s == running_stage)) is not None]
