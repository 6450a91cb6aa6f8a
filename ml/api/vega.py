"""Vega-Lite specs of the dashboard's charts, built with Altair from the files ``dvc plots show`` draws.

One chart language: the per-attempt generation series come from ``plots/generations.json``
(``ml.driver.generations``; rebuilt from the history while the file is absent) and the
learning curves from each stage's DVCLive TSVs (``plots/<stage>/plots/metrics/*.tsv``,
``ml.learn.curves``), read while the stage writes them. Altair only builds the spec
(``to_dict``: plain JSON, no network, no renderer); the page draws it with vega-embed from the
copies vendored in ``ml/api/static/vendor/`` (nothing from a CDN). Altair builds each chart's
frame (the spec without its rows) once per shape and the rows go in per refresh (``_spec``); the
frames are not validated against the Vega-Lite schema here (0.3-0.5 s a chart on a loaded
machine): ``tests/test_plots.py`` validates every one.

Each chart is a ``Chart``: ``id`` (the element id, stable for tests), a title and the spec
with its data inline, named ``DATA`` (``data: {name, values}``) so the page can swap in new rows.
A chart draws only the quantities its files hold: the gate's curves are those of the test the
game's gate ran (win rate, or mean return in chips in a two-player zero-sum game).
"""

from __future__ import annotations

import csv
import json
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

import altair as alt

from ml.api.readers import read_json_or
from ml.base.io import JSONObject
from ml.driver.generations import GENERATIONS_FILE, generation_rows
from ml.driver.state import HistoryEntry
from ml.learn.curves import METRICS_SUBDIR

if TYPE_CHECKING:
    from ml.judge.elo import EloEntry

CURVE_STAGES = ("train", "selfplay", "gate")
"""Stages with learning curves (sync partner: the ``--plots`` outputs of ``dvc.yaml``)."""
CURVE_X = {"train": "epoch", "selfplay": "PPO update", "gate": "games"}
VERDICT_COLOURS: dict[str, Any] = {"domain": ["accepted", "rejected", "aborted"], "range": ["#2e7d32", "#c62828", "#757575"]}
WIDTH = 560
STEP_AXIS: dict[str, Any] = {"tickMinStep": 1, "format": "d"}
"""The x axis of a count (epoch, PPO update, games, attempt): whole-number ticks, never 1.0, 1.1, ..."""
ELO_SCALE: dict[str, Any] = {"zero": False, "padding": 16, "nice": True}
"""The Elo chart's y scale: fitted to the data (Vega-Lite puts 0 in a quantitative domain by default), padded in pixels."""
DATA = "table"
"""The name of each chart's main data set: the page swaps new rows into a drawn chart with
``view.data(DATA, rows)`` when only the rows changed (no redraw, no flicker)."""
POINTS = "gate_points"
"""The name of the win-rate chart's gate-point layer: Vega draws its marks in a group of class
``gate_points_marks`` (tests count them; legend symbols and the student line's points are not in it)."""
WIN_RATE_FIELDS = ("gate_win_rate", "gate_win_low", "gate_win_high", "student_win_rate")
"""The win-rate chart's y values (with the reference lines, they set its y domain: ``fitted_domain``)."""
SPRT_PATH = "llr"
SPRT_BOUNDS = {"llr_upper": ("upper bound: pass (H1)", "#2e7d32"), "llr_lower": ("lower bound: fail (H0)", "#c62828")}
"""The gate's SPRT curves (``ml.judge.sequential``, ``ml.judge.mean_return``): the path and its two
Wald bounds, drawn in one chart (``sprt_chart``), each bound labelled at its end."""
_X_PADDING = 18
"""Pixels between a count axis' ends and its first and last points (one point: in the middle)."""


@dataclass
class Chart:
    """One chart of the page: element ``id``, ``title`` and the Vega-Lite ``spec``."""

    id: str
    title: str
    spec: dict[str, Any]
    live: bool = False


