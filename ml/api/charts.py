"""Server-side SVG charts for the dashboard (no JavaScript library, nothing loaded from the network).

Every element a test may look for has a stable class and data attributes:

* win-rate chart ``svg#winrate-chart``: one ``circle.winrate-point`` per generation with
  ``data-generation``, ``data-win-rate``, ``data-low``, ``data-high``, ``data-verdict``,
  ``data-attempt-id``; its interval is ``line.winrate-interval``; the gate threshold
  ``line.winrate-threshold``;
* Elo chart ``svg#elo-chart``: ``circle.elo-point`` (``data-generation``, ``data-elo``,
  ``data-low``, ``data-high``), ``line.elo-reference`` for the anchor players, or
  ``text.chart-note`` when there is nothing to draw;
* composition pies ``svg.composition-pie`` (``data-generation`` or ``data-current="true"``):
  one ``.pie-slice`` per source with ``data-source`` (``sim``, ``ppo``) and ``data-share``.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from html import escape
from typing import Any

WIDTH, HEIGHT = 640, 260
MARGIN_L, MARGIN_R, MARGIN_T, MARGIN_B = 56, 96, 16, 38
"""The right margin holds the labels of the reference lines."""
SOURCE_COLOURS = {"sim": "#4e79a7", "ppo": "#f28e2b"}
"""Teacher (``sim``) and PPO (``ppo``) colours; other sources take ``OTHER_COLOURS`` in order."""
OTHER_COLOURS = ("#59a14f", "#b07aa1", "#76b7b2", "#edc948", "#9c755f")
SOURCE_LABELS = {"sim": "teacher", "ppo": "PPO"}
VERDICT_COLOURS = {"accepted": "#2e7d32", "rejected": "#c62828"}
ELO_KEYS = {
    "y": ("elo", "rating"),
    "low": ("elo_low", "rating_low", "ci_low", "low"),
    "high": ("elo_high", "rating_high", "ci_high", "high"),
}
"""Accepted key names in ``state/elo_history.json`` rows (``ml.ratings`` writes ``elo``, ``low``, ``high``)."""
GENERATION_PLAYER = re.compile(r"gen(\d+)")
"""Rating-table player names of the generations' students (``ml.ratings``: ``gen003``)."""


@dataclass
class Point:
    """One point with a vertical interval; ``attrs`` become ``data-*`` attributes of its circle."""

    x: float
    y: float
    low: float | None = None
    high: float | None = None
    colour: str = "#4e79a7"
    tooltip: str = ""
    attrs: dict[str, Any] = field(default_factory=dict)


def _attrs(attrs: Mapping[str, Any]) -> str:
    return "".join(f' data-{escape(k)}="{escape(_fmt(v))}"' for k, v in attrs.items() if v is not None)


def _fmt(v: Any) -> str:
    return f"{v:.6g}" if isinstance(v, float) else str(v)


def nice_ticks(lo: float, hi: float, count: int = 5) -> list[float]:
    """About ``count`` round tick values covering [lo, hi] (steps of 1, 2 or 5 times a power of ten)."""
    span = hi - lo if hi > lo else 1.0
    raw = span / max(1, count)
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 5, 10) if m * mag >= raw)
    start = math.floor(lo / step) * step
    return [round(start + i * step, 10) for i in range(math.ceil((hi - start) / step) + 1)]


PLOT_W, PLOT_H = WIDTH - MARGIN_L - MARGIN_R, HEIGHT - MARGIN_T - MARGIN_B


@dataclass(frozen=True)
class _Frame:
    """Data-to-pixel scales of one chart: x over [x_lo, x_hi] (5% inset each side), y over [lo, hi]."""

    x_lo: float
    x_hi: float
    lo: float
    hi: float

    def sx(self, x: float) -> float:
        if self.x_hi == self.x_lo:
            return MARGIN_L + PLOT_W / 2
        return MARGIN_L + (x - self.x_lo) / (self.x_hi - self.x_lo) * PLOT_W * 0.9 + PLOT_W * 0.05

    def sy(self, y: float) -> float:
        return MARGIN_T + (self.hi - y) / (self.hi - self.lo) * PLOT_H


