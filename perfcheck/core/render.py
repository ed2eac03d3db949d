"""Render a Review into the PR comment with Jinja2 templates (the project's own folder first)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import jinja2

from perfcheck.core import markdown, probes
from perfcheck.core.bisect import markdown as bisect_markdown
from perfcheck.core.causes import Grouped, grouped
from perfcheck.core.charts import mermaid_step_chart
from perfcheck.core.explain import own_words
from perfcheck.core.matrix import Entry, details, figure, resolve, title, where_of
from perfcheck.core.probes.kind import Row
from perfcheck.core.probes.profile import trace_files
from perfcheck.measures import Environment
from perfcheck.schema import ProbeResult, Review, ReviewCosts, WorkloadReview

MARKER = "<!-- perfcheck:review -->"
COMMENT_LIMIT = 65536  # GitHub's limit on an issue comment body
_ICONS = {"pass": "✅", "fail": "❌", "inconclusive": "⚠️"}


def templates_dir() -> Path:
    from perfcheck import templates

    return Path(templates.__file__).resolve().parent


def workload_rows(wl: WorkloadReview) -> list[Row]:
    """The workload's table: each probe's rows, in the registry's order."""
    b, h = {r.probe: r for r in wl.base}, {r.probe: r for r in wl.head}
    rows: list[Row] = []
    for kind in probes.kinds():
        if kind.rows is not None and (kind.name in b or kind.name in h):
            rows += kind.rows(b.get(kind.name), h.get(kind.name), wl)
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


def cost_line(costs: list[ReviewCosts]) -> str:
    """Where the probes' time went against the budget, in one line: each kind of step (the last
    part of its name) with how many ran and what they took; a step not run says so."""
    if not costs:
        return ""
    spent = max(c.spent_s for c in costs)  # shards run side by side
    budget = costs[0].budget_s
    groups: dict[str, list[float]] = {}
    skipped: dict[str, int] = {}
    reused: dict[str, int] = {}
    for step in (s for c in costs for s in c.steps):
        kind = step.step.rsplit(" · ", 1)[-1]
        if step.reused:
            reused[kind] = reused.get(kind, 0) + 1
        elif step.spent_s is None:
            skipped[kind] = skipped.get(kind, 0) + 1
        else:
            groups.setdefault(kind, []).append(step.spent_s)
    parts = [
        f"{kind} {times[0]:.0f} s"
        if len(times) == 1
        else f"{kind} {len(times)} × {sum(times) / len(times):.0f} s"
        for kind, times in groups.items()
    ]
    parts += [f"{kind} not run" + (f" ×{n}" if n > 1 else "") for kind, n in skipped.items()]
    parts += [f"base's {kind} reused" + (f" ×{n}" if n > 1 else "") for kind, n in reused.items()]
    shards = f" over {len(costs)} shards" if len(costs) > 1 else ""
    return f"{spent:.0f} s of the {budget:g} s budget{shards}: " + ", ".join(parts)


def reuse_line(review: Review) -> str:
    """What of base was not probed in this run but taken from a recorded run of the same content,
    configuration and environment (perfcheck/runner/reuse/store.py), one sentence per recording run."""
    runs: dict[tuple[str | None, str | None], tuple[dict[str, None], dict[str, None], int]] = {}
    for wl in review.workloads:
        for r in wl.base:
            if r.reused_from is None:
                continue
            where = (r.reused_from.commit, r.reused_from.run)
            probes_, names, files = runs.get(where, ({}, {}, 0))
            probes_[r.probe] = None
            names[wl.name] = None
            runs[where] = (probes_, names, max(files, r.reused_from.files))
    lines = []
    for (commit, run), (probes_, names, files) in runs.items():
        of = f" of {commit[:7]}" if commit else ""
        run_id = f" (run {run})" if run else ""
        workloads = f" for {len(names)} workloads" if len(names) > 1 else ""
        lines.append(
            f"Base reused: {', '.join(probes_)}{workloads} from the default-branch run{of}{run_id}, "
            f"same content ({files} file{'s' if files != 1 else ''}), configuration and environment"
        )
    return " · ".join(lines)


def _environment(results: list[ProbeResult]) -> Environment | None:
    return next((r.environment for r in results if r.environment is not None), None)


def headline(review: Review, groups: list[Grouped] | None = None) -> str:
    """The review in one line, counting what changed by cause: one cause with its effects is one
    regression ("1 cause: the new graph break at model.py:17 — step +12.0 %, compile +30.1 %"),
    however many findings say it. Plain text; it holds probe text, so every report escapes it."""
    groups = grouped(review) if groups is None else groups
    failing = [g for g in groups if g.state == "error"]
    warnings = sum(g.state == "warning" for g in groups)
    acked = sum(g.state == "acknowledged" for g in groups)
    if review.verdict == "fail" and len(failing) == 1 and failing[0].accepted_cause:
        words = failing[0].summary()  # what fails is the effects of a cause the team accepted
    elif review.verdict == "fail" and len(failing) == 1:
        words = f"1 {'cause' if failing[0].group.caused else 'regression'}: {failing[0].summary()}"
    elif review.verdict == "fail":
        words = f"{len(failing)} regressions"
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
        command=markdown.command,
        block=markdown.block,
        cell_code=lambda v: markdown.code(v, in_table=True),
    )
    return env