def _spec(frame: str, values: list[JSONObject]) -> dict[str, Any]:
    """A chart's Vega-Lite spec: its ``frame`` (the JSON of an Altair chart that names its data,
    ``_DATA``, and holds no rows) with ``values`` as the ``DATA`` rows.

    Altair builds each frame once per shape (the ``_*_frame`` functions are cached): building is slow
    (it copies and re-validates the chart at each step: about 0.2 s for the gate's curves, 1 s for
    the page's five charts on a loaded 2-core machine, against 3 ms for the dicts written by hand),
    and the page refreshes every 3 s while only the rows change.
    """
    spec: dict[str, Any] = json.loads(frame)
    spec["data"] = {"name": DATA, "values": values}
    return spec


def _frame(chart: alt.TopLevelMixin) -> str:
    """An Altair chart's JSON (unvalidated: see the module docstring)."""
    return json.dumps(chart.to_dict(validate=False))


_DATA = alt.NamedData(name=DATA)
"""Each chart's main data by name only; ``_spec`` puts the rows in."""


def _count_x(field: str, title: str) -> alt.X:
    """A quantitative x of a count: whole-number ticks, level labels, padded ends."""
    return alt.X(
        f"{field}:Q", title=title, axis=alt.Axis(labelAngle=0, **STEP_AXIS), scale=alt.Scale(zero=False, nice=False, padding=_X_PADDING)
    )  # fmt: skip


def fitted_domain(values: Iterable[float | None], lower: float = 0.0, upper: float = 1.0, margin: float = 0.1) -> list[float]:
    """A y domain fitted to ``values``: their range widened by ``margin`` of it on each side (at least
    0.005), to whole hundredths, within ``[lower, upper]``; all of it while there is no value.

    Args:
        values: the numbers drawn (None and non-finite ones left out).
        lower, upper: the limits of the quantity (a rate: 0 and 1).
        margin: the share of the range added below and above, so no point sits on the frame.
    """
    xs = [v for v in values if v is not None and math.isfinite(v)]
    if not xs:
        return [lower, upper]
    lo, hi = min(xs), max(xs)
    pad = max(margin * (hi - lo), 0.005)
    return [max(lower, math.floor((lo - pad) * 100) / 100), min(upper, math.ceil((hi + pad) * 100) / 100)]


def generation_data(root: Path, history: list[JSONObject], elo_history: list[EloEntry]) -> list[JSONObject]:
    """The rows of ``plots/generations.json`` under ``root``, or the same rows built from the history."""
    rows = read_json_or(root / GENERATIONS_FILE, None)
    return rows if isinstance(rows, list) else generation_rows([HistoryEntry.model_validate(e) for e in history], elo_history)


def _reference_line(value: float, label: str) -> alt.LayerChart:
    """A dotted horizontal line at ``value``, labelled just right of the plot (clear of the points)."""
    line = alt.InlineData(values=[{"y": value, "label": f"{label} {value:.3g}"}], name=f"reference_{label}")
    y = alt.Y("y:Q")
    rule = alt.Chart(line).mark_rule(strokeDash=[2, 2], color="#555").encode(y=y, tooltip=[alt.Tooltip("label:N")])
    text = alt.Chart(line).mark_text(align="left", baseline="middle", dx=6, color="#333")
    return alt.LayerChart(layer=[rule, text.encode(y=y, x=alt.value(WIDTH), text=alt.Text("label:N"))])


def winrate_chart(rows: list[JSONObject], target: float | None, parity: float | None) -> Chart:
    """Gate win rate per attempt with its interval (coloured by verdict), the student win rate, the
    target and parity lines (labelled); the y axis fitted to all of them (``fitted_domain``)."""
    gated = [r for r in rows if r.get("gate_win_rate") is not None]
    references = tuple((v, label) for v, label in ((target, "target"), (parity, "parity")) if v is not None)
    drawn = [r.get(f) for r in gated for f in WIN_RATE_FIELDS] + [v for v, _ in references]
    domain = fitted_domain(v if isinstance(v, (int, float)) else None for v in drawn)
    spec = _spec(_winrate_frame(domain[0], domain[1], references), gated)
    return Chart("winrate-chart", "Gate win rate (95% interval; dashed: candidate student vs current)", spec)


