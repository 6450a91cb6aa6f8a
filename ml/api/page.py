"""The dashboard page (``/``) and its self-refreshing panels (``/dashboard/panels``), rendered with Jinja2.

The page is static HTML plus a small inline script: every ``REFRESH_S`` seconds it fetches
the panels fragment (status, chart specs, attempts table, all rendered here on the server),
swaps it in and draws each chart's Vega-Lite spec (``ml.api.vega``) with vega-embed, only
when the spec changed (a chart whose rows alone changed gets them through ``view.data``); the
buttons POST to the control endpoints. Scripts come from ``/static/vendor/``: nothing is
loaded from the network.
"""

from __future__ import annotations

import json
from typing import Any

from jinja2 import Environment, PackageLoader, select_autoescape

from ml.api.control import LoopController
from ml.api.readers import RepoView, sampled_share
from ml.api.status import generation_label, loop_status
from ml.api.vega import DATA, Chart, composition_chart, curve_charts, elo_chart, generation_data, winrate_chart
from ml.base.io import JSONObject

REFRESH_S = 3
"""Seconds between two refreshes of the panels."""

_env = Environment(loader=PackageLoader("ml.api", "templates"), autoescape=select_autoescape(["html"]))
_env.filters["gen"] = generation_label  # {{ 7 | gen }} -> gen 007, as in the commits


def _ppo_share(share: dict[str, float]) -> float | None:
    total = sum(share.values())
    return share.get("ppo", 0.0) / total if total else None


def attempt_rows(view: RepoView) -> list[JSONObject]:
    """Rows of the attempts table, newest first: verdict, headline figures, PPO share and commit."""
    rows = []
    for e in view.history_with_commits(include_metrics=True):
        f = e.get("figures") or {}
        rows.append({
            "attempt_id": e.get("attempt_id"), "generation": e.get("generation"), "attempt": e.get("attempt"),
            "verdict": e.get("verdict"), "win_rate": f.get("win_rate"), "low": f.get("win_rate_low"),
            "high": f.get("win_rate_high"), "eval_games": f.get("eval_games"), "holdout_accuracy": f.get("holdout_accuracy"),
            "drop": f.get("holdout_accuracy_drop"), "ppo_share": _ppo_share(sampled_share(e)), "wall_s": e.get("wall_s"),
            "commit": e.get("commit"), "reasons": e.get("reasons") or [],
        })  # fmt: skip
    return rows[::-1]


def _chart(c: Chart) -> dict[str, Any]:
    return {"id": c.id, "title": c.title, "spec_json": json.dumps(c.spec, allow_nan=False), "live": c.live}


def charts(view: RepoView, running_stage: str | None) -> JSONObject:
    """The page's charts (``ml.api.vega``), each as ``id``, ``title``, ``spec_json``, ``live``."""
    params, history = view.params(), view.eval_history()
    rows = generation_data(view.root, history, view.elo_history())
    target = getattr(params.gate, "target_win_rate", None) if params else None
    parity = 1.0 / params.game.pod_size if params else None
    current = {str(k): float(v) for k, v in (view.train_metrics().get("train/sampled_share") or {}).items()}
    return {
        "winrate_chart": _chart(winrate_chart(rows, target, parity)),
        "elo_chart": _chart(elo_chart(rows)),
        "composition_chart": _chart(composition_chart(history, current)),
        "curve_charts": [_chart(c) for c in curve_charts(view.root, running_stage)],
    }


def panels_context(view: RepoView, controller: LoopController) -> JSONObject:
    """Everything the panels template shows."""
    status = loop_status(view, controller)
    return {"status": status, **charts(view, status.get("stage")), "rows": attempt_rows(view)}


def render_panels(view: RepoView, controller: LoopController) -> str:
    """The ``/dashboard/panels`` HTML fragment."""
    return _env.get_template("panels.html").render(**panels_context(view, controller))


def render_page(view: RepoView, controller: LoopController, token_required: bool, controls_enabled: bool) -> str:
    """The whole dashboard page, with the panels already in it.

    Args:
        view: the repository.
        controller: its loop controller.
        token_required: show a token field (the server was started with ``--token``).
        controls_enabled: False when control requests are refused (non-loopback bind, no token).
    """
    return _env.get_template("dashboard.html").render(
        panels=render_panels(view, controller),
        repo=str(view.root),
        refresh_ms=REFRESH_S * 1000,
        data_name=DATA,
        token_required=token_required,
        controls_enabled=controls_enabled,
    )