def _frame(points: list[Point], hlines: list[tuple[float, str, str]], y_range: tuple[float, float] | None) -> _Frame:
    ys = [v for p in points for v in (p.y, p.low, p.high) if v is not None] + [y for y, _, _ in hlines]
    lo, hi = y_range or (min(ys), max(ys))
    if not y_range:
        pad = (hi - lo) * 0.1 or max(1.0, abs(hi) * 0.05)
        lo, hi = lo - pad, hi + pad
    return _Frame(points[0].x, points[-1].x, lo, hi)


def _axes(f: _Frame, points: list[Point], y_label: str) -> list[str]:
    out = ['<g class="axes" font-size="11" fill="#555">']
    for t in (t for t in nice_ticks(f.lo, f.hi) if f.lo <= t <= f.hi):
        y = f.sy(t)
        out.append(f'<line class="grid" x1="{MARGIN_L}" x2="{WIDTH - MARGIN_R}" y1="{y:.1f}" y2="{y:.1f}" stroke="#e5e5e5"/>')
        out.append(f'<text x="{MARGIN_L - 6}" y="{y + 4:.1f}" text-anchor="end">{t:g}</text>')
    for p in points:
        out.append(f'<text x="{f.sx(p.x):.1f}" y="{HEIGHT - MARGIN_B + 16}" text-anchor="middle">{p.x:g}</text>')
    out.append(f'<text x="{MARGIN_L + PLOT_W / 2}" y="{HEIGHT - 4}" text-anchor="middle">generation</text>')
    mid = -(MARGIN_T + PLOT_H / 2)
    out.append(f'<text transform="rotate(-90)" x="{mid}" y="14" text-anchor="middle">{escape(y_label)}</text></g>')
    return out


def _reference_lines(f: _Frame, hlines: list[tuple[float, str, str]]) -> list[str]:
    out = []
    for value, css, label in hlines:
        y = f.sy(value)
        out.append(
            f'<line class="{css}" x1="{MARGIN_L}" x2="{WIDTH - MARGIN_R}" y1="{y:.1f}" y2="{y:.1f}" stroke="#999" stroke-dasharray="5 4"/>'
        )
        out.append(
            f'<text class="{css}-label" x="{WIDTH - MARGIN_R + 4}" y="{y + 4:.1f}" font-size="11" fill="#777">{escape(label)}</text>'
        )
    return out  # fmt: skip


def _marks(f: _Frame, points: list[Point], point_class: str) -> list[str]:
    prefix = point_class.removesuffix("-point")
    line = " ".join(f"{f.sx(p.x):.1f},{f.sy(p.y):.1f}" for p in points)
    out = [f'<polyline class="{prefix}-line" points="{line}" fill="none" stroke="#4e79a7" stroke-width="1.5"/>']
    for p in points:
        cx, data = f.sx(p.x), _attrs(p.attrs)
        if p.low is not None and p.high is not None:
            out.append(
                f'<line class="{prefix}-interval"{data} x1="{cx:.1f}" x2="{cx:.1f}" y1="{f.sy(p.low):.1f}" y2="{f.sy(p.high):.1f}" stroke="{p.colour}" stroke-width="2"/>'
            )
            for yy in (f.sy(p.low), f.sy(p.high)):
                out.append(
                    f'<line x1="{cx - 5:.1f}" x2="{cx + 5:.1f}" y1="{yy:.1f}" y2="{yy:.1f}" stroke="{p.colour}" stroke-width="2"/>'
                )
        out.append(
            f'<circle class="{point_class}"{data} cx="{cx:.1f}" cy="{f.sy(p.y):.1f}" r="5" fill="{p.colour}"><title>{escape(p.tooltip)}</title></circle>'
        )
    return out  # fmt: skip


