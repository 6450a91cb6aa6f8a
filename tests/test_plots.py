"""The charts' Vega-Lite specs: ``dvc plots`` (dvc.yaml and ``.dvc/plots/series.json``) and the dashboard's (``ml.api.vega``).

Checks, on the spec JSON (not on pixels): every ``dvc.yaml`` plot uses the ``series``
template; filled by DVC's own renderer (``dvc_render``) for one and several series, in
one and two revisions, it leaves no anchor unfilled, ticks the x axis in whole numbers,
puts a point on every datum, colours by series (the ``filename::field`` or ``field`` DVC
adds, else the revision) and dashes by revision, and cuts no legend label; the dashboard's
Elo chart fits its y scale to the intervals (no zero, padded) and draws them as error bars;
its learning curves tick their x axis in whole numbers.
"""

from __future__ import annotations

import json

import pytest
from dvc_render import VegaRenderer

from ml.api.vega import STEP_AXIS, Chart, curve_chart, elo_chart
from ml.config.yaml_file import safe_yaml
from tests.conftest import ROOT

TEMPLATE_DIR = ROOT / ".dvc/plots"


def _plots() -> dict[str, dict]:
    return {k: v for entry in safe_yaml().load((ROOT / "dvc.yaml").read_text())["plots"] for k, v in entry.items()}


def test_every_dvc_plot_uses_the_series_template():
    plots = _plots()
    assert len(plots) == 12 and {p.get("template") for p in plots.values()} == {"series"}
    assert (TEMPLATE_DIR / "series.json").is_file()  # where DVC looks for `template: series`


def _fill(ys: list[tuple[str, str]], revs: list[str]) -> dict:
    """``series.json`` filled as ``dvc plots show``/``diff`` fill it: ``ys`` (file, field) per series, over ``revs``."""
    y = ys[0][1] if len(ys) == 1 else "dvc_inferred_y_value"
    points = [
        {
            "step": str(step),
            field: str(0.1 * step),
            "dvc_inferred_y_value": str(0.1 * step),
            "rev": rev,
            "filename": file,
            "field": field,
        }
        for rev in revs
        for file, field in ys
        for step in (1, 2)
    ]
    renderer = VegaRenderer(
        points, "a_plot", template="series", template_dir=str(TEMPLATE_DIR), x="step", y=y, title="a plot",
        x_label="epoch", y_label="loss", anchors_y_definitions=[{"filename": f, "field": g} for f, g in ys],
    )  # fmt: skip
    return renderer.get_filled_template()


@pytest.mark.parametrize(
    "ys,revs,series_key",
    [
        ([("loss.tsv", "loss")], ["workspace"], None),  # one series: coloured by revision
        ([("a.tsv", "accuracy"), ("h.tsv", "holdout_accuracy")], ["workspace", "HEAD~1"], "filename::field"),
        ([("plots/generations.json", "elo"), ("plots/generations.json", "elo_low")], ["workspace"], "field"),
    ],
)
def test_the_series_template_filled_by_dvc(ys, revs, series_key):
    spec = _fill(ys, revs)
    assert "<DVC_METRIC" not in json.dumps(spec)  # every anchor filled
    enc = spec["encoding"]
    assert enc["x"]["type"] == "quantitative" and enc["x"]["axis"] == {"tickMinStep": 1, "format": "d"}  # 1, 2: no 1.1
    assert spec["mark"]["type"] == "line" and spec["mark"]["point"]  # a one-attempt series is a visible point
    (calc,) = spec["transform"]
    assert calc["as"] == enc["color"]["field"] == "series" and enc["color"]["type"] == "nominal"
    assert enc["strokeDash"]["field"] == "rev"  # revisions differ by dash, series by colour
    assert enc["color"]["legend"]["labelLimit"] == 0  # 0: labels never cut (Vega's default cuts at 160 px)
    rows = spec["data"]["values"]
    if series_key is None:
        assert "datum.rev" in calc["calculate"] and not any("field" in r or "filename" in r for r in rows)
    else:  # the key DVC adds names each series: the expression reads it, one value per series
        assert f"datum['{series_key}']" in calc["calculate"]
        assert len({r[series_key] for r in rows}) == len(ys)
    assert {r["rev"] for r in rows} == set(revs)


def test_dashboard_elo_axis_is_fitted_to_the_intervals():
    rows = [{"generation": 0, "elo": 1516.0, "elo_low": 1480.0, "elo_high": 1552.0},
            {"generation": 1, "elo": 1599.0, "elo_low": 1561.0, "elo_high": 1637.0}]  # fmt: skip
    spec = elo_chart(rows).spec
    interval, point = spec["layer"]
    for layer in (interval, point):
        scale = layer["encoding"]["y"]["scale"]
        assert scale["zero"] is False and scale["padding"] > 0
    assert interval["mark"]["type"] == "errorbar" and interval["mark"]["ticks"]
    assert interval["encoding"]["y"]["field"] == "elo_low" and interval["encoding"]["y2"]["field"] == "elo_high"
    assert point["encoding"]["y"]["field"] == "elo" and spec["data"]["values"] == rows


def test_dashboard_curves_tick_whole_steps(tmp_path):
    folder = tmp_path / "plots/train/plots/metrics"
    folder.mkdir(parents=True)
    (folder / "loss.tsv").write_text("timestamp\tstep\tloss\n0\t1\t0.5\n0\t2\t0.4\n")
    chart = curve_chart(tmp_path, "train", live=False)
    assert isinstance(chart, Chart)
    x = chart.spec["spec"]["encoding"]["x"]
    assert x["axis"] == STEP_AXIS == {"tickMinStep": 1, "format": "d"} and chart.spec["spec"]["mark"]["point"]
