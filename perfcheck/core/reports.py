"""The reports people read besides the PR comment: the check run's summary, the Actions job summary
and a self-contained HTML report. Each is a Jinja template the project's own folder can override.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jinja2
from markupsafe import Markup

from perfcheck.core import charts, markdown
from perfcheck.core.matrix import Entry
from perfcheck.core.probes.export import ExportMetrics
from perfcheck.core.probes.timing import delta_cell
from perfcheck.core.render import review_context, template_env, templates_dir
from perfcheck.core.timing_gate import headline_metric, side_figure, throughput_figures
from perfcheck.schema import (
    CompileMetrics,
    Finding,
    ProbeResult,
    Review,
    TimingMetrics,
    WorkloadReview,
    probe_metrics,
)

CHECK_SUMMARY_LIMIT = 65535  # GitHub's limit on a check run's output.summary
JOB_SUMMARY_LIMIT = 1024 * 1024  # GitHub's limit on one step's job summary
_POINTER = "Cut to fit GitHub's limit; the full review is in `result.json` and the HTML report."


@dataclass(frozen=True)
class SummaryRow:
    """One workload on one line of the check summary's table."""

    workload: str
    step: str
    delta: str
    graphs: str
    recompiles: str
    export: str
    findings: str


def _where(f: Finding) -> str:
    if f.location is None:
        return ""
    return f"{f.location.path}:{f.location.line}"


def _probe(results: list[ProbeResult], name: str) -> ProbeResult | None:
    return next((r for r in results if r.probe == name), None)


def _pair(base: str | None, head: str | None) -> str:
    if base is None and head is None:
        return "—"
    if base == head:
        return f"{base} (=)"
    return f"{base or '—'} → {head or '—'}"


def _status_or(r: ProbeResult | None, value: str | None) -> str | None:
    if r is None:
        return None
    return value if r.status == "ok" and value is not None else r.status


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 or word == "acknowledged" else f"{n} {word}s"


def summary_row(wl: WorkloadReview, findings: list[Finding]) -> SummaryRow:
    bt, ht = _probe(wl.base, "timing"), _probe(wl.head, "timing")

    figures = throughput_figures(probe_metrics(bt, TimingMetrics), probe_metrics(ht, TimingMetrics))
    metric = figures[0] if figures else "step_ms"

    def step(r: ProbeResult | None) -> str | None:
        value = side_figure(probe_metrics(r, TimingMetrics), metric)
        return _status_or(r, f"{value:.3f} ms" if value is not None else None)

    headline = headline_metric(wl.timing) if wl.timing else None
    delta = delta_cell(headline) if headline is not None else "—"
    bc, hc = _probe(wl.base, "compile"), _probe(wl.head, "compile")

    def graphs(r: ProbeResult | None) -> str | None:
        m = probe_metrics(r, CompileMetrics)
        return _status_or(r, f"{m.graph_count}/{m.graph_break_count}" if m else None)

    def recompiles(r: ProbeResult | None) -> str | None:
        m = probe_metrics(r, CompileMetrics)
        return _status_or(r, str(m.recompile_count) if m else None)

    be, he = _probe(wl.base, "export"), _probe(wl.head, "export")

    def ir(r: ProbeResult | None) -> str | None:
        x = probe_metrics(r, ExportMetrics)
        return _status_or(r, x.graph_sha256[:10] if x and x.graph_sha256 else None)

    base_ir, head_ir = ir(be), ir(he)
    export = "—" if base_ir is None and head_ir is None else ("=" if base_ir == head_ir else "changed")
    mine = [f for f in findings if f.workload == wl.name]
    # Acknowledged findings no longer fail the check, so they are counted apart.
    # The comment's word for an error-severity finding, so the report and the comment count alike.
    words = {"error": "regression", "warning": "warning"}
    counts = [(sum(f.severity == s and f.ack is None for f in mine), words[s]) for s in ("error", "warning")]
    counts.append((sum(f.ack is not None for f in mine), "acknowledged"))
    return SummaryRow(
        workload=wl.name,
        step=_pair(step(bt), step(ht)),
        delta=delta,
        graphs=_pair(graphs(bc), graphs(hc)),
        recompiles=_pair(recompiles(bc), recompiles(hc)),
        export=export,
        findings=", ".join(_plural(n, s) for n, s in counts if n) or "none",
    )


def _context(review: Review, matrix: dict[str, Entry] | None) -> dict[str, Any]:
    """The PR comment's context, plus where each finding is, its details and a one-row summary."""
    context = review_context(review, matrix)
    for item in context["findings"]:
        item["where"] = _where(item["f"])
    for row, wl in zip(context["workloads"], review.workloads, strict=True):
        row["summary"] = summary_row(wl, review.findings)
    return context


def render_check_summary(
    review: Review,
    template_dir: Path | None = None,
    limit: int = CHECK_SUMMARY_LIMIT,
    matrix: dict[str, Entry] | None = None,
) -> str:
    body = template_env(template_dir).get_template("check-summary.md.j2").render(**_context(review, matrix))
    return markdown.cap(body, limit, _POINTER)


def render_job_summary(
    review: Review,
    template_dir: Path | None = None,
    limit: int = JOB_SUMMARY_LIMIT,
    matrix: dict[str, Entry] | None = None,
) -> str:
    body = template_env(template_dir).get_template("job-summary.md.j2").render(**_context(review, matrix))
    return markdown.cap(body, limit, _POINTER)


def _inert(value: object) -> object:
    """Jinja's finalize: every printed value is escaped and de-linked unless a chart made it."""
    if isinstance(value, Markup):
        return value
    return Markup(charts.xml_text("" if value is None else value))


_CODE_SPAN = re.compile(r"`([^`]+)`")


def _code_spans(value: object) -> Markup:
    """The matrix's Markdown code spans (`x`) as <code>, everything else escaped."""
    return Markup(_CODE_SPAN.sub(r"<code>\1</code>", str(_inert(value))))


def _html_env(custom: Path | None) -> jinja2.Environment:
    folders = [str(custom)] if custom is not None else []
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader([*folders, str(templates_dir())]),
        undefined=jinja2.StrictUndefined,
        autoescape=True,
        finalize=_inert,
        keep_trailing_newline=True,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["code_spans"] = _code_spans
    return env


def _html_charts(review: Review, heatmap: dict[tuple[str, str], int] | None) -> dict[str, Any]:
    # The chart functions escape every name they draw, so their SVG is marked safe here and only here.
    counts = heatmap if heatmap is not None else charts.break_counts(review)
    steps = charts.step_figures(review)
    return {
        "heatmap": Markup(charts.svg_heatmap(counts)) if counts else None,
        "steps": steps,
        "kernels": {
            name: Markup(charts.svg_kernel_deltas(d, title=f"{name}: per-kernel time change per step"))
            for name, d in charts.kernel_deltas(review).items()
        },
        "breakdowns": {
            name: Markup(charts.svg_breakdown(b, h, title=f"{name}: GPU time breakdown, % of kernel span"))
            for name, (b, h) in charts.breakdowns(review).items()
        },
    }


def render_html(
    review: Review,
    heatmap: dict[tuple[str, str], int] | None = None,
    template_dir: Path | None = None,
    matrix: dict[str, Entry] | None = None,
) -> str:
    """One self-contained HTML file; ``heatmap`` is the history store's break counts when there is one,
    else the review's own new breaks are drawn."""
    template = _html_env(template_dir).get_template("report.html.j2")
    return template.render(**_context(review, matrix), charts=_html_charts(review, heatmap))
