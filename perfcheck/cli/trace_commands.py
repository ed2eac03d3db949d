"""`perfcheck trace summary FILE` and `perfcheck trace diff BASE HEAD`: profiler traces at a glance.

Torch-free, like the bot: it reads Kineto traces (.json or .json.gz) as data. Exit codes: 0 done,
2 a file that cannot be read as a trace (the message names it).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from perfcheck.cli.argtypes import positive
from perfcheck.core.markdown import visible

# The naming value of rows grouped by HTA's short name (perfcheck.core.trace.HTA_SHORT); spelled
# here so that building the parser imports no trace code.
HTA_SHORT = "hta-short"

if TYPE_CHECKING:
    from perfcheck.core.trace import Change, TraceSummary

EXIT_BAD_INPUT = 2
NAME_WIDTH = 60
DEFINITIONS = (
    "Figures follow HolisticTraceAnalysis: the last ProfilerStep is dropped; idle, compute and "
    "non-compute are shares of the span from the first to the last GPU kernel of the steps kept; "
    "overlap is the share of communication (NCCL) kernel time during which a compute kernel runs. "
    "Without GPU kernels (a CPU-only trace) the table lists CPU ops by self time."
)


def table(headers: Sequence[str], rows: Sequence[Sequence[str]], align: str) -> str:
    """Columns padded to their widest cell; ``align`` has an "l" or "r" per column (numbers: "r").

    Cells hold names a trace or a recorded review gave (a kernel's, a workload's): their control
    characters (a newline too, which would forge a row) are shown as symbols, never sent to the
    terminal."""
    rows = [[visible(c, one_line=True) for c in r] for r in rows]
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(headers)]

    def line(cells: Sequence[str]) -> str:
        padded = (
            c.rjust(w) if a == "r" else c.ljust(w) for c, w, a in zip(cells, widths, align, strict=True)
        )
        return "  ".join(padded).rstrip()

    rule = "  ".join("-" * w for w in widths)
    return "\n".join([line(headers), rule, *(line(r) for r in rows)])


def _us(x: float | None) -> str:
    return "—" if x is None else f"{x:,.1f}"


def _pct(x: float | None) -> str:
    return "—" if x is None else f"{x:.2f}"


def _what(s: TraceSummary) -> str:
    what = "GPU kernels" if s.on_gpu else "CPU ops (self time)"
    return f"{what} by HTA's short name (--short-names)" if s.naming == HTA_SHORT else what


def _shown(s: TraceSummary, name: str) -> str:
    """A row's name as a table shows it: a full name made readable, a short name as it is (it is
    the key that HTA's rows carry)."""
    from perfcheck.core.trace import clip, short_name

    return clip(name, NAME_WIDTH) if s.naming == HTA_SHORT else short_name(name, NAME_WIDTH)


def _step_list(ids: Sequence[int]) -> str:
    return ", ".join(map(str, ids)) if len(ids) <= 6 else f"{ids[0]}–{ids[-1]}"


def _steps(s: TraceSummary) -> str:
    if s.chosen:
        return f"profiler step{'s' if s.steps != 1 else ''} {_step_list(s.analysed)} analysed (--steps)"
    if s.last_step_dropped:
        return (
            f"{s.steps} profiler steps analysed ({_step_list(s.analysed)}; the last of {s.steps + 1} "
            "dropped, as HTA does)"
        )
    return f"{s.steps} profiler step{'s' if s.steps != 1 else ''}, whole trace analysed"


