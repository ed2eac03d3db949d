"""Render a Review into the PR comment with Jinja2 templates (the project's own folder first)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from statistics import median
from typing import Any

import jinja2

from perfcheck.bot import markdown
from perfcheck.bot.charts import mermaid_step_chart
from perfcheck.bot.matrix import Entry, details, resolve, title
from perfcheck.bot.timing_gate import METRIC_LABELS, peak_memory, side_figure
from perfcheck.schema import (
    DdpVariantMetrics,
    DeviceStep,
    Environment,
    MetricChange,
    ProbeResult,
    Review,
    TimingChange,
    TimingMetrics,
    WorkloadReview,
)

MARKER = "<!-- perfcheck:review -->"
COMMENT_LIMIT = 65536  # GitHub's limit on an issue comment body
_ICONS = {"pass": "✅", "fail": "❌", "inconclusive": "⚠️"}


def templates_dir() -> Path:
    from perfcheck import templates

    return Path(templates.__file__).resolve().parent


@dataclass(frozen=True)
class Row:
    metric: str
    base: str
    head: str
    delta: str


def _by_probe(results: list[ProbeResult]) -> dict[str, ProbeResult]:
    return {r.probe: r for r in results}


def _status(r: ProbeResult | None) -> str | None:
    if r is None:
        return "—"
    return None if r.status == "ok" else r.status


def _pct(base: float, head: float) -> str:
    if base <= 0:
        return ""
    return f"{(head - base) / base * 100:+.0f} %"


def delta_cell(m: MetricChange) -> str:
    return f"{m.change_pct:+.1f} % ({m.low_pct:+.1f} … {m.high_pct:+.1f})"


def _count(x: float) -> str:
    return f"{x:,.0f}" if float(x).is_integer() else f"{x:,.1f}"


def _timing_rows(bt: ProbeResult | None, ht: ProbeResult | None, change: TimingChange | None) -> list[Row]:
    """Every figure is the geometric mean over a side's processes, the estimator Δ is computed from,
    so base → head and Δ always agree; the row that decided the verdict says so."""
    b = bt.timing if bt else None
    h = ht.timing if ht else None
    if b is None and h is None:
        return [Row("step time", _status(bt) or "—", _status(ht) or "—", "")]
    src = h or b
    assert src is not None
    changes: dict[str, MetricChange] = {m.metric: m for m in change.metrics} if change else {}

    def cell(t: TimingMetrics | None, r: ProbeResult | None, value: float | None, unit: str = " ms") -> str:
        if t is None or value is None:
            return _status(r) or "—"
        return f"{value:,.3f}{unit}"

    def label(name: str, detail: str = "") -> str:
        m = changes.get(name)
        role = ""
        if m is not None:
            role = " · decides" if m.decides else " · context"
        return f"{METRIC_LABELS[name]}{detail}{role}"

    rows: list[Row] = []
    gpu = any(p.device is not None for t in (b, h) if t for p in t.processes)
    compiled = f"{src.mode}{', ' + src.backend if src.backend else ''}"
    if gpu:
        dev = side_figure(b, "device_ms"), side_figure(h, "device_ms")
        m = changes.get("device_ms")
        rows.append(
            Row(label("device_ms"), cell(b, bt, dev[0]), cell(h, ht, dev[1]), delta_cell(m) if m else "")
        )
    bound = ""
    if change is not None and change.bound != "cpu":
        bound = f"; {change.bound}-bound, GPU busy {change.gpu_busy_pct:.0f} %"
    wall = side_figure(b, "step_ms"), side_figure(h, "step_ms")
    m = changes.get("step_ms")
    rows.append(
        Row(
            label("step_ms", f" ({compiled}{bound})"),
            cell(b, bt, wall[0]),
            cell(h, ht, wall[1]),
            delta_cell(m) if m else "",
        )
    )
    if gpu:
        host = side_figure(b, "host_ms"), side_figure(h, "host_ms")
        m = changes.get("host_ms")
        rows.append(
            Row(label("host_ms"), cell(b, bt, host[0]), cell(h, ht, host[1]), delta_cell(m) if m else "")
        )
        rows += _count_rows(b, h, bt, ht, change)

    def per_s(t: TimingMetrics | None, ms: float | None) -> str:
        return f"{t.batch_size / ms * 1000:,.0f} /s" if t and ms else "—"

    rows.append(Row("throughput", per_s(b, wall[0]), per_s(h, wall[1]), ""))
    bp, hp = peak_memory(b), peak_memory(h)
    if b and h and bp is not None and hp is not None:
        kind = "peak memory" if b.memory_kind == "cuda_max_allocated" else "peak RSS"
        rows.append(Row(kind, f"{bp:,.0f} MB", f"{hp:,.0f} MB", f"{hp - bp:+,.0f} MB"))
    return rows


def _count_rows(
    b: TimingMetrics | None,
    h: TimingMetrics | None,
    bt: ProbeResult | None,
    ht: ProbeResult | None,
    change: TimingChange | None,
) -> list[Row]:
    """Kernels, copies and fills per step: exact counts, so a difference is a difference."""

    def per_side(t: TimingMetrics | None, get: Callable[[DeviceStep], float]) -> float | None:
        values = [get(p.device) for p in t.processes if p.device is not None] if t else []
        return median(values) if values else None

    def diff(x: float | None, y: float | None) -> str:
        if x is None or y is None:
            return ""
        return "=" if x == y else f"{y - x:+,g}"

    rows = []
    kb, kh = per_side(b, lambda d: d.kernels), per_side(h, lambda d: d.kernels)
    decides = " · decides" if change is not None and change.bound == "host" and change.kernels_exact else ""
    rows.append(
        Row(
            f"kernels / step{decides}",
            _count(kb) if kb is not None else (_status(bt) or "—"),
            _count(kh) if kh is not None else (_status(ht) or "—"),
            diff(kb, kh),
        )
    )
    for name, n, nbytes in (
        ("memcpy", lambda d: d.memcpy, lambda d: d.memcpy_bytes),
        ("memset", lambda d: d.memset, lambda d: d.memset_bytes),
    ):
        cb, ch = per_side(b, n), per_side(h, n)
        if not cb and not ch:
            continue
        bb, bh = per_side(b, nbytes), per_side(h, nbytes)
        rows.append(
            Row(
                f"{name} / step",
                f"{_count(cb or 0)} ({_bytes(bb or 0)})",
                f"{_count(ch or 0)} ({_bytes(bh or 0)})",
                diff(cb, ch),
            )
        )
    return rows


def _bytes(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1024 or unit == "GB":
            return f"{n:,.0f} {unit}" if unit == "B" else f"{n:,.1f} {unit}"
        n /= 1024
    return f"{n:,.1f} GB"


def _ddp_rows(bd: ProbeResult | None, hd: ProbeResult | None) -> list[Row]:
    def variants(r: ProbeResult | None) -> dict[str, DdpVariantMetrics]:
        return {v.variant: v for v in r.ddp.variants} if r and r.ddp else {}

    bv, hv = variants(bd), variants(hd)
    world = (hd or bd).ddp.world_size if (hd or bd) and (hd or bd).ddp else "?"  # type: ignore[union-attr]
    rows: list[Row] = []
    for name in [*bv, *[n for n in hv if n not in bv]]:
        b, h = bv.get(name), hv.get(name)

        def cell(v: DdpVariantMetrics | None, r: ProbeResult | None) -> str:
            if v is None:
                return _status(r) or "—"
            if v.error:
                return "fails"
            overlap = f", {v.comm_overlap_pct:.0f} % hidden" if v.comm_overlap_pct is not None else ""
            calls = sum(c.count for c in v.collectives)
            step = f"{v.step_ms:.1f} ms" if v.step_ms is not None else "—"
            graphs = ""
            if v.variant != "eager":
                breaks = sum(g.count for g in v.graph_breaks)
                graphs = f", {v.graph_count} graph{'s' if v.graph_count != 1 else ''}"
                graphs += f" ({breaks} break{'s' if breaks != 1 else ''}, {v.ddp_splits} DDP splits)"
            return f"{step}{graphs}, {calls} collectives{overlap}"

        ranks = f"{world} rank{'s' if world != 1 else ''}"
        rows.append(Row(f"DDP {name} ({ranks})", cell(b, bd), cell(h, hd), ""))
    return rows


def workload_rows(wl: WorkloadReview) -> list[Row]:
    b, h = _by_probe(wl.base), _by_probe(wl.head)
    rows: list[Row] = []
    if "timing" in b or "timing" in h:
        rows += _timing_rows(b.get("timing"), h.get("timing"), wl.timing)
    bc, hc = b.get("compile"), h.get("compile")
    if bc or hc:
        bm = bc.compile if bc else None
        hm = hc.compile if hc else None

        def cell(r: ProbeResult | None, value: str | None) -> str:
            return _status(r) or (value if value is not None else "—")

        rows.append(
            Row(
                "graphs / breaks",
                cell(bc, f"{bm.graph_count} / {bm.graph_break_count}" if bm else None),
                cell(hc, f"{hm.graph_count} / {hm.graph_break_count}" if hm else None),
                f"{hm.graph_break_count - bm.graph_break_count:+d} breaks"
                if bm and hm and hm.graph_break_count != bm.graph_break_count
                else ("=" if bm and hm else ""),
            )
        )
        rows.append(
            Row(
                "recompiles",
                cell(bc, str(bm.recompile_count) if bm else None),
                cell(hc, str(hm.recompile_count) if hm else None),
                f"{hm.recompile_count - bm.recompile_count:+d}"
                if bm and hm and hm.recompile_count != bm.recompile_count
                else ("=" if bm and hm else ""),
            )
        )
        rows.append(
            Row(
                f"cold compile ({(hm or bm).backend})" if (hm or bm) else "cold compile",
                cell(bc, f"{bm.cold_compile_s:.2f} s" if bm else None),
                cell(hc, f"{hm.cold_compile_s:.2f} s" if hm else None),
                _pct(bm.cold_compile_s, hm.cold_compile_s) if bm and hm else "",
            )
        )
    bd, hd = b.get("ddp"), h.get("ddp")
    if bd or hd:
        rows += _ddp_rows(bd, hd)
    ba, ha = b.get("amp"), h.get("amp")
    if ba or ha:

        def fp32(r: ProbeResult | None) -> str:
            if r is None or r.amp is None:
                return _status(r) or "—"
            return f"{sum(o.count for o in r.amp.fp32_ops)} fp32 / {r.amp.low_precision_ops} {r.amp.dtype}"

        dtype = next((r.amp.dtype for r in (ha, ba) if r and r.amp), "low precision")
        rows.append(Row(f"matmul/conv ops under {dtype} autocast", fp32(ba), fp32(ha), ""))
    bo, ho = b.get("custom_ops"), h.get("custom_ops")
    if bo or ho:

        def passing(r: ProbeResult | None) -> str:
            if r is None or r.custom_ops is None:
                return _status(r) or "—"
            ops = r.custom_ops.ops
            return f"{sum(o.ok for o in ops)} of {len(ops)} pass"

        rows.append(Row("custom ops (opcheck)", passing(bo), passing(ho), ""))
    be, he = b.get("export"), h.get("export")
    if be or he:
        bx = be.export if be else None
        hx = he.export if he else None

        def ir(r: ProbeResult | None) -> str:
            if r is None:
                return "—"
            if r.status == "failed":
                return "fails"
            if r.export is None or r.export.graph_sha256 is None:
                return r.status
            return f"{r.export.graph_sha256[:10]} ({sum(r.export.op_counts.values())} ops)"

        same = bx is not None and hx is not None and bx.graph_sha256 and bx.graph_sha256 == hx.graph_sha256
        rows.append(Row("export IR", ir(be), ir(he), "=" if same else ("changed" if bx and hx else "")))
    return rows


def environment_line(base: Environment | None, head: Environment | None) -> str:
    def describe(env: Environment) -> str:
        parts = []
        if env.gpu_name:
            parts.append(f"{env.gpu_count}× {env.gpu_name}")
            if env.driver:
                parts.append(f"driver {env.driver}")
            if env.cuda:
                parts.append(f"CUDA {env.cuda}")
        else:
            parts.append(f"CPU {env.cpu}" if env.cpu else "CPU")
        parts.append(f"torch {env.torch}")
        if env.triton:
            parts.append(f"triton {env.triton}")
        parts.append(f"Python {env.python}")
        return " · ".join(parts)

    if base is None and head is None:
        return "unknown (no probe finished)"
    if base is None or head is None or base == head:
        return describe(base or head) + (" — same on both sides" if base == head else "")  # type: ignore[arg-type]
    return f"base: {describe(base)}; head: {describe(head)}"


def _environment(results: list[ProbeResult]) -> Environment | None:
    return next((r.environment for r in results if r.environment is not None), None)


def headline(review: Review) -> str:
    errors = sum(f.severity == "error" and f.ack is None for f in review.findings)
    warnings = sum(f.severity == "warning" and f.ack is None for f in review.findings)
    acked = sum(f.ack is not None for f in review.findings)
    if review.verdict == "fail":
        words = f"{errors} regression{'s' if errors != 1 else ''}"
    elif review.verdict == "inconclusive":
        words = "inconclusive"
    else:
        words = "no regressions"
    if warnings:
        words += f" · {warnings} warning{'s' if warnings != 1 else ''}"
    if acked:
        words += f" · {acked} acknowledged"
    return words


def _side_name(info_tree: str, revision: str | None) -> str:
    return revision[:7] if revision else Path(info_tree).name


def template_env(custom: Path | None) -> jinja2.Environment:
    folders = [str(custom)] if custom is not None else []
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader([*folders, str(templates_dir())]),
        undefined=jinja2.StrictUndefined,
        autoescape=False,  # Markdown, not HTML: every untrusted value goes through the filters below
        keep_trailing_newline=True,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters.update(
        text=markdown.text,
        cell=markdown.cell,
        code=markdown.code,
        block=markdown.block,
        cell_code=lambda v: markdown.code(v, in_table=True),
    )
    return env


def review_context(review: Review, matrix: dict[str, Entry] | None = None) -> dict[str, Any]:
    """What every template of the review gets: verdict, names, tables, findings with their matrix entry."""
    return {
        "review": review,
        "icon": _ICONS[review.verdict],
        "headline": headline(review),
        "base_name": _side_name(review.base.tree, review.base.revision),
        "head_name": _side_name(review.head.tree, review.head.revision),
        "workloads": [{"name": wl.name, "rows": workload_rows(wl)} for wl in review.workloads],
        "findings": [
            {
                "n": i,
                "f": f,
                "title": title(f.category, matrix),
                "entry": resolve(f, matrix),
                "details": details(f, matrix),
            }
            for i, f in enumerate(review.findings, start=1)
        ],
        "chart": mermaid_step_chart(review),
        "environment": environment_line(
            review.base.environment or _environment([r for wl in review.workloads for r in wl.base]),
            review.head.environment or _environment([r for wl in review.workloads for r in wl.head]),
        ),
    }


def render_comment(
    review: Review,
    template_dir: Path | None = None,
    report_pointer: str = "",
    limit: int = COMMENT_LIMIT,
    matrix: dict[str, Entry] | None = None,
) -> str:
    body = (
        template_env(template_dir)
        .get_template("comment.md.j2")
        .render(marker=MARKER, **review_context(review, matrix))
    )
    pointer = (
        report_pointer or "The comment was cut to fit GitHub's limit; the full review is in `result.json`."
    )
    return markdown.cap(body, limit, pointer)
