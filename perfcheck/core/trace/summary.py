"""One streaming pass over a trace: per-kernel totals, the temporal breakdown and the share of
communication hidden behind compute.

The definitions are HolisticTraceAnalysis's (``get_temporal_breakdown``, ``get_comm_comp_overlap``),
so figures compare with HTA's:

- GPU activity is every event with a stream (kernels, memcpy, memset), all streams together.
- The last ProfilerStep is dropped, as HTA does by default: a GPU activity counts only if the CPU
  call that launched it (same correlation id) started before the last step began, and a CPU op
  only if it started before then. A trace with fewer than two steps is taken whole.
- Breakdown, over the span from the first kept GPU activity to the end of the last: idle is the
  time no activity runs, compute the time some compute kernel runs, non-compute the rest.
- Overlap: the time both a compute and a communication kernel run, over the time a
  communication kernel runs.

Only a few numbers per event are kept (in arrays, not objects), so memory follows the number of
kernels and ops, not the size of the file.
"""

from __future__ import annotations

import math
from array import array
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import msgspec

from perfcheck.core.trace.event import Event
from perfcheck.core.trace.intervals import Interval, covered, merge, shared
from perfcheck.core.trace.kinds import kernel_kind
from perfcheck.core.trace.reader import TraceError, iter_batches
from perfcheck.core.trace.self_time import self_times

STEP_MARK = "ProfilerStep"
# HTA drops "Trace" (the whole-trace span) and, by default, Python stack events.
_SKIPPED_CATEGORIES = frozenset({"Trace", "python_function"})
CPU_OP = "cpu_op"
GPU_ANNOTATION = "gpu_user_annotation"


# The result types are msgspec Structs, not dataclasses: msgspec is loaded for the reader anyway,
# and a Struct class costs nothing to define, where the dataclasses module (with inspect) and
# its generated methods are a tenth of a small trace's whole `perfcheck trace summary` process.
class OpTotal(msgspec.Struct, frozen=True):
    """One kernel (or CPU op) name over the analysed steps."""

    name: str
    kind: str  # a kinds.Kind for GPU activity, "cpu_op" for CPU ops (self time)
    count: int
    total_us: float
    variants: int = 1  # full names added up in this row: more than 1 only when grouped by a short name


class Breakdown(msgspec.Struct, frozen=True):
    span_us: float
    idle_us: float
    compute_us: float
    non_compute_us: float

    def _pct(self, part: float) -> float:
        # Rounding error must not push a share outside 0..100.
        return min(100.0, max(0.0, 100.0 * part / self.span_us)) if self.span_us > 0 else 0.0

    @property
    def idle_pct(self) -> float:
        return self._pct(self.idle_us)

    @property
    def compute_pct(self) -> float:
        return self._pct(self.compute_us)

    @property
    def non_compute_pct(self) -> float:
        return self._pct(self.non_compute_us)


class TraceSummary(msgspec.Struct, frozen=True):
    events: int  # events with a duration (complete events): what the analyses read
    steps: int = 0  # ProfilerSteps analysed
    last_step_dropped: bool = False
    analysed: tuple[int, ...] = ()  # the N of each ProfilerStep#N analysed (empty: no steps in the trace)
    chosen: bool = False  # the steps were chosen (--steps), not HTA's default
    kernels: tuple[OpTotal, ...] = ()  # GPU activity, by total time, largest first
    cpu_ops: tuple[OpTotal, ...] = ()  # CPU ops by self time, largest first
    breakdown: Breakdown | None = None
    comm_overlap_pct: float | None = None  # None when no communication kernel ran
    naming: str = "full"  # what keys the rows: "full" names, or "hta-short" (grouping.by_hta_short_name)

    @property
    def on_gpu(self) -> bool:
        return bool(self.kernels)

    @property
    def ops(self) -> tuple[OpTotal, ...]:
        """What a diff compares: GPU kernels when the trace has any, else CPU ops."""
        return self.kernels or self.cpu_ops

    def per_step(self) -> dict[str, float]:
        """Microseconds per analysed step of each of ``ops``."""
        steps = max(self.steps, 1)
        return {op.name: op.total_us / steps for op in self.ops}