def interval_chart(
    chart_id: str,
    points: list[Point],
    *,
    point_class: str,
    y_label: str,
    y_range: tuple[float, float] | None = None,
    hlines: Iterable[tuple[float, str, str]] = (),
    empty_note: str = "no data yet",
) -> str:
    """A line chart of points with 95% interval bars over generations (x), as an ``<svg>`` string.

    Args:
        chart_id: the svg's id.
        points: the points, any order (drawn sorted by x).
        point_class: class of each point's circle (``winrate-point``); its bar is ``winrate-interval``
            and the line through the points ``winrate-line``.
        y_label: axis title.
        y_range: fixed (min, max) of the y axis; None fits the data and the reference lines.
        hlines: (y, css class, label) reference lines, labelled in the right margin.
        empty_note: text of the ``text.chart-note`` shown when ``points`` is empty.
    """
    head = f'<svg id="{chart_id}" class="chart" viewBox="0 0 {WIDTH} {HEIGHT}" role="img" aria-label="{escape(y_label)}" xmlns="http://www.w3.org/2000/svg">'
    if not points:
        return f'{head}<text class="chart-note" x="{WIDTH / 2}" y="{HEIGHT / 2}" text-anchor="middle">{escape(empty_note)}</text></svg>'
    points = sorted(points, key=lambda p: p.x)
    hlines = list(hlines)
    frame = _frame(points, hlines, y_range)
    body = [*_axes(frame, points, y_label), *_reference_lines(frame, hlines), *_marks(frame, points, point_class)]
    return head + "".join(body) + "</svg>"  # fmt: skip


def winrate_chart(per_generation: list[dict], target: float | None, pod_size: int | None) -> str:
    """Gate win rate with its interval, one point per generation (``readers.per_generation`` entries).

    Args:
        per_generation: one eval-history entry per generation.
        target: the gate's target win rate (``gate.target_win_rate``, SPRT H1), drawn as ``line.winrate-threshold``.
        pod_size: players per pod; parity ``1 / pod_size`` is drawn as ``line.winrate-parity``.
    """
    points = []
    for e in per_generation:
        f = e.get("figures") or {}
        if f.get("win_rate") is None:
            continue
        verdict = str(e.get("verdict", ""))
        points.append(Point(
            x=int(e["generation"]), y=float(f["win_rate"]), low=f.get("win_rate_low"), high=f.get("win_rate_high"),
            colour=VERDICT_COLOURS.get(verdict, "#4e79a7"),
            tooltip=f"generation {e['generation']} ({e.get('attempt_id')}): {verdict}, win rate {f['win_rate']:.3f} "
            f"[{f.get('win_rate_low', float('nan')):.3f}, {f.get('win_rate_high', float('nan')):.3f}] on {f.get('eval_games')} games",
            attrs={"generation": int(e["generation"]), "attempt-id": e.get("attempt_id"), "verdict": verdict,
                   "win-rate": float(f["win_rate"]), "low": f.get("win_rate_low"), "high": f.get("win_rate_high")},
        ))  # fmt: skip
    hlines = []
    if target is not None:
        hlines.append((target, "winrate-threshold", f"gate target {target:g}"))
    if pod_size:
        hlines.append((1 / pod_size, "winrate-parity", f"parity 1/{pod_size}"))
    return interval_chart(
        "winrate-chart", points, point_class="winrate-point", y_label="gate win rate (95% interval)",
        y_range=(0.0, math.ceil(max([0.5] + [p.high or p.y for p in points]) * 10) / 10), hlines=hlines,
        empty_note="no finished attempt yet",
    )  # fmt: skip


def _pick(entry: Mapping[str, Any], keys: tuple[str, ...]) -> float | None:
    for k in keys:
        if isinstance(entry.get(k), int | float):
            return float(entry[k])
    return None


def _elo_point(generation: int, row: Mapping[str, Any], player: str | None = None) -> Point | None:
    y = _pick(row, ELO_KEYS["y"])
    if y is None:
        return None
    low, high = _pick(row, ELO_KEYS["low"]), _pick(row, ELO_KEYS["high"])
    span = f" [{low:.0f}, {high:.0f}]" if low is not None and high is not None else ""
    return Point(
        x=generation, y=y, low=low, high=high, tooltip=f"{player or f'generation {generation}'}: Elo {y:.0f}{span}",
        attrs={"generation": generation, "player": player, "elo": y, "low": low, "high": high, "games": row.get("games")},
    )  # fmt: skip


