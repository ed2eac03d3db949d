"""Charts of a Review: a Mermaid block GitHub renders, and self-made inline SVG for the HTML report.

Pure functions from data to text. Every name in a chart (workloads, kernels, break types) comes
from PR code, so Mermaid labels are reduced to a safe alphabet and SVG text is XML-escaped; the
SVG carries no links, scripts, fonts or namespaces that would point outside the file.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from html import escape
from typing import Any, Literal, TypeVar

from pydantic import BaseModel

from perfcheck.core import break_depth
from perfcheck.core.markdown import visible
from perfcheck.core.matrix import of_chart
from perfcheck.core.probes.profile import TraceMetrics
from perfcheck.core.timing_gate import throughput_figures
from perfcheck.core.trace.diff import diff_times
from perfcheck.core.trace.names import short_name
from perfcheck.measures import TimingMetrics
from perfcheck.schema import ProbeResult, Review, probe_metrics
from perfcheck.sweep_schema import SweepReport

M = TypeVar("M", bound=BaseModel)

# Mermaid has no escape syntax inside quoted labels, so anything outside this set becomes a space:
# no quote, bracket, backtick, percent (directives) or newline can reach the block.
_MERMAID_UNSAFE = re.compile(r"[^\w .+\-/]")
_MERMAID_LABEL_MAX = 40

_FONT = 'font-family="system-ui, sans-serif" font-size="12"'
_SLOWER, _FASTER, _NEUTRAL = "#d1453b", "#2e8b57", "#8a8a8a"
UNKNOWN_BREAK = "(unknown)"  # the label perfcheck/core/history.py stores for a break without a type
_SEGMENTS = (("idle", "#b8b8b8"), ("compute", "#3b73b9"), ("non-compute", "#e39a2d"))


@dataclass(frozen=True)
class KernelDelta:
    """One kernel (or CPU op) in microseconds per step; None where a side does not run it."""

    name: str
    base_us: float | None
    head_us: float | None

    @property
    def delta_us(self) -> float:
        return (self.head_us or 0.0) - (self.base_us or 0.0)

    @property
    def status(self) -> str:
        if self.base_us is None:
            return "added"
        return "removed" if self.head_us is None else "changed"


@dataclass(frozen=True)
class Split:
    """The temporal breakdown of one side's profile: shares of the kernel span, in percent."""

    idle_pct: float
    compute_pct: float
    non_compute_pct: float


def _measured(results: Sequence[ProbeResult], model: type[M]) -> M | None:
    """The metrics of the first result whose probe measures in ``model``: a chart reads the
    figures it draws by what they are, not by which probe (a plugin's too) measured them."""
    return next((m for r in results if (m := probe_metrics(r, model)) is not None), None)


def _num(x: float) -> str:
    # Fixed decimals keep goldens stable and avoid the exponent notation Mermaid cannot parse.
    return f"{x:.3f}".rstrip("0").rstrip(".") or "0"


# ---------------------------------------------------------------- data pulled out of a review


def step_figures(review: Review) -> list[tuple[str, float, float]]:
    """(workload, base ms, head ms) of the headline throughput figure (device time on a GPU, the
    wall-clock step on a CPU) for every workload timed on both sides."""
    out = []
    for wl in review.workloads:
        figures = throughput_figures(_measured(wl.base, TimingMetrics), _measured(wl.head, TimingMetrics))
        if figures is not None:
            out.append((wl.name, *figures[1:]))
    return out


def _float_or_none(x: Any) -> float | None:
    # Finding evidence is untrusted, loosely typed JSON: anything not a number counts as absent.
    return float(x) if isinstance(x, int | float) and not isinstance(x, bool) else None


def _from_evidence(evidence: Mapping[str, Any]) -> list[KernelDelta]:
    changes = evidence.get("changes")
    if not isinstance(changes, list):
        return []
    out = []
    for c in changes:
        if isinstance(c, dict) and isinstance(c.get("name"), str):
            b, h = _float_or_none(c.get("base_us")), _float_or_none(c.get("head_us"))
            if b is not None or h is not None:
                out.append(KernelDelta(c["name"], b, h))
    return out


