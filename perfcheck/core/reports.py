"""The reports people read besides the PR comment: the check run's summary, the Actions job summary
and a self-contained HTML report. Each is a Jinja template the project's own folder can override.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jinja2
from markupsafe import Markup

from perfcheck.core import break_depth, charts, markdown, noise_chart, probes
from perfcheck.core.causes import Grouped
from perfcheck.core.matrix import Entry
from perfcheck.core.noise import WorkloadRun
from perfcheck.core.probes.kind import ProbeKind
from perfcheck.core.render import review_context, template_env, templates_dir
from perfcheck.schema import ProbeResult, Review, WorkloadReview

CHECK_SUMMARY_LIMIT = 65535  # GitHub's limit on a check run's output.summary
JOB_SUMMARY_LIMIT = 1024 * 1024  # GitHub's limit on one step's job summary
_POINTER = "Cut to fit GitHub's limit; the full review is in `result.json` and the HTML report."


@dataclass(frozen=True)
class SummaryRow:
    """One workload on one line of the overview table (the check summary, the HTML report): the
    cells of each probe's columns (``columns``), in their order, and its findings counted.

    A cell is also read by its column's key (``s.step``, ``s.graphs``): a project's own template
    written for the fixed columns of earlier versions keeps working, and a column whose probe ran
    in no workload reads "—"."""

    workload: str
    cells: tuple[str, ...]
    keys: tuple[str, ...]
    findings: str

    def __getattr__(self, key: str) -> str:
        if key.startswith("_") or key in ("cells", "keys"):  # not set yet: copying, unpickling
            raise AttributeError(key)
        if key in self.keys:
            return self.cells[self.keys.index(key)]
        if any(c.key == key for kind in probes.kinds() for c in kind.columns):
            return "—"
        raise AttributeError(key)


def _probe(results: list[ProbeResult], name: str) -> ProbeResult | None:
    return next((r for r in results if r.probe == name), None)


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 or word == "acknowledged" else f"{n} {word}s"


def overview_kinds(review: Review) -> list[ProbeKind]:
    """The probes with overview columns that ran (on either side) in any workload, in the
    registry's order."""
    ran = {r.probe for wl in review.workloads for r in [*wl.base, *wl.head]}
    return [k for k in probes.kinds() if k.columns and k.overview is not None and k.name in ran]


def summary_row(wl: WorkloadReview, groups: list[Grouped], kinds: list[ProbeKind]) -> SummaryRow:
    cells: list[str] = []
    keys: list[str] = []
    for kind in kinds:
        assert kind.overview is not None
        given = kind.overview(_probe(wl.base, kind.name), _probe(wl.head, kind.name), wl)
        cells += [given.get(c.key, "—") for c in kind.columns]
        keys += [c.key for c in kind.columns]
    # Counted as the headline counts: a cause with its effects is one, and one met here and in
    # another workload counts in both rows. Acknowledged groups no longer fail the check, so they
    # are counted apart; the comment's words, so the report and the comment count alike.
    states: list[str] = [g.state for g in groups if wl.name in g.workloads]
    words = {"error": "regression", "warning": "warning", "acknowledged": "acknowledged"}
    counts = [(states.count(s), word) for s, word in words.items()]
    return SummaryRow(
        workload=wl.name,
        cells=tuple(cells),
        keys=tuple(keys),
        findings=", ".join(_plural(n, s) for n, s in counts if n) or "none",
    )


def _context(review: Review, matrix: dict[str, Entry] | None) -> dict[str, Any]:
    """The PR comment's context, plus where each finding is, its details and a one-row summary."""
    context = review_context(review, matrix)
    kinds = overview_kinds(review)
    groups = context["grouped"]
    context["columns"] = [c for kind in kinds for c in kind.columns]
    for row, wl in zip(context["workloads"], review.workloads, strict=True):
        row["summary"] = summary_row(wl, groups, kinds)
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


def _html_charts(
    review: Review,
    heatmap: dict[tuple[str, str], int] | None,
    aa_runs: Sequence[WorkloadRun],
    heatmap_by: charts.HeatmapBy = "type",
) -> dict[str, Any]:
    # The chart functions escape every name they draw, so their SVG is marked safe here and only here.
    counts = heatmap if heatmap is not None else charts.break_counts(review, heatmap_by)
    steps = charts.step_figures(review)
    title = charts.HEATMAP_TITLES[heatmap_by]
    return {
        "heatmap": Markup(charts.svg_heatmap(counts, title)) if counts else None,
        # A table of text, escaped as the template prints it.
        "depths": break_depth.depth_table(review),
        "aa": [Markup(noise_chart.svg_aa_spread(s)) for s in noise_chart.series(aa_runs)],
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
    aa_runs: Sequence[WorkloadRun] | None = None,
    heatmap_by: charts.HeatmapBy = "type",
) -> str:
    """One self-contained HTML file; ``heatmap`` is the history store's break counts when there is one,
    else the review's own new breaks are drawn, by break type or by nesting depth (``heatmap_by``,
    which names the rows a given ``heatmap`` has); ``aa_runs``, the store's A/A runs, are plotted."""
    template = _html_env(template_dir).get_template("report.html.j2")
    drawn = _html_charts(review, heatmap, aa_runs or (), heatmap_by)
    return template.render(**_context(review, matrix), charts=drawn)