class _Columns:
    """What the pass keeps: a few numbers per GPU activity, launch and CPU op."""

    def __init__(self, hta_rounding: bool = False) -> None:
        self.names: dict[str, int] = {}
        self.kinds: list[str] = []
        self.threads: dict[tuple[Any, Any], int] = {}
        self.gpu_name: array[int] = array("l")
        self.gpu_ts: array[float] = array("d")
        self.gpu_dur: array[float] = array("d")
        self.gpu_corr: array[int] = array("q")
        self.launch_corr: array[int] = array("q")
        self.launch_ts: array[float] = array("d")
        self.cpu_name: array[int] = array("l")
        self.cpu_thread: array[int] = array("l")
        self.cpu_ts: array[float] = array("d")
        self.cpu_dur: array[float] = array("d")
        # The CPU-side ProfilerStep marks: where each step begins and ends, and its N.
        self.step_ts: array[float] = array("d")
        self.step_end: array[float] = array("d")
        self.step_ids: list[int] = []  # N of each ProfilerStep#N, in step_ts order
        # Every mark, GPU-side ones included, as HTA 0.5 reads them to decide what the last step is.
        self.step_names: set[str] = set()
        self.last_step_start = -math.inf
        self.events = 0
        self.hta_rounding = hta_rounding

    def name_id(self, name: str, cat: str) -> int:
        found = self.names.get(name)
        if found is None:
            found = self.names[name] = len(self.kinds)
            self.kinds.append(kernel_kind(name, cat))
        return found

    def add(self, events: Iterable[Event]) -> None:
        """Keep what the analyses need of ``events``. The loop runs once per event of a large
        trace: the bound methods and sets it uses are looked up once, before it."""
        if self.hta_rounding:
            events = map(_hta_rounded, events)
        names, name_id = self.names, self.name_id
        threads = self.threads
        gpu_name, gpu_ts, gpu_dur, gpu_corr = (
            self.gpu_name.append,
            self.gpu_ts.append,
            self.gpu_dur.append,
            self.gpu_corr.append,
        )
        launch_corr, launch_ts = self.launch_corr.append, self.launch_ts.append
        cpu_name, cpu_thread, cpu_ts, cpu_dur = (
            self.cpu_name.append,
            self.cpu_thread.append,
            self.cpu_ts.append,
            self.cpu_dur.append,
        )
        skipped = _SKIPPED_CATEGORIES
        timed = 0
        for ev in events:
            dur = ev.dur
            if dur is None:
                continue
            timed += 1
            ts, cat = ev.ts, ev.cat
            if ts is None or cat is None or cat in skipped:
                continue
            name, args = ev.name, ev.args
            stream = corr = None
            if args is not None:
                stream, corr = args.stream, args.correlation
            if corr is None or corr < 0:
                corr = -1
            if stream is not None and stream >= 0:
                n = names.get(name)
                gpu_name(name_id(name, cat) if n is None else n)
                gpu_ts(ts)
                gpu_dur(dur)
                gpu_corr(corr)
                continue
            if corr >= 0:
                launch_corr(corr)
                launch_ts(ts)
            if cat == CPU_OP:
                n = names.get(name)
                cpu_name(name_id(name, cat) if n is None else n)
                key = (ev.pid, ev.tid)
                thread = threads.get(key)
                if thread is None:
                    thread = threads[key] = len(threads)
                cpu_thread(thread)
                cpu_ts(ts)
                cpu_dur(dur)
            if STEP_MARK in name:
                self.add_step(name, cat, ts, dur)
        self.events += timed

    def add_step(self, name: str, cat: str, ts: float, dur: float) -> None:
        self.step_names.add(name)
        self.last_step_start = max(self.last_step_start, ts)
        if cat == GPU_ANNOTATION:
            # Kineto also marks each step on the GPU timeline (newer versions): the same step
            # again, spanning the GPU's work for it, which a CPU launch must not be placed by.
            return
        self.step_ts.append(ts)
        self.step_end.append(ts + dur)
        number = name.rpartition("#")[2]
        # isdecimal, not isdigit: "²" is a digit that int() refuses.
        self.step_ids.append(int(number) if number.isdecimal() else len(self.step_ids))


def _hta_rounded(ev: Event) -> Event:
    """HTA 0.5 snaps sub-microsecond timestamps inwards (start up, end down) before anything else,
    which shortens every event by up to 2 us; off by default, for comparisons."""
    if ev.ts is None or ev.dur is None:
        return ev
    end = math.floor(ev.ts + ev.dur)
    ts = float(math.ceil(ev.ts))
    return msgspec.structs.replace(ev, ts=ts, dur=end - ts)


