"""The charts' Vega-Lite specs: ``dvc plots`` (dvc.yaml and ``.dvc/plots/series.json``) and the dashboard's (``ml.api.vega``).

Checks, on the spec JSON (not on pixels): every ``dvc.yaml`` plot uses the ``series``
template; filled by DVC's own renderer (``dvc_render``) for one and several series, in
one and two revisions, it leaves no anchor unfilled, ticks the x axis in whole numbers,
puts a point on every datum, colours by series (the ``filename::field`` or ``field`` DVC
adds, else the revision) and dashes by revision, and cuts no legend label; the page
``dvc plots show`` writes (``ml/api/templates/dvc_plots.html``, in headless Chromium) draws no
chart without data: a Commander run's has no chips or NashConv chart, a zero-sum game's has both.
The dashboard's (built with Altair): every spec valid Vega-Lite; the gate chart's y axis fitted
to its points, intervals and labelled reference lines, its x ticks level; the Elo chart fits its
y scale to the intervals (no zero, padded) and draws them as error bars; the SPRT's path and
bounds in one chart; the learning curves tick their x axis in whole numbers.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from altair.utils.schemapi import validate_jsonschema
from altair.vegalite.v6.schema.core import load_schema
from dvc_render import VegaRenderer

from ml.api.vega import (
    POINTS,
    STEP_AXIS,
    Chart,
    composition_chart,
    curve_chart,
    elo_chart,
    fitted_domain,
    winrate_chart,
)
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


CHROMIUM = Path("/usr/bin/chromium")
ZERO_SUM_ONLY = {"generation_chips", "generation_nash_conv"}


def _generation_rows(zero_sum: bool) -> list[dict]:
    """Two attempts' rows of ``plots/generations.json`` (``ml.driver.generations``): chips and NashConv null but in a zero-sum game."""
    return [
        {"attempt_no": no, "generation": no - 1, "attempt": 1, "verdict": "accepted", "gate_win_rate": 0.3, "gate_win_low": 0.2,
         "gate_win_high": 0.4, "student_win_rate": 0.35, "elo": 1500.0 + no, "elo_low": 1450.0, "elo_high": 1550.0,
         "ppo_share": 0.2 * no, "gate_mean_return": 0.1 * no if zero_sum else None, "gate_return_low": 0.0 if zero_sum else None,
         "gate_return_high": 0.3 if zero_sum else None, "student_mean_return": 0.05 if zero_sum else None, "episodes": 100,
         "cumulative_episodes": 100 * no, "nash_conv": 0.5 / no if zero_sum else None}
        for no in (1, 2)
    ]  # fmt: skip