def elo_series(raw: Any) -> tuple[list[Point], list[tuple[float, str, str]], str]:
    """Points, reference lines and a caption from ``state/elo_history.json``.

    Two shapes are read: the ratings stage's list of refits, each with a ``table`` of
    ``{player, elo, low, high, games}`` rows (the last refit is drawn: players ``genNNN``
    become points at generation NNN, other players such as the heuristic anchor become
    reference lines), or a flat list of ``{generation, elo, elo_low, elo_high}`` entries.
    """
    entries = [e for e in (raw if isinstance(raw, list) else []) if isinstance(e, dict)]
    refits = [e for e in entries if e.get("table")]
    if refits:
        last = refits[-1]
        points: list[Point] = []
        lines: list[tuple[float, str, str]] = []
        for row in last["table"]:
            player = str(row.get("player", ""))
            match = GENERATION_PLAYER.fullmatch(player)
            if match:
                point = _elo_point(int(match[1]), row, player)
                points += [point] if point else []
            elif (elo := _pick(row, ELO_KEYS["y"])) is not None:
                lines.append((elo, "elo-reference", f"{player} {elo:.0f}"))
        caption = f"latest refit, after {last.get('attempt_id')} ({last.get('games')} games); 95% intervals"
        return points, lines, caption
    points = [p for e in entries if isinstance(e.get("generation"), int) for p in [_elo_point(e["generation"], e)] if p]
    return points, [], "95% intervals" if points else ""


def elo_chart(raw: Any) -> tuple[str, str]:
    """The Elo line chart (``svg#elo-chart``) and its caption; an empty chart with a note when there is no rating."""
    points, lines, caption = elo_series(raw)
    note = (
        "no Elo ratings yet (state/elo_history.json is absent)" if not raw else "no Elo points in state/elo_history.json yet"
    )
    svg = interval_chart("elo-chart", points, point_class="elo-point", y_label="Elo", hlines=lines, empty_note=note)
    return svg, caption


def source_colour(source: str, order: int) -> str:
    return SOURCE_COLOURS.get(source, OTHER_COLOURS[order % len(OTHER_COLOURS)])


def pie_chart(shares: Mapping[str, float], *, title: str, attrs: Mapping[str, Any], size: int = 120) -> str:
    """A pie of source shares (``train/sampled_share``: source -> fraction) as an ``<svg class="composition-pie">``.

    A source with the whole share is a full ``circle.pie-slice``; otherwise each slice is a ``path.pie-slice``.
    """
    r, c = size / 2 - 4, size / 2
    width = size + 60  # room for the caption and the legend under the pie
    out = [
        f'<svg class="composition-pie"{_attrs(attrs)} viewBox="-30 0 {width} {size + 34}" width="{width}" height="{size + 34}" xmlns="http://www.w3.org/2000/svg">'
    ]
    total = sum(v for v in shares.values() if v > 0)
    if total <= 0:
        out.append(
            f'<circle cx="{c}" cy="{c}" r="{r}" fill="#eee"/><text x="{c}" y="{c}" text-anchor="middle" font-size="11" class="chart-note">no data</text>'
        )
    angle = -math.pi / 2
    for i, (source, share) in enumerate(sorted(shares.items())):
        if share <= 0:
            continue
        frac = share / total
        colour = source_colour(source, i)
        data = f' data-source="{escape(source)}" data-share="{share:.6g}"'
        tip = f"<title>{escape(SOURCE_LABELS.get(source, source))}: {frac:.1%}</title>"
        if frac >= 0.9999:
            out.append(f'<circle class="pie-slice"{data} cx="{c}" cy="{c}" r="{r}" fill="{colour}">{tip}</circle>')
            continue
        end = angle + frac * 2 * math.pi
        x0, y0, x1, y1 = c + r * math.cos(angle), c + r * math.sin(angle), c + r * math.cos(end), c + r * math.sin(end)
        large = 1 if frac > 0.5 else 0
        d = f"M{c},{c} L{x0:.2f},{y0:.2f} A{r},{r} 0 {large} 1 {x1:.2f},{y1:.2f} Z"
        out.append(f'<path class="pie-slice"{data} d="{d}" fill="{colour}" stroke="#fff" stroke-width="1">{tip}</path>')
        angle = end
    out.append(f'<text x="{c}" y="{size + 12}" text-anchor="middle" font-size="12">{escape(title)}</text>')
    legend = (
        ", ".join(f"{SOURCE_LABELS.get(s, s)} {v / total:.0%}" for s, v in sorted(shares.items()) if v > 0)
        if total > 0
        else ""
    )
    out.append(f'<text x="{c}" y="{size + 28}" text-anchor="middle" font-size="11" fill="#555">{escape(legend)}</text></svg>')
    return "".join(out)  # fmt: skip