def _from_traces(base: TraceMetrics, head: TraceMetrics) -> list[KernelDelta]:
    def per_step(t: TraceMetrics) -> dict[str, float]:
        return {k.name: k.total_us / t.steps for k in t.kernels}

    return [
        KernelDelta(c.name, c.base_us, c.head_us)
        for c in diff_times(per_step(base), per_step(head))
        if c.status != "same"
    ]


def kernel_deltas(review: Review) -> dict[str, list[KernelDelta]]:
    """Per workload, the kernel time changes, largest first: the evidence of a finding whose
    category feeds this chart (the profile's kernel mix) where there is one (it is what the review
    reported), else the profile traces."""
    out: dict[str, list[KernelDelta]] = {}
    feeding = of_chart("kernel_deltas")
    for f in review.findings:
        if f.category in feeding:
            deltas = _from_evidence(f.evidence)
            if deltas:
                out.setdefault(f.workload, deltas)
    for wl in review.workloads:
        if wl.name in out:
            continue
        b, h = _measured(wl.base, TraceMetrics), _measured(wl.head, TraceMetrics)
        if b and h:
            deltas = _from_traces(b, h)
            if deltas:
                out[wl.name] = deltas
    return {name: sorted(d, key=lambda k: (-abs(k.delta_us), k.name)) for name, d in out.items()}


def _split(t: TraceMetrics | None) -> Split | None:
    if t is None or t.idle_pct is None or t.compute_pct is None or t.non_compute_pct is None:
        return None
    return Split(t.idle_pct, t.compute_pct, t.non_compute_pct)


def breakdowns(review: Review) -> dict[str, tuple[Split | None, Split | None]]:
    """Per workload with a profile breakdown on either side: (base, head)."""
    out = {}
    for wl in review.workloads:
        pair = (_split(_measured(wl.base, TraceMetrics)), _split(_measured(wl.head, TraceMetrics)))
        if pair != (None, None):
            out[wl.name] = pair
    return out


HeatmapBy = Literal["type", "depth"]
HEATMAP_BY: tuple[HeatmapBy, ...] = ("type", "depth")
HEATMAP_TITLES: dict[HeatmapBy, str] = {
    "type": "graph breaks by workload and break type",
    "depth": "graph breaks by workload and nesting depth (blocks around the line in its function)",
}


def break_counts(review: Review, by: HeatmapBy = "type") -> dict[tuple[str, str], int]:
    """(workload, break type or nesting depth) -> the findings of this review whose category feeds
    the heatmap (new graph breaks): its input when there is no history store. Findings are
    counted, not break sites, as the history store counts."""
    out: dict[tuple[str, str], int] = {}
    feeding = of_chart("break_heatmap")
    for f in review.findings:
        if f.category not in feeding:
            continue
        if by == "depth":
            row = break_depth.heatmap_row(f.evidence.get("nesting_depth"))
        else:
            kind = f.evidence.get("break_type")
            row = kind if isinstance(kind, str) and kind else UNKNOWN_BREAK
        key = (f.workload, row)
        out[key] = out.get(key, 0) + 1
    return out


# ---------------------------------------------------------------- Mermaid


def _mermaid_label(text: str) -> str:
    label = " ".join(_MERMAID_UNSAFE.sub(" ", text).split())[:_MERMAID_LABEL_MAX].strip()
    return f'"{label or "?"}"'


def mermaid_step_chart(review: Review) -> str | None:
    """A fenced ``xychart-beta`` block: base step time as bars, head as a line (two bar series would
    overlap and hide the shorter one). None when no workload was timed on both sides."""
    rows = step_figures(review)
    if not rows:
        return None
    labels = ", ".join(_mermaid_label(name) for name, _, _ in rows)
    top = max(max(b, h) for _, b, h in rows)
    return "\n".join(
        [
            "```mermaid",
            "xychart-beta",
            '  title "step time (ms; device time on GPUs): bars base, line head"',
            f"  x-axis [{labels}]",
            f'  y-axis "ms" 0 --> {_num(top * 1.1)}',
            f"  bar [{', '.join(_num(b) for _, b, _ in rows)}]",
            f"  line [{', '.join(_num(h) for _, _, h in rows)}]",
            "```",
        ]
    )


# ---------------------------------------------------------------- SVG


_URL_SCHEME = re.compile(r"(?i)\b(https?|ftp)://")