@pytest.mark.expensive
@pytest.mark.skipif(not CHROMIUM.exists(), reason="needs /usr/bin/chromium (apt-get install chromium; .ci/run does)")
@pytest.mark.parametrize("zero_sum", [False, True], ids=["commander", "zero_sum"])
def test_dvc_plots_page_draws_no_chart_without_data(tmp_path: Path, zero_sum: bool):
    """``dvc plots show`` on this dvc.yaml's plots, this template and a generations file as the driver
    writes it, the page run in headless Chromium: the chips and NashConv charts only in a zero-sum
    game, the other generation charts in both; the plots of absent curve files not drawn either."""
    repo = tmp_path / "repo"
    repo.mkdir()
    env = {**os.environ, "DVC_NO_ANALYTICS": "1"}
    subprocess.run([sys.executable, "-m", "dvc", "init", "--no-scm", "-q"], cwd=repo, env=env, check=True)
    (repo / ".dvc/config").write_text((ROOT / ".dvc/config").read_text())  # plots.html_template
    (repo / ".dvc/plots").mkdir(exist_ok=True)
    (repo / ".dvc/plots/series.json").write_text((TEMPLATE_DIR / "series.json").read_text())
    (repo / "ml").symlink_to(ROOT / "ml")  # the template and the vendored scripts, where the report looks for them
    (repo / "dvc.yaml").write_text(json.dumps({"plots": safe_yaml().load((ROOT / "dvc.yaml").read_text())["plots"]}))
    (repo / "plots").mkdir()
    (repo / "plots/generations.json").write_text(json.dumps(_generation_rows(zero_sum)))
    subprocess.run([sys.executable, "-m", "dvc", "plots", "show", "-o", "dvc_plots"], cwd=repo, env=env, check=True,
                   capture_output=True)  # fmt: skip
    page = (repo / "dvc_plots/index.html").read_text()
    assert all(f"vegaEmbed('#{p}'" in page for p in _plots())  # DVC embeds every plot; the page decides
    dom = subprocess.run(
        [str(CHROMIUM), "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run",
         "--virtual-time-budget=5000", f"--user-data-dir={tmp_path / 'profile'}", "--dump-dom", (repo / "dvc_plots/index.html").as_uri()],
        capture_output=True, text=True, timeout=120, check=True,
    ).stdout  # fmt: skip
    shown = set(re.findall(r'<div id="(\w+)"', dom))
    generations = {p for p in _plots() if p.startswith("generation_")}
    assert shown == (generations if zero_sum else generations - ZERO_SUM_ONLY), shown
    assert all(re.search(rf'<div id="{p}".*?<svg', dom, re.S) for p in shown)  # drawn
    note = re.search(r'<p id="not-drawn">([^<]*)</p>', dom)
    assert note is not None and set(_plots()) - shown == {p.strip() for p in note.group(1).split(":")[-1].split(",")}


WIN_ROWS = [
    {"attempt_no": 1, "generation": 0, "attempt": 1, "verdict": "accepted", "gate_win_rate": 0.31, "gate_win_low": 0.27,
     "gate_win_high": 0.36, "student_win_rate": 0.33},
    {"attempt_no": 2, "generation": 1, "attempt": 1, "verdict": "rejected", "gate_win_rate": 0.29, "gate_win_low": 0.26,
     "gate_win_high": 0.33, "student_win_rate": None},
]  # fmt: skip


def _layers(spec: dict) -> list[dict]:
    """Every unit layer of a (nested) layer spec."""
    return [u for layer in spec["layer"] for u in (_layers(layer) if "layer" in layer else [layer])]


def test_dashboard_gate_chart_fits_its_data():
    spec = winrate_chart(WIN_ROWS, target=0.35, parity=0.25).spec
    layers = _layers(spec)
    (domain,) = {tuple(u["encoding"]["y"]["scale"]["domain"]) for u in layers if "scale" in u["encoding"].get("y", {})}
    drawn = [r[f] for r in WIN_ROWS for f in ("gate_win_rate", "gate_win_low", "gate_win_high", "student_win_rate") if r[f]]
    lo, hi = domain
    assert lo <= min(*drawn, 0.25) and hi >= max(*drawn, 0.35)  # every point, interval and reference line inside
    assert (lo, hi) == (0.23, 0.38) and hi - lo < 0.2  # not 0..1: 0.26 to 0.36 spread over the height
    texts = [layer for layer in spec["layer"] if "layer" in layer]
    assert [t["data"]["values"][0]["label"] for t in texts] == ["target 0.35", "parity 0.25"]
    assert all({u["mark"]["type"] for u in t["layer"]} == {"rule", "text"} for t in texts)  # each line with its label
    x = next(u for u in layers if u.get("name") == POINTS)["encoding"]["x"]
    assert x["axis"]["labelAngle"] == 0 and x["axis"]["format"] == "d" and x["type"] == "quantitative"
    assert spec["data"] == {"name": "table", "values": WIN_ROWS}  # the page swaps rows by this name
    assert fitted_domain([]) == [0.0, 1.0] and fitted_domain([0.5]) == [0.49, 0.51] and fitted_domain([0.0, 1.0]) == [0.0, 1.0]


