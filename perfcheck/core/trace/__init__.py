"""Torch-free analytics of PyTorch profiler (Kineto) traces: a streaming reader, HTA-compatible
overlap and temporal breakdown, per-kernel totals (by full name, or grouped by HTA's short name)
and a base-vs-head diff.

The bot side reads traces as untrusted data without torch; the runner uses the same code to
summarise the trace of its profile pass.
"""

from perfcheck.core.trace.diff import Change, diff_times, structural
from perfcheck.core.trace.event import Event
from perfcheck.core.trace.grouping import HTA_SHORT, by_hta_short_name, regroup
from perfcheck.core.trace.kinds import Kind, kernel_kind
from perfcheck.core.trace.names import clip, hta_short_name, short_name
from perfcheck.core.trace.reader import TraceError, iter_batches, iter_events
from perfcheck.core.trace.summary import (
    Breakdown,
    OpTotal,
    StepError,
    TraceSummary,
    parse_steps,
    summarize,
    summarize_events,
)

__all__ = [
    "HTA_SHORT",
    "Breakdown",
    "Change",
    "Event",
    "Kind",
    "OpTotal",
    "StepError",
    "TraceError",
    "TraceSummary",
    "by_hta_short_name",
    "clip",
    "diff_times",
    "hta_short_name",
    "iter_batches",
    "iter_events",
    "kernel_kind",
    "parse_steps",
    "regroup",
    "short_name",
    "structural",
    "summarize",
    "summarize_events",
]