def _groups(review: Review, groups: list[Grouped], items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The findings' items grouped by cause, as the reports show them: each group's first lead
    (the cause, or the finding alone) with the workloads it was met in, and its effects with their
    figures, their own words and the verify commands that differ from the cause's."""
    out = []
    for n, g in enumerate(groups, start=1):
        leads = [items[i] for i in g.group.leads]
        lead = leads[0]
        said = lead["entry"].verify[0] if lead["entry"] and lead["entry"].verify else None
        effects = []
        for i in g.group.effects:
            item, f = items[i], review.findings[i]
            verify = item["entry"].verify[0] if item["entry"] and item["entry"].verify else None
            effects.append(
                {
                    **item,
                    "figure": figure(f) or "",
                    "words": own_words(f),
                    "verify": verify if verify != said else None,
                    # Which of the workload's findings explain it: the group says so already.
                    "details": [d for d in item["details"] if d.text != f.evidence.get("explained_by")],
                }
            )
        # One line per command: effects that one command verifies share it.
        checks: dict[str, list[str]] = {}
        for e in effects:
            if e["verify"]:
                label = e["title"] + (f" ({e['f'].workload})" if len(g.workloads) > 1 else "")
                checks.setdefault(e["verify"], []).append(label)
        out.append(
            {
                "n": n,
                "checks": [{"what": ", ".join(dict.fromkeys(t)), "command": c} for c, t in checks.items()],
                "caused": g.group.caused,
                "phrase": g.group.title,
                "state": g.state,
                "workloads": g.workloads,
                "summary": g.summary(),
                "lead": lead,
                # The cause met in other workloads: named in one line where it reads the same there.
                "also_same": [o["f"].workload for o in leads[1:] if o["f"].message == lead["f"].message],
                "also": [o for o in leads[1:] if o["f"].message != lead["f"].message],
                "effects": effects,
            }
        )
    return out


def review_context(review: Review, matrix: dict[str, Entry] | None = None) -> dict[str, Any]:
    """What every template of the review gets: verdict, names, tables, findings with their matrix
    entry, and the same findings grouped by cause (``groups``, as the built-in templates show them)."""
    where = where_of(review, trace_files(review))
    items = [
        {
            "n": i,
            "f": f,
            "title": title(f.category, matrix),
            "where": f"{f.location.path}:{f.location.line}" if f.location else "",
            "entry": resolve(f, matrix, where),
            "details": details(f, matrix),
        }
        for i, f in enumerate(review.findings, start=1)
    ]
    groups = grouped(review)
    said = headline(review, groups)
    return {
        "review": review,
        "icon": _ICONS[review.verdict],
        # It holds probe text (a cause's phrase): escaped for Markdown here, so that a project's own
        # template printing it as it is stays inert; the HTML report escapes ``headline_plain``.
        "headline": markdown.cell(said),
        "headline_plain": said,
        "base_name": _side_name(review.base.tree, review.base.revision),
        "head_name": _side_name(review.head.tree, review.head.revision),
        "workloads": [{"name": wl.name, "rows": workload_rows(wl)} for wl in review.workloads],
        "findings": items,
        "groups": _groups(review, groups, items),
        # The same groups as read against the findings, for the reports that count by them.
        "grouped": groups,
        "chart": mermaid_step_chart(review),
        # Built of escaped cells (core.bisect.markdown); the document came from the probe job, so
        # it is shown as unverified, with the commands that check it.
        "bisect": bisect_markdown(review.bisect, from_probe_job=True) if review.bisect else "",
        "cost": cost_line(review.costs),
        "reused": reuse_line(review),
        "cuts": [cut for c in review.costs for cut in c.cuts],
        # What the review ran with that its printed commands leave out (core.matrix ``printable``).
        "withheld": list(where.withheld),
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
    noise: Sequence[str] = (),
) -> str:
    """``noise``: the footer's lines on the gate's measured A/A rates on this runner
    (history.noise_footer), read from the history store where the caller has one."""
    body = (
        template_env(template_dir)
        .get_template("comment.md.j2")
        .render(marker=MARKER, noise=list(noise), **review_context(review, matrix))
    )
    pointer = (
        report_pointer or "The comment was cut to fit GitHub's limit; the full review is in `result.json`."
    )
    return markdown.cap(body, limit, pointer)
