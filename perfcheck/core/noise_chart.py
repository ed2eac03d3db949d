"""The HTML report's A/A plot: per runner class and deciding metric, each A/A run's estimate of
head/base − 1 with its interval, over time, against the budget.

Pure, like perfcheck/core/charts.py, whose escaping and frame it uses: workload names and runner
classes come from the history store, so every one is XML-escaped and de-linked.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from perfcheck.core.charts import svg_frame, xml_text
from perfcheck.core.noise import WorkloadRun, metric_label

_W, _H = 760, 280
_LEFT, _RIGHT, _TOP, _BOTTOM = 64, 150, 40, 44
# One colour per workload, in the order of their names; more workloads than colours repeat them.
_PALETTE = ("#3b73b9", "#e39a2d", "#2e8b57", "#8e44ad", "#c0392b", "#16a085", "#7f8c8d")
_BUDGET = "#d1453b"


@dataclass(frozen=True)
class Point:
    """One workload's estimate in one A/A run, in percent; ``x`` is the run's place in time."""

    x: int
    workload: str
    change_pct: float
    low_pct: float
    high_pct: float
    failed: bool


@dataclass(frozen=True)
class SpreadSeries:
    """What one plot shows: a runner class, a metric and its points, oldest run first."""

    runner_class: str
    metric: str
    points: tuple[Point, ...]
    budget_pct: float  # the newest run's
    first: str
    last: str


def series(runs: Sequence[WorkloadRun]) -> list[SpreadSeries]:
    """The A/A runs as one series per (runner class, deciding metric), sorted by both; runs are
    placed on the x axis in time order, the runs of one review at one place."""
    groups: dict[tuple[str, str], list[tuple[tuple[str, int], WorkloadRun, int]]] = {}
    for run in runs:
        for i, e in enumerate(run.estimates):
            groups.setdefault((run.runner_class, e.metric), []).append(
                ((run.recorded_at, run.review_id), run, i)
            )
    out = []
    for (klass, metric), items in sorted(groups.items()):
        order = sorted({key for key, _, _ in items})
        place = {key: n for n, key in enumerate(order)}
        items.sort(key=lambda item: (item[0], item[1].workload))
        points = []
        for key, run, i in items:
            e = run.estimates[i]
            points.append(
                Point(
                    place[key],
                    run.workload,
                    (e.ratio - 1) * 100,
                    (e.ratio_low - 1) * 100,
                    e.high_pct,
                    run.outcome == "fail",
                )
            )
        newest = items[-1][1].estimates[items[-1][2]]
        out.append(SpreadSeries(klass, metric, tuple(points), newest.budget_pct, order[0][0], order[-1][0]))
    return out


def svg_aa_spread(s: SpreadSeries) -> str:
    """Points with interval whiskers, a zero line and the budget's line (dashed): a point above
    the budget on an unchanged tree is noise the budget does not allow for."""
    label = f"A/A {metric_label(s.metric)} on {s.runner_class}: head/base − 1 per run, with its interval"
    top = max([s.budget_pct, *(max(abs(p.low_pct), abs(p.high_pct)) for p in s.points)]) * 1.15 or 1.0
    plot_w, plot_h = _W - _LEFT - _RIGHT, _H - _TOP - _BOTTOM
    runs = max(p.x for p in s.points) + 1

    def x_of(n: int) -> float:
        return _LEFT + (plot_w * (n + 0.5) / runs)

    def y_of(pct: float) -> float:
        return _TOP + plot_h * (top - pct) / (2 * top)

    body = [f'<text x="0" y="16" font-weight="bold">{xml_text(label)}</text>']
    for pct in (top / 1.15, 0.0, -top / 1.15):
        y = y_of(pct)
        body.append(f'<text x="{_LEFT - 6}" y="{y + 4:.1f}" text-anchor="end">{pct:+.1f} %</text>')
    body.append(
        f'<line x1="{_LEFT}" y1="{y_of(0):.1f}" x2="{_LEFT + plot_w}" y2="{y_of(0):.1f}" stroke="#555" />'
    )
    yb = y_of(s.budget_pct)
    body += [
        f'<line x1="{_LEFT}" y1="{yb:.1f}" x2="{_LEFT + plot_w}" y2="{yb:.1f}" stroke="{_BUDGET}" '
        'stroke-dasharray="5 4" />',
        f'<text x="{_LEFT + plot_w - 4}" y="{yb - 5:.1f}" text-anchor="end" fill="{_BUDGET}">'
        f"budget +{s.budget_pct:g} %</text>",
    ]
    names = sorted({p.workload for p in s.points})
    colour = {w: _PALETTE[i % len(_PALETTE)] for i, w in enumerate(names)}
    # Workloads of one run sit side by side around its place, so their whiskers do not overlap.
    width = plot_w / runs
    for p in s.points:
        offset = (names.index(p.workload) - (len(names) - 1) / 2) * min(8.0, width / (len(names) + 1))
        x = x_of(p.x) + offset
        tip = f"{p.workload}: {p.change_pct:+.2f} % ({p.low_pct:+.2f} … {p.high_pct:+.2f})" + (
            " · failed: a false alarm" if p.failed else ""
        )
        ring = f' stroke="{_BUDGET}" stroke-width="2"' if p.failed else ""
        body += [
            f'<line x1="{x:.1f}" y1="{y_of(p.high_pct):.1f}" x2="{x:.1f}" y2="{y_of(p.low_pct):.1f}" '
            f'stroke="{colour[p.workload]}" />',
            f'<circle cx="{x:.1f}" cy="{y_of(p.change_pct):.1f}" r="3.5" fill="{colour[p.workload]}"{ring}>'
            f"<title>{xml_text(tip)}</title></circle>",
        ]
    for i, w in enumerate(names[:8]):
        ly = _TOP + 30 + i * 18
        body += [
            f'<rect x="{_LEFT + plot_w + 6}" y="{ly - 10}" width="10" height="10" fill="{colour[w]}" />',
            f'<text x="{_LEFT + plot_w + 20}" y="{ly}"><title>{xml_text(w)}</title>'
            f"{xml_text(w[:18] + ('…' if len(w) > 18 else ''))}</text>",
        ]
    axis_y = _TOP + plot_h + 18
    plural = "s" if runs != 1 else ""
    body += [
        f'<text x="{_LEFT}" y="{axis_y}">{xml_text(s.first[:10])}</text>',
        f'<text x="{_LEFT + plot_w}" y="{axis_y}" text-anchor="end">{xml_text(s.last[:10])}</text>',
        f'<text x="{_LEFT + plot_w / 2:.1f}" y="{axis_y + 16}" text-anchor="middle">'
        f"{runs} A/A run{plural}, oldest first</text>",
    ]
    return svg_frame(_W, _H, label, body)