def _totals(
    name_ids: Iterable[int], times: Iterable[float], names: list[str], kinds: list[str] | None
) -> tuple[OpTotal, ...]:
    """Count and total time per name, from parallel sequences; ``kinds`` None means CPU ops."""
    counts: dict[int, int] = {}
    sums: dict[int, float] = {}
    for n, t in zip(name_ids, times, strict=True):
        if n in counts:
            counts[n] += 1
            sums[n] += t
        else:
            counts[n], sums[n] = 1, t
    totals = [
        OpTotal(name=names[n], kind=kinds[n] if kinds else CPU_OP, count=c, total_us=sums[n])
        for n, c in counts.items()
    ]
    return tuple(sorted(totals, key=lambda t: (-t.total_us, t.name)))


def _breakdown(spans: list[Interval], kinds: list[str]) -> tuple[Breakdown, float | None]:
    everything = merge(spans)
    compute = merge(s for s, k in zip(spans, kinds, strict=True) if k == "compute")
    comm = merge(s for s, k in zip(spans, kinds, strict=True) if k == "communication")
    span = everything[-1][1] - everything[0][0]
    busy, compute_us = covered(everything), covered(compute)
    idle = span - busy
    breakdown = Breakdown(
        span_us=span, idle_us=idle, compute_us=compute_us, non_compute_us=span - compute_us - idle
    )
    comm_us = covered(comm)
    overlap = min(100.0, 100.0 * shared(compute, comm) / comm_us) if comm_us > 0 else None
    return breakdown, overlap


class StepError(ValueError):
    """A --steps choice the trace cannot meet; the message names the steps it has."""


def parse_steps(text: str) -> tuple[str, frozenset[int]]:
    """``all``, ``last``, ``N``, ``N-M`` or a comma list of those: ("all"|"last"|"ids", ids)."""
    text = text.strip().lower()
    if text in ("all", "last"):
        return text, frozenset()
    ids: set[int] = set()
    for part in text.split(","):
        lo, sep, hi = part.strip().partition("-")
        if not lo.isdigit() or (sep and not hi.isdigit()) or (sep and int(hi) < int(lo)):
            raise StepError(f"--steps: expected all, last, N, N-M or a comma list of them; got {text!r}")
        ids.update(range(int(lo), int(hi) + 1) if sep else {int(lo)})
    return "ids", frozenset(ids)


def _chosen(c: _Columns, choice: str) -> tuple[list[int], list[int], tuple[int, ...]]:
    """Activities and ops launched inside the chosen ProfilerSteps, and those steps' numbers."""
    how, ids = parse_steps(choice)
    order = sorted(range(len(c.step_ts)), key=lambda i: c.step_ts[i])
    if not order:
        raise StepError("--steps: this trace has no ProfilerStep marks to choose from")
    if how == "all":
        picked = order
    elif how == "last":
        picked = order[-1:]
    else:
        picked = [i for i in order if c.step_ids[i] in ids]
        if not picked:
            have = ", ".join(str(c.step_ids[i]) for i in order)
            raise StepError(f"--steps {choice}: no such ProfilerStep; the trace has {have}")
    windows = [(c.step_ts[i], c.step_end[i]) for i in picked]
    picked_ids = tuple(dict.fromkeys(c.step_ids[i] for i in picked))  # once each, in time order

    def inside(ts: float) -> bool:
        return any(lo <= ts < hi for lo, hi in windows)

    launched = {corr for corr, ts in zip(c.launch_corr, c.launch_ts, strict=True) if inside(ts)}
    gpu = [
        i
        for i in range(len(c.gpu_ts))
        if (c.gpu_corr[i] in launched if c.gpu_corr[i] >= 0 else inside(c.gpu_ts[i]))
    ]
    cpu = [i for i in range(len(c.cpu_ts)) if inside(c.cpu_ts[i])]
    return gpu, cpu, picked_ids