def xml_text(text: object) -> str:
    """Text for HTML or SVG: escaped, and with no URL left in it.

    The colon as a character reference reads the same but is no URL: the SVG goes inline into
    a report that must not point outside itself. Control characters, which no HTML or XML text may
    hold, are shown as symbols, as in the comment."""
    return _URL_SCHEME.sub(r"\1&#58;//", escape(visible(str(text)), quote=True))


def _svg(width: int, height: int, label: str, body: list[str]) -> str:
    # No xmlns: inline SVG in HTML needs none, and the namespace is itself a URL.
    return "\n".join(
        [
            f'<svg width="{width}" height="{height}" viewBox="0 0 {width} {height}" role="img" '
            f'aria-label="{xml_text(label)}" {_FONT}>',
            f"<title>{xml_text(label)}</title>",
            *body,
            "</svg>",
        ]
    )


# The frame every inline chart of the report is drawn in, for the charts of other modules
# (perfcheck/core/noise_chart.py).
svg_frame = _svg


def _clip(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


def svg_kernel_deltas(deltas: Sequence[KernelDelta], top: int = 15, title: str = "") -> str:
    """Horizontal bars of head − base time per step around a zero line: right (red) slower on
    head, left (green) faster; added/removed kernels are marked."""
    shown = list(deltas[:top])
    label_w, plot_w, value_w, row_h, pad = 300, 340, 130, 22, 28
    width, height = label_w + plot_w + value_w, pad + row_h * max(len(shown), 1) + 8
    label = title or "per-kernel time change per step, head − base"
    body = [f'<text x="0" y="16" font-weight="bold">{xml_text(label)}</text>']
    if not shown:
        body.append(f'<text x="0" y="{pad + 14}">no kernel changed</text>')
        return _svg(width, height, label, body)
    scale = max(abs(d.delta_us) for d in shown) or 1.0
    zero = label_w + plot_w / 2
    body.append(f'<line x1="{zero:.1f}" y1="{pad - 4}" x2="{zero:.1f}" y2="{height - 6}" stroke="#555" />')
    for i, d in enumerate(shown):
        y = pad + i * row_h
        length = abs(d.delta_us) / scale * (plot_w / 2 - 4)
        x = zero if d.delta_us >= 0 else zero - length
        colour = _SLOWER if d.delta_us > 0 else (_FASTER if d.delta_us < 0 else _NEUTRAL)
        tag = {"added": " (new)", "removed": " (gone)"}.get(d.status, "")
        body += [
            f'<text x="{label_w - 6}" y="{y + 14}" text-anchor="end">'
            f"<title>{xml_text(d.name)}</title>{xml_text(_clip(short_name(d.name), 44))}</text>",
            f'<rect x="{x:.1f}" y="{y + 3}" width="{max(length, 1):.1f}" height="{row_h - 6}" '
            f'fill="{colour}" />',
            f'<text x="{label_w + plot_w + 6}" y="{y + 14}">{d.delta_us:+,.1f} us{xml_text(tag)}</text>',
        ]
    return _svg(width, height, label, body)


def svg_breakdown(base: Split | None, head: Split | None, title: str = "") -> str:
    """One 100 % bar per side, split into idle / compute / non-compute time."""
    label_w, plot_w, row_h, pad = 60, 640, 30, 28
    width, height = label_w + plot_w + 10, pad + 2 * row_h + 24
    label = title or "GPU time breakdown, % of the kernel span"
    body = [f'<text x="0" y="16" font-weight="bold">{xml_text(label)}</text>']
    for i, (side, split) in enumerate((("base", base), ("head", head))):
        y = pad + i * row_h
        body.append(f'<text x="0" y="{y + 18}">{side}</text>')
        if split is None:
            body.append(f'<text x="{label_w}" y="{y + 18}">not profiled</text>')
            continue
        x = float(label_w)
        shares = (split.idle_pct, split.compute_pct, split.non_compute_pct)
        for (name, colour), pct in zip(_SEGMENTS, shares, strict=True):
            w = plot_w * max(pct, 0.0) / 100
            body.append(
                f'<rect x="{x:.1f}" y="{y + 2}" width="{w:.1f}" height="{row_h - 6}" fill="{colour}">'
                f"<title>{side} {name} {pct:.1f} %</title></rect>"
            )
            if w > 44:
                at = f'x="{x + w / 2:.1f}" y="{y + 18}"'
                body.append(f'<text {at} text-anchor="middle" fill="#fff">{pct:.1f} %</text>')
            x += w
    legend_y = pad + 2 * row_h + 14
    for j, (name, colour) in enumerate(_SEGMENTS):
        lx = label_w + j * 130
        body += [
            f'<rect x="{lx}" y="{legend_y - 10}" width="12" height="12" fill="{colour}" />',
            f'<text x="{lx + 16}" y="{legend_y}">{name}</text>',
        ]
    return _svg(width, height, label, body)


def svg_heatmap(counts: Mapping[tuple[str, str], int], title: str = "") -> str:
    """Graph breaks as a grid: a row per break type (long, so it gets the wide left column) or
    nesting depth (``break_depth.heatmap_row``: they sort in depth order), a column per workload, darker for
    more breaks."""
    workloads = sorted({w for w, _ in counts})
    kinds = sorted({k for _, k in counts})
    label_w, cell_w, cell_h, pad = 330, 110, 26, 46
    width = label_w + cell_w * max(len(workloads), 1) + 10
    height = pad + cell_h * max(len(kinds), 1) + 8
    label = title or "graph breaks by workload and break type"
    body = [f'<text x="0" y="16" font-weight="bold">{xml_text(label)}</text>']
    if not counts:
        body.append(f'<text x="0" y="{pad}">no graph breaks</text>')
        return _svg(width, height, label, body)
    top = max(counts.values()) or 1
    for j, w in enumerate(workloads):
        cx = label_w + j * cell_w + cell_w / 2
        body.append(
            f'<text x="{cx:.1f}" y="{pad - 8}" text-anchor="middle"><title>{xml_text(w)}</title>'
            f"{xml_text(_clip(w, 16))}</text>"
        )
    for i, kind in enumerate(kinds):
        y = pad + i * cell_h
        body.append(
            f'<text x="{label_w - 6}" y="{y + 17}" text-anchor="end"><title>{xml_text(kind)}</title>'
            f"{xml_text(_clip(kind, 48))}</text>"
        )
        for j, w in enumerate(workloads):
            n = counts.get((w, kind), 0)
            # Opacity scaled to the busiest cell; an empty cell stays a faint outline.
            alpha = 0.15 + 0.85 * n / top if n else 0.0
            x = label_w + j * cell_w
            body.append(
                f'<rect x="{x + 1}" y="{y + 1}" width="{cell_w - 2}" height="{cell_h - 2}" '
                f'fill="{_SLOWER}" fill-opacity="{alpha:.2f}" stroke="#ddd" />'
            )
            if n:
                ink = "#fff" if alpha > 0.55 else "#222"
                mid = x + cell_w / 2
                body.append(f'<text x="{mid:.1f}" y="{y + 17}" text-anchor="middle" fill="{ink}">{n}</text>')
    return _svg(width, height, label, body)


# The sweep picture's geometry, in pixels.
_SWEEP_W, _SWEEP_H = 760, 460
_SWEEP_LEFT, _SWEEP_RIGHT, _SWEEP_TOP, _SWEEP_BOTTOM = 80, 40, 50, 70
_SWEEP_R_MIN, _SWEEP_R_MAX = 4.0, 14.0
_SWEEP_TICKS = 5


def _span(values: Sequence[float]) -> tuple[float, float]:
    lo, hi = min(values), max(values)
    pad = (hi - lo) * 0.1 or max(abs(hi) * 0.1, 1e-3)
    return max(lo - pad, 0.0), hi + pad


def _scale(lo: float, hi: float, out_lo: float, out_hi: float) -> tuple[float, float]:
    """Slope and offset of the linear map [lo, hi] -> [out_lo, out_hi]."""
    slope = (out_hi - out_lo) / (hi - lo)
    return slope, out_lo - lo * slope


def _radius(mb: float, lo: float, hi: float) -> float:
    # Area, not radius, grows with memory, so a point twice the memory does not look four times it.
    share = (mb - lo) / (hi - lo) if hi > lo else 0.5
    return _SWEEP_R_MIN + (_SWEEP_R_MAX - _SWEEP_R_MIN) * math.sqrt(share)


def _text(x: float, y: float, body: str, **attrs: str) -> str:
    extra = "".join(f' {k.replace("_", "-")}="{xml_text(v)}"' for k, v in attrs.items())
    return f'<text x="{x:.1f}" y="{y:.1f}"{extra}>{xml_text(body)}</text>'


def svg_sweep(report: SweepReport) -> str:
    """`perfcheck sweep`'s picture, a file of its own (so it names its namespace): step time against
    cold compile latency; marker area is memory; the Pareto front connected."""
    title = f"perfcheck sweep · {report.workload} · {report.backend} on {report.device}"
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{_SWEEP_W}" height="{_SWEEP_H}" '
        f'viewBox="0 0 {_SWEEP_W} {_SWEEP_H}" font-family="sans-serif" font-size="11">',
        f"<title>{xml_text(title)}</title>",
        f'<rect width="{_SWEEP_W}" height="{_SWEEP_H}" fill="white"/>',
        _text(_SWEEP_W / 2, 24, title, text_anchor="middle", font_size="14"),
    ]
    plotted = [p for p in report.points if p.measured]
    left, right, top, bottom = _SWEEP_LEFT, _SWEEP_W - _SWEEP_RIGHT, _SWEEP_TOP, _SWEEP_H - _SWEEP_BOTTOM
    if plotted:
        xs = [p.compile_s or 0.0 for p in plotted]
        ys = [p.step_ms or 0.0 for p in plotted]
        mbs = [p.peak_mb or 0.0 for p in plotted]
        (x_lo, x_hi), (y_lo, y_hi) = _span(xs), _span(ys)
        xa, xb = _scale(x_lo, x_hi, left, right)
        ya, yb = _scale(y_lo, y_hi, bottom, top)
        parts.append(
            f'<path d="M{left},{top} V{bottom} H{right}" fill="none" stroke="#444" stroke-width="1"/>'
        )
        for i in range(_SWEEP_TICKS + 1):
            xv, yv = x_lo + (x_hi - x_lo) * i / _SWEEP_TICKS, y_lo + (y_hi - y_lo) * i / _SWEEP_TICKS
            px, py = xa * xv + xb, ya * yv + yb
            parts.append(f'<path d="M{px:.1f},{bottom} v5 M{left},{py:.1f} h-5" stroke="#444"/>')
            parts.append(_text(px, bottom + 18, f"{xv:.3g}", text_anchor="middle"))
            parts.append(_text(left - 8, py + 4, f"{yv:.3g}", text_anchor="end"))
        parts.append(
            _text((left + right) / 2, _SWEEP_H - 28, "cold compile latency (s)", text_anchor="middle")
        )
        mid = (top + bottom) / 2
        parts.append(
            _text(18, mid, "step time (ms)", text_anchor="middle", transform=f"rotate(-90 18 {mid:.1f})")
        )
        front = sorted((p for p in plotted if p.pareto), key=lambda p: (p.compile_s, p.step_ms))
        if len(front) > 1:
            path = " ".join(
                f"{xa * (p.compile_s or 0) + xb:.1f},{ya * (p.step_ms or 0) + yb:.1f}" for p in front
            )
            parts.append(f'<polyline points="{path}" fill="none" stroke="#d9480f" stroke-width="1.5"/>')
        for p, x, y, mb in zip(plotted, xs, ys, mbs, strict=True):
            px, py, r = xa * x + xb, ya * y + yb, _radius(mb, min(mbs), max(mbs))
            fill = "#d9480f" if p.pareto else "#868e96"
            label = f"{p.point.label} · {mb:,.0f} MB"
            parts.append(
                f'<circle cx="{px:.1f}" cy="{py:.1f}" r="{r:.1f}" fill="{fill}" fill-opacity="0.75">'
                f"<title>{xml_text(label)}</title></circle>"
            )
            # Labels point inwards, so that those near the right edge stay inside the picture.
            if px > (left + right) / 2:
                parts.append(_text(px - r - 3, py - r / 2, label, text_anchor="end"))
            else:
                parts.append(_text(px + r + 3, py - r / 2, label))
    else:
        parts.append(_text(_SWEEP_W / 2, _SWEEP_H / 2, "no point was measured", text_anchor="middle"))
    missing = len(report.points) - len(plotted)
    if missing:
        note = f"{missing} point(s) not plotted (crashed, timed out or skipped); see the table"
        parts.append(_text(left, _SWEEP_H - 8, note))
    parts.append("</svg>")
    return "\n".join(parts) + "\n"