def render_summary(path: Path, s: TraceSummary, top: int) -> str:
    out = [visible(str(path), one_line=True), f"  {s.events:,} timed events · {_steps(s)} · {_what(s)}"]
    if s.breakdown is not None:
        b = s.breakdown
        out.append(
            f"  GPU time, % of the {b.span_us:,.0f} us kernel span: idle {_pct(b.idle_pct)} · "
            f"compute {_pct(b.compute_pct)} · non-compute {_pct(b.non_compute_pct)}"
        )
        out.append(f"  communication hidden behind compute: {_pct(s.comm_overlap_pct)} %")
    ops = s.ops
    total = sum(op.total_us for op in ops) or 1.0
    steps = max(s.steps, 1)
    grouped = s.naming == HTA_SHORT
    rows = [
        [
            _shown(s, op.name),
            op.kind,
            f"{op.count:,}",
            _us(op.total_us),
            _us(op.total_us / steps),
            f"{100 * op.total_us / total:.1f}",
            *([f"{op.variants:,}"] if grouped else []),
        ]
        for op in ops[:top]
    ]
    headers = ["name", "kind", "count", "total us", "us/step", "%", *(["full names"] if grouped else [])]
    out += ["", table(headers, rows, "llrrrrr" if grouped else "llrrrr")]
    if len(ops) > top:
        out.append(f"  … {len(ops) - top} more (--top)")
    return "\n".join(out)


def _breakdown_rows(base: TraceSummary, head: TraceSummary) -> list[list[str]]:
    def figures(s: TraceSummary) -> list[float | None]:
        b = s.breakdown
        return [
            b.idle_pct if b else None,
            b.compute_pct if b else None,
            b.non_compute_pct if b else None,
            s.comm_overlap_pct,
        ]

    labels = ["idle %", "compute %", "non-compute %", "comm hidden %"]
    rows = []
    for label, x, y in zip(labels, figures(base), figures(head), strict=True):
        delta = "—" if x is None or y is None else f"{y - x:+.2f}"
        rows.append([label, _pct(x), _pct(y), delta])
    return rows


def render_diff(base_path: Path, head_path: Path, base: TraceSummary, head: TraceSummary, top: int) -> str:
    from perfcheck.core.trace import diff_times

    changes: list[Change] = [c for c in diff_times(base.per_step(), head.per_step()) if c.status != "same"]
    counts = {s: sum(1 for c in changes if c.status == s) for s in ("added", "removed", "changed")}
    out = [
        visible(f"base {base_path}: {_steps(base)} · {_what(base)}", one_line=True),
        visible(f"head {head_path}: {_steps(head)} · {_what(head)}", one_line=True),
        f"  {counts['added']} added · {counts['removed']} removed · {counts['changed']} changed in time "
        "(per step, largest change first)",
    ]
    if base.breakdown is not None or head.breakdown is not None:
        out += ["", table(["GPU time", "base", "head", "Δ pp"], _breakdown_rows(base, head), "lrrr")]
    rows = [
        [c.status, _shown(head, c.name), _us(c.base_us), _us(c.head_us), f"{c.delta_us:+,.1f}"]
        for c in changes[:top]
    ]
    headers = ["change", "name", "base us/step", "head us/step", "Δ us/step"]
    out += ["", table(headers, rows, "llrrr")]
    if len(changes) > top:
        out.append(f"  … {len(changes) - top} more (--top)")
    return "\n".join(out)


def _load(path: Path, args: argparse.Namespace, steps: str | None) -> TraceSummary:
    from perfcheck.core.trace import by_hta_short_name, summarize

    summary = summarize(path, args.hta_rounding, steps)
    return by_hta_short_name(summary) if args.short_names else summary


# What `--json` prints is a `perfcheck schema trace-summary` / `trace-diff` document: the fields
# of perfcheck.trace_schema's TraceSummaryDoc and TraceDiffDoc, in their order, written as pydantic
# writes them (tests/test_startup.py holds the two to the same text on real traces), without
# importing pydantic, which would cost a trace command more than a small trace's whole analysis.
SCHEMA_VERSION = 2  # perfcheck.trace_schema.TRACE_SCHEMA_VERSION, which the trace documents carry
Document = dict[str, Any]


def _float(x: float) -> float:
    """A float field's value, refused as the schema refuses it: NaN and infinities are no measurement."""
    x = float(x)
    if not math.isfinite(x):
        raise ValueError(f"not a finite number: {x!r}")
    return x


def _optional(x: float | None) -> float | None:
    return None if x is None else _float(x)