def _kept(c: _Columns) -> tuple[list[int], list[int], tuple[int, ...], bool]:
    """The GPU activities and CPU ops analysed (indices), the steps analysed (their N, in time
    order), and whether the last step was dropped. HTA drops a step only when there are at least
    two distinct ones, and takes the latest start of any mark as the last step's."""
    gpu, cpu = list(range(len(c.gpu_ts))), list(range(len(c.cpu_ts)))
    order = sorted(range(len(c.step_ts)), key=lambda i: c.step_ts[i])
    steps = tuple(dict.fromkeys(c.step_ids[i] for i in order))  # once each, in time order
    if len(c.step_names) < 2:
        return gpu, cpu, steps, False
    cutoff = c.last_step_start
    launched = {corr for corr, ts in zip(c.launch_corr, c.launch_ts, strict=True) if ts < cutoff}
    # An activity without a correlation id has no launch to go by: its own start decides.
    gpu = [i for i in gpu if (c.gpu_corr[i] in launched if c.gpu_corr[i] >= 0 else c.gpu_ts[i] < cutoff)]
    cpu = [i for i in cpu if c.cpu_ts[i] < cutoff]
    return gpu, cpu, steps[:-1], True


def _summary(c: _Columns, steps_choice: str | None = None) -> TraceSummary:
    names = list(c.names)
    if steps_choice is None:
        gpu, cpu, analysed, dropped = _kept(c)
    else:
        gpu, cpu, analysed = _chosen(c, steps_choice)
        dropped = False
    steps = len(analysed)
    gpu_names = [c.gpu_name[i] for i in gpu]
    kernels = _totals(gpu_names, [c.gpu_dur[i] for i in gpu], names, c.kinds)
    breakdown, overlap = None, None
    if kernels:
        spans = [(c.gpu_ts[i], c.gpu_ts[i] + c.gpu_dur[i]) for i in gpu]
        breakdown, overlap = _breakdown(spans, [c.kinds[n] for n in gpu_names])
    own = self_times([c.cpu_thread[i] for i in cpu], [c.cpu_ts[i] for i in cpu], [c.cpu_dur[i] for i in cpu])
    cpu_ops = _totals([c.cpu_name[i] for i in cpu], own, names, None)
    return TraceSummary(
        events=c.events,
        steps=steps,
        last_step_dropped=dropped,
        analysed=analysed,
        chosen=steps_choice is not None,
        kernels=kernels,
        cpu_ops=cpu_ops,
        breakdown=breakdown,
        comm_overlap_pct=overlap,
    )


def summarize_events(
    events: Iterable[Event], hta_rounding: bool = False, steps: str | None = None
) -> TraceSummary:
    """The summary of a trace given as events (pure; ``summarize`` streams them from a file).

    ``hta_rounding`` reproduces HTA 0.5's rounding of nanosecond timestamps to whole microseconds,
    for figures that match HTA's to the last digit; exact times are the default. ``steps`` chooses
    the ProfilerSteps analysed (``parse_steps``); None: HTA's default, every step but the last."""
    columns = _Columns(hta_rounding=hta_rounding)
    columns.add(events)
    return _summary(columns, steps)


def summarize(path: Path, hta_rounding: bool = False, steps: str | None = None) -> TraceSummary:
    """Stream the trace at ``path`` once and summarise it; raises TraceError for a bad file,
    StepError for steps it does not have."""
    if steps is not None:
        parse_steps(steps)  # a bad choice is refused before the file is read
    columns = _Columns(hta_rounding=hta_rounding)
    try:
        for batch in iter_batches(path):
            columns.add(batch)
    except OverflowError:
        # The columns hold ids as 64-bit integers; Kineto's are small.
        raise TraceError(
            f"{path}: not a readable Kineto trace: a stream or correlation id out of range"
        ) from None
    summary = _summary(columns, steps)
    if not _finite(summary):
        # A time such as 1e400 decodes as infinity, and huge ones add up to it: no measurement.
        raise TraceError(f"{path}: not a readable Kineto trace: a time out of range (not a finite number)")
    return summary


def _finite(s: TraceSummary) -> bool:
    """Whether every figure of ``s`` is a finite number."""
    b = s.breakdown
    figures = [op.total_us for op in s.kernels + s.cpu_ops]
    figures += [b.span_us, b.idle_us, b.compute_us, b.non_compute_us] if b else []
    figures += [s.comm_overlap_pct] if s.comm_overlap_pct is not None else []
    return all(map(math.isfinite, figures))