@lru_cache(maxsize=32)
def _winrate_frame(low: float, high: float, references: tuple[tuple[float, str], ...]) -> str:
    x = _count_x("attempt_no", "attempt (run order)")
    y_scale = alt.Scale(domain=[low, high], nice=False)
    interval = alt.Chart().mark_rule().encode(x=x, y=alt.Y("gate_win_low:Q", scale=y_scale), y2="gate_win_high:Q")
    points = (
        alt.Chart()
        .mark_point(filled=True, size=70)
        .encode(
            x=x,
            y=alt.Y("gate_win_rate:Q", title="win rate", scale=y_scale),
            color=alt.Color("verdict:N", scale=alt.Scale(**VERDICT_COLOURS), legend=alt.Legend(orient="bottom", direction="horizontal")),
            tooltip=[alt.Tooltip(f) for f in ("generation:Q", "attempt:Q", "verdict:N", "gate_win_rate:Q", "gate_win_low:Q", "gate_win_high:Q")],
        )
        .properties(name=POINTS)
    )  # fmt: skip
    student = (
        alt.Chart()
        .mark_line(point=True, strokeDash=[4, 3], color="#4e79a7")
        .encode(x=x, y=alt.Y("student_win_rate:Q", scale=y_scale))
    )
    layers = [interval, points, student, *(_reference_line(v, label) for v, label in references)]
    return _frame(alt.layer(*layers, data=_DATA).properties(width=WIDTH, height=220))


def elo_chart(rows: list[JSONObject]) -> Chart:
    """Elo of each accepted generation's student with its 95% interval.

    The y scale is fitted to the intervals (``ELO_SCALE``: no zero, padded), so 1516 against
    1599 and their intervals stand apart instead of sitting as dots near the top of a 0..1600 axis.
    """
    rated = [r for r in rows if r.get("elo") is not None]
    return Chart("elo-chart", "Elo of each accepted student", _spec(_elo_frame(), rated))


@lru_cache(maxsize=1)
def _elo_frame() -> str:
    x = alt.X("generation:O", title="generation", axis=alt.Axis(labelAngle=0))
    scale, title = alt.Scale(**ELO_SCALE), "Elo (heuristic = 1500)"
    interval = alt.Chart().mark_errorbar(ticks={"size": 16}, thickness=2, color="#4e79a7").encode(
        x=x, y=alt.Y("elo_low:Q", scale=scale, title=title), y2="elo_high:Q"
    )  # fmt: skip
    point = alt.Chart().mark_point(filled=True, size=70).encode(
        x=x, y=alt.Y("elo:Q", scale=scale, title=title), tooltip=[alt.Tooltip(f"{f}:Q") for f in ("generation", "elo", "elo_low", "elo_high")]
    )  # fmt: skip
    return _frame(alt.layer(interval, point, data=_DATA).properties(width=WIDTH, height=220))


def composition_chart(history: list[JSONObject], current: Mapping[str, float]) -> Chart:
    """Sampled source shares of the training set per attempt, plus the current ``metrics/train.json``."""
    values: list[JSONObject] = []
    for no, entry in enumerate(history, start=1):
        share = ((entry.get("metrics") or {}).get("train") or {}).get("train/sampled_share") or {}
        values += [{"attempt": str(no), "source": str(s), "share": float(v)} for s, v in share.items()]
    values += [{"attempt": "current", "source": str(s), "share": float(v)} for s, v in current.items()]
    return Chart("composition-chart", "Training-set composition (train/sampled_share)", _spec(_composition_frame(), values))


@lru_cache(maxsize=1)
def _composition_frame() -> str:
    chart = alt.Chart(_DATA).mark_bar().encode(
        x=alt.X("attempt:O", sort=None, title="attempt (run order)", axis=alt.Axis(labelAngle=0)),
        y=alt.Y("share:Q", stack="normalize", title="share of sampled decisions"),
        color=alt.Color("source:N"), tooltip=[alt.Tooltip("attempt:O"), alt.Tooltip("source:N"), alt.Tooltip("share:Q")],
    ).properties(width=WIDTH, height=160)  # fmt: skip
    return _frame(chart)


def read_curves(root: Path, stage: str) -> list[JSONObject]:
    """Every point of ``stage``'s DVCLive curves under ``root``: ``{metric, step, value}``, a half-written line left out."""
    values: list[JSONObject] = []
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