def summary_document(path: Path, s: TraceSummary) -> Document:
    b = s.breakdown
    steps = max(s.steps, 1)
    return {
        "schema_version": SCHEMA_VERSION,
        "kind": "trace-summary",
        "file": str(path),
        "events": int(s.events),
        "steps": [int(n) for n in s.analysed],
        "steps_chosen": s.chosen,
        "last_step_dropped": s.last_step_dropped,
        "on_gpu": s.on_gpu,
        "breakdown": {
            "span_us": _float(b.span_us),
            "idle_pct": _float(b.idle_pct),
            "compute_pct": _float(b.compute_pct),
            "non_compute_pct": _float(b.non_compute_pct),
        }
        if b
        else None,
        "comm_overlap_pct": _optional(s.comm_overlap_pct),
        "naming": s.naming,
        "ops": [
            {
                "name": o.name,
                "kind": o.kind,
                "count": int(o.count),
                "total_us": _float(o.total_us),
                "per_step_us": _float(o.total_us / steps),
                "variants": int(o.variants),
            }
            for o in s.ops
        ],
    }


def diff_document(base_path: Path, head_path: Path, base: TraceSummary, head: TraceSummary) -> Document:
    from perfcheck.core.trace import diff_times

    changes = [c for c in diff_times(base.per_step(), head.per_step()) if c.status != "same"]
    return {
        "schema_version": SCHEMA_VERSION,
        "kind": "trace-diff",
        "naming": head.naming,
        "base": summary_document(base_path, base),
        "head": summary_document(head_path, head),
        "changes": [
            {
                "status": c.status,
                "name": c.name,
                "base_us": _optional(c.base_us),
                "head_us": _optional(c.head_us),
                "delta_us": _float(c.delta_us),
            }
            for c in changes
        ],
    }


def _json_float(x: float) -> str:
    """``x`` as pydantic writes a float: Python's shortest digits, an exponent as ``e-7`` or
    ``e+16`` (not ``e-07``), and 1e-5 <= x < 1e-4 in full (``0.000015``)."""
    text = repr(x)
    mantissa, e, exponent = text.partition("e")
    if not e:
        return text
    power = int(exponent)
    if power == -5:
        sign, digits = ("-", mantissa[1:]) if mantissa.startswith("-") else ("", mantissa)
        return f"{sign}0.0000{digits.replace('.', '')}"
    return f"{mantissa}e{power:+d}" if power > 0 else f"{mantissa}e{power}"


def _json_parts(value: object, depth: int, out: list[str]) -> None:
    if value is None:
        out.append("null")
    elif value is True or value is False:
        out.append("true" if value else "false")
    elif isinstance(value, int):
        out.append(str(value))
    elif isinstance(value, float):
        out.append(_json_float(value))
    elif isinstance(value, str):
        out.append(json.dumps(value, ensure_ascii=False))
    elif isinstance(value, dict | list):
        if not value:
            out.append("{}" if isinstance(value, dict) else "[]")
            return
        pad = "\n" + " " * (depth + 1)
        items: Iterable[tuple[str | None, object]] = (
            value.items() if isinstance(value, dict) else ((None, v) for v in value)
        )
        out.append("{" if isinstance(value, dict) else "[")
        for i, (key, item) in enumerate(items):
            out.append(pad if i == 0 else "," + pad)
            if key is not None:
                out.append(json.dumps(key, ensure_ascii=False) + ": ")
            _json_parts(item, depth + 1, out)
        out.append("\n" + " " * depth + ("}" if isinstance(value, dict) else "]"))
    else:
        raise TypeError(f"not a JSON value: {value!r}")


def dumps(doc: Document) -> str:
    """``doc`` as JSON indented by one space, the text pydantic's ``model_dump_json(indent=1)``
    writes for the same document."""
    out: list[str] = []
    _json_parts(doc, 0, out)
    return "".join(out)


def _cmd_summary(args: argparse.Namespace) -> int:
    from perfcheck.core.trace import StepError, TraceError

    try:
        summary = _load(args.file, args, args.steps)
    except (TraceError, StepError) as err:
        print(f"perfcheck trace: {err}", file=sys.stderr)
        return EXIT_BAD_INPUT
    if args.json:
        print(dumps(summary_document(args.file, summary)))
    else:
        print(render_summary(args.file, summary, args.top))
    return 0