def _gate_curves(tmp_path: Path, with_rate: str = "win_rate") -> dict:
    folder = tmp_path / "plots/gate/plots/metrics"
    folder.mkdir(parents=True)
    curves = {"llr": [-0.5, -1.4, -3.1], "llr_upper": [2.9] * 3, "llr_lower": [-2.9] * 3, with_rate: [0.2, 0.1, 0.1]}
    for name, values in curves.items():
        (folder / f"{name}.tsv").write_text(
            f"timestamp\tstep\t{name}\n" + "".join(f"0\t{4 * i}\t{v}\n" for i, v in enumerate(values, 1))
        )
    chart = curve_chart(tmp_path, "gate", live=False)
    assert isinstance(chart, Chart)
    return chart.spec


@pytest.mark.parametrize("rate", ["win_rate", "mean_return"])  # the SPRT on first places, or on chips (zero-sum games)
def test_dashboard_sprt_path_between_its_bounds(tmp_path: Path, rate: str):
    spec = _gate_curves(tmp_path, rate)
    sprt, panels = spec["vconcat"]
    lines = {u["transform"][0]["filter"]: u["mark"] for u in sprt["layer"] if u["mark"]["type"] == "line"}
    assert set(lines) == {"(datum.metric === 'llr')", "(datum.metric === 'llr_upper')", "(datum.metric === 'llr_lower')"}
    assert "strokeDash" in lines["(datum.metric === 'llr_upper')"] and "strokeDash" not in lines["(datum.metric === 'llr')"]
    labels = [u["encoding"]["text"]["value"] for u in sprt["layer"] if u["mark"]["type"] == "text"]
    assert labels == ["upper bound: pass (H1)", "lower bound: fail (H0)"]
    assert {u["encoding"]["y"]["field"] for u in sprt["layer"]} == {"value"}  # one y scale: the path between its bounds
    assert [p["title"] for p in panels["concat"]] == [rate]  # no flat panels of the bounds
    assert spec["data"]["name"] == "table" and {v["metric"] for v in spec["data"]["values"]} == {
        "llr",
        "llr_upper",
        "llr_lower",
        rate,
    }


def test_dashboard_specs_are_valid_vega_lite(tmp_path: Path):
    """Altair builds them unvalidated on each refresh (ml/api/vega.py); here each is checked against Vega-Lite's schema."""
    schema = load_schema()
    specs = [
        winrate_chart(WIN_ROWS, 0.35, 0.25).spec, winrate_chart([], None, None).spec,
        elo_chart([{"generation": 0, "elo": 1516.0, "elo_low": 1480.0, "elo_high": 1552.0}]).spec,
        composition_chart([], {"sim": 0.7, "ppo": 0.3}).spec, _gate_curves(tmp_path),
    ]  # fmt: skip
    train = tmp_path / "plots/train/plots/metrics"
    train.mkdir(parents=True)
    (train / "loss.tsv").write_text("timestamp\tstep\tloss\n0\t1\t0.5\n")
    specs.append(curve_chart(tmp_path, "train", live=True).spec)  # type: ignore[union-attr]
    for spec in specs:
        validate_jsonschema(spec, schema)
        assert "datasets" not in spec and "cdn" not in json.dumps(spec).lower()


def test_dashboard_curves_tick_whole_steps(tmp_path):
    folder = tmp_path / "plots/train/plots/metrics"
    folder.mkdir(parents=True)
    (folder / "loss.tsv").write_text("timestamp\tstep\tloss\n0\t1\t0.5\n0\t2\t0.4\n")
    chart = curve_chart(tmp_path, "train", live=False)
    assert isinstance(chart, Chart)
    x = chart.spec["spec"]["encoding"]["x"]
    assert x["axis"] == STEP_AXIS == {"tickMinStep": 1, "format": "d"} and chart.spec["spec"]["mark"]["point"]