def _panel(stage: str, points: bool) -> alt.Chart:
    """A small panel of one curve's rows (``metric``, ``step``, ``value``), its own y scale."""
    panel: alt.Chart = alt.Chart(width=170, height=110).mark_line(point=points).encode(  # mark_*: Any to mypy
        x=alt.X("step:Q", title=CURVE_X[stage], axis=alt.Axis(**STEP_AXIS)), y=alt.Y("value:Q", title=None),
        tooltip=[alt.Tooltip("metric:N"), alt.Tooltip("step:Q"), alt.Tooltip("value:Q")],
    )  # fmt: skip
    return panel


def sprt_chart(points: bool) -> alt.LayerChart:
    """The gate's SPRT: the log-likelihood ratio against games between its two bounds (dashed, each
    labelled above or below its first point: the path ends at a bound, it starts near 0), one
    chart on the curve rows (``DATA``: metric, step, value)."""
    x = _count_x("step", "games")
    y = alt.Y("value:Q", title="log-likelihood ratio", scale=alt.Scale(zero=False, padding=14))
    path = alt.Chart().transform_filter(alt.datum.metric == SPRT_PATH).mark_line(point=points, color="#4e79a7").encode(
        x=x, y=y, tooltip=[alt.Tooltip("step:Q", title="games"), alt.Tooltip("value:Q", title="LLR")]
    )  # fmt: skip
    layers: list[alt.Chart] = [path]
    for metric, (label, colour) in SPRT_BOUNDS.items():
        bound = alt.Chart().transform_filter(alt.datum.metric == metric)
        layers.append(
            bound.mark_line(strokeDash=[5, 3], color=colour).encode(x=x, y=y, tooltip=[alt.Tooltip("value:Q", title=label)])
        )
        start = bound.transform_joinaggregate(first="min(step)").transform_filter("datum.step === datum.first")
        above = metric == "llr_upper"
        layers.append(start.mark_text(align="left", baseline="bottom" if above else "top", dy=-3 if above else 3, color=colour)
                      .encode(x=x, y=y, text=alt.value(label)))  # fmt: skip
    return alt.LayerChart(layer=layers, width=WIDTH, height=180, title="SPRT: log-likelihood ratio between its bounds")


def curve_chart(root: Path, stage: str, live: bool) -> Chart | None:
    """One panel per curve of ``stage`` (independent y scales); None while it has none. The gate's
    SPRT path and bounds are one chart (``sprt_chart``), its other curves panels below it."""
    values = read_curves(root, stage)
    if not values:
        return None
    metrics = {str(v["metric"]) for v in values}
    sprt = stage == "gate" and SPRT_PATH in metrics
    others = tuple(sorted(metrics - {SPRT_PATH, *SPRT_BOUNDS})) if sprt else None
    spec = _spec(_curves_frame(stage, len(values) < 60, others), values)
    return Chart(f"curves-{stage}", f"{stage}{' (running)' if live else ''}", spec, live=live)


@lru_cache(maxsize=32)
def _curves_frame(stage: str, points: bool, sprt_others: tuple[str, ...] | None) -> str:
    """A facet of every curve (``sprt_others`` None; each panel with its own x axis: a shared one
    would also stand under the empty cells of a short last row), or the SPRT chart with a panel
    for each of ``sprt_others`` below it."""
    if sprt_others is None:
        facet = alt.Facet("metric:N", title=None)
        return _frame(
            _panel(stage, points)
            .facet(facet=facet, columns=3, data=_DATA)
            .resolve_scale(y="independent")
            .resolve_axis(x="independent")
        )
    panels = [_panel(stage, points).transform_filter(alt.datum.metric == m).properties(title=m) for m in sprt_others]
    return _frame(
        alt.vconcat(sprt_chart(points), *([alt.concat(*panels, columns=3)] if panels else []), data=_DATA, spacing=24)
    )


def curve_charts(root: Path, running_stage: str | None) -> list[Chart]:
    """The learning curves of each stage that has them; the running stage's first, marked live."""
    order = sorted(CURVE_STAGES, key=lambda s: s != running_stage)
    return [c for s in order if (c := curve_chart(root, s, live=s == running_stage)) is not None]