def _cmd_diff(args: argparse.Namespace) -> int:
    from perfcheck.core.trace import StepError, TraceError

    try:
        base = _load(args.base, args, args.base_steps or args.steps)
        head = _load(args.head, args, args.head_steps or args.steps)
    except (TraceError, StepError) as err:
        print(f"perfcheck trace: {err}", file=sys.stderr)
        return EXIT_BAD_INPUT
    if args.json:
        print(dumps(diff_document(args.base, args.head, base, head)))
    else:
        print(render_diff(args.base, args.head, base, head, args.top))
    return 0


SHORT_NAMES_HELP = (
    "group rows by HolisticTraceAnalysis's short name, so that a diff's rows are those of HTA's "
    "TraceDiff.compare_traces(..., use_short_name=True): names starting Memcpy, Memset or dma, "
    "or with no '<' or '(', stay whole; otherwise '->' is deleted, each '>' or ')' deletes back "
    "to its nearest '<' or '(' (HTA's rule, quirks included), and what follows the last space "
    "is kept (`void ns::k<float>(float*)` -> `ns::k`). Rows that shorten alike are added up; "
    "--json says naming: hta-short and gives each row's number of full names (variants). HTA's "
    "TraceDiff takes the first ProfilerStep of each side: --steps N gives its rows exactly"
)
STEPS_HELP = (
    "the ProfilerSteps to analyse: all, last, N, N-M or a comma list, by the N of ProfilerStep#N "
    "(default: every step but the last, as HTA does)"
)


def _common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--top", type=positive, default=20, help="rows to show (default %(default)s)")
    parser.add_argument(
        "--json",
        action="store_true",
        help="print one JSON document instead of the table: every row, not just --top (its schema: "
        "`perfcheck schema trace-summary` / `trace-diff`)",
    )
    parser.add_argument("--steps", help=STEPS_HELP)
    parser.add_argument("--short-names", action="store_true", help=SHORT_NAMES_HELP)
    parser.add_argument(
        "--hta-rounding",
        action="store_true",
        help="round nanosecond timestamps to whole microseconds as HolisticTraceAnalysis 0.5 does, "
        "for figures that match HTA's exactly (default: exact times)",
    )


def add_trace_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register `trace summary` and `trace diff` on the `perfcheck` command's subparsers."""
    trace = subparsers.add_parser(
        "trace",
        help="summarise or diff PyTorch profiler (Kineto) traces",
        description="Read PyTorch profiler traces (.json or .json.gz, streamed, never loaded whole) "
        "and print per-kernel times, the GPU time breakdown and communication overlap. Needs no torch.",
        epilog=DEFINITIONS,
    )
    commands = trace.add_subparsers(dest="trace_command", required=True, metavar="COMMAND")
    summary = commands.add_parser(
        "summary",
        help="kernels by time, idle/compute/non-compute split, communication overlap",
        description="Summarise one trace: the top kernels (or CPU ops) by time over the analysed "
        "steps, the temporal breakdown and the communication hidden behind compute.",
        epilog=f"{DEFINITIONS} Exit codes: 0 done, 2 unreadable or invalid trace.",
    )
    summary.add_argument("file", type=Path, help="a Kineto trace, .json or .json.gz")
    _common(summary)
    summary.set_defaults(func=_cmd_summary)

    diff = commands.add_parser(
        "diff",
        help="kernels added, removed and changed in time between two traces",
        description="Compare two traces per kernel name (per CPU op when a trace has no GPU kernels), "
        "in microseconds per profiler step: added, removed and changed, largest change first; and "
        "the breakdown and overlap side by side.",
        epilog=f"{DEFINITIONS} Exit codes: 0 done, 2 unreadable or invalid trace.",
    )
    diff.add_argument("base", type=Path, help="the base trace")
    diff.add_argument("head", type=Path, help="the head trace")
    _common(diff)
    diff.add_argument(
        "--base-steps",
        help="--steps for the base trace only (two steps of one file: give it as both BASE and HEAD)",
    )
    diff.add_argument("--head-steps", help="--steps for the head trace only")
    diff.set_defaults(func=_cmd_diff)
