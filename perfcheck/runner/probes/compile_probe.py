"""The compile probe: graph count, graph breaks with their source lines, recompiles, cold compile.

Three passes, each over a freshly built model. The timed pass goes first, so the cold compile
really is cold in this process: ``torch.compile`` with the configured backend, one step, then the
same inputs again (a recompile there is one every step pays). Then the recompile check's other
batch, under Dynamo alone (backend ``eager``): a guard that fails on another batch size is
Dynamo's, whatever the backend, and under Inductor the automatic-dynamic recompile it provokes
was a second full compile (on the H200 about as long as the first, 50 s of ResNet-50's probe)
that nothing else uses. Last, ``torch._dynamo.explain`` gives the graph breaks with Dynamo's own
user stacks; breaks too are a Dynamo decision and do not depend on the backend.

The first pass calls the step four times on the workload's inputs (one compile, then three
repeats), the second three times (the other batch between two calls with the main inputs). A
frame whose guard fails every step (it reads a Python int attribute it changes) compiles four times
in the first pass: a ``torch._dynamo.config.recompile_limit`` of 3 or less (a workload may lower
it) is hit within the probe, Dynamo's default of 8 is not. Each pass records the recompile limits
Dynamo hits (perfcheck/runner/dynamo/limit_log.py); the first, before Dynamo is reset, the compiled
entries each frame holds in its cache.
"""

from __future__ import annotations

import contextlib
import re
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import torch._dynamo
from torch._dynamo.utils import counters, guard_failures

from perfcheck.measures import (
    CompileMetrics,
    Recompile,
    RecompileLimitHit,
    SourceLocation,
)
from perfcheck.runner import step as steps
from perfcheck.runner.dynamo import break_log, limit_log
from perfcheck.runner.dynamo.break_events import graph_breaks_of
from perfcheck.runner.dynamo.stats import cache_entries, compile_breakdown, compiled_frames
from perfcheck.runner.probes.base import ProbeOutput, Workload
from perfcheck.runner.source.guarded import guarded_made_at
from perfcheck.runner.source.locate import (
    CodeRef,
    code_location,
    innermost_user_frame,
    named_code_location,
    to_location,
)
from perfcheck.spec import ProbeSpec

_GUARD_PREFIX = re.compile(r"^\s*\d+/\d+:\s*")
_WRAPPED = re.compile(r"got (\w+(?:Error|Exception))\(['\"](.+?)['\"]\)")


# A recompile of one code object for one failed guard: the code by its file, first line and
# qualified name (two functions of one name, in sibling classes, are two), then the guard.
_Key = tuple[str, int, str, str]


def _code_key(code: Any, text: str) -> _Key:
    return (code.co_filename, code.co_firstlineno, code.co_qualname, text)


def _key(r: Recompile) -> _Key:
    """A measured recompile's key, as ``_recompile_counts`` keys the guard failures."""
    loc = r.location
    if loc is None:
        return ("", 0, r.function, r.reason)
    return (loc.path, loc.line, loc.function or r.function, r.reason)


def _recompile_reasons(tree: Path, model: Any = None) -> list[Recompile]:
    """Each recompile of a code object for a failed guard, once, placed where its guarded value
    is made (in the running ``model``'s objects where it is given: perfcheck/runner/source/guarded.py)."""
    out: list[Recompile] = []
    seen: set[_Key] = set()
    for code, reasons in guard_failures.items():
        for reason in reasons:
            text = _guard_text(reason)
            key = _code_key(code, text)
            if key not in seen:
                seen.add(key)
                location = code_location(code, tree)
                origin = guarded_made_at(text, code, tree, model)
                out.append(Recompile(function=code.co_name, reason=text, location=location, made_at=origin))
    return out


def _frame_name(code: tuple[str, str, int], tree: Path) -> str:
    """A frame as CompileMetrics.frames names it: ``function path:first line``."""
    loc = to_location(traceback.FrameSummary(code[1], code[2], code[0]), tree)
    return f"{code[0]} {loc.path}:{loc.line}"


def _cache_entries(tree: Path) -> dict[str, int]:
    """The compiled entries each frame holds in Dynamo's cache now."""
    out: dict[str, int] = {}
    for code, n in cache_entries().items():
        name = _frame_name(code, tree)
        out[name] = max(out.get(name, 0), n)
    return out


def _limit_hits(
    heard: list[limit_log.LimitHit], tree: Path, into: list[RecompileLimitHit], model: Any = None
) -> list[RecompileLimitHit]:
    """``into`` with the recompile limits Dynamo was heard hitting, once per frame and limit (the
    probe's first pass, which compiles with the configured backend, first)."""
    out = list(into)
    seen = {(h.function, _at(h.location), h.limit) for h in out}
    for hit in heard:
        location = named_code_location(hit.code, tree)
        record = RecompileLimitHit(
            function=hit.code[0],
            location=location,
            limit=hit.limit,
            value=hit.value,
            compiles=hit.compiles,
            reason=_guard_text(hit.reason),
            made_at=guarded_made_at(_guard_text(hit.reason), CodeRef(*hit.code), tree, model),
        )
        key = (record.function, _at(record.location), record.limit)
        if key not in seen:
            seen.add(key)
            out.append(record)
    return out


def _at(loc: SourceLocation | None) -> str:
    return f"{loc.path}:{loc.line}" if loc is not None else "?"


def compiled_frame_names(tree: Path) -> list[str]:
    """Every frame Dynamo compiled in this process as a frame of its own, as ``function path:line``."""
    from torch._dynamo.utils import get_compilation_metrics

    names = []
    for m in get_compilation_metrics():
        if m.co_name and m.co_filename:
            frame = traceback.FrameSummary(m.co_filename, m.co_firstlineno or 0, m.co_name)
            loc = to_location(frame, tree)
            names.append(f"{m.co_name} {loc.path}:{loc.line}")
    return sorted(set(names))


def rejected(err: BaseException, backend: str, tree: Path) -> ProbeOutput:
    """torch.compile raising inside torch (a Dynamo, fake-tensor or backend error) on the side's
    code: a failed probe with torch's error and the user's frame, not a crash. Dynamo keeps the
    user's stack on the exception (``real_stack``); the traceback is torch's own."""
    stack = getattr(err, "real_stack", None) or traceback.extract_tb(err.__traceback__)
    frame = innermost_user_frame(stack, tree)
    metrics = CompileMetrics(
        backend=backend,
        graph_count=0,
        graph_break_count=0,
        recompile_count=0,
        cold_compile_s=0.0,
        error_type=type(err).__name__,
        error_message=str(err)[:20_000],
        error_location=to_location(frame, tree) if frame is not None else None,
    )
    first = (str(err).strip().splitlines() or [""])[0]
    return ProbeOutput(
        status="failed",
        message=f"torch.compile fails: {type(err).__name__}: {first}",
        metrics=metrics,
    )


def _second_batch(step: Callable[..., Any], built: Workload) -> str | None:
    """Call with another batch (the workload's own second inputs, else half the batch) and the
    main inputs again; None when that ran. Its failure is a note on the recompile row: the
    graphs and breaks already measured stand."""
    if built.second_given and built.second is None:
        return "not run: the workload gives no second inputs"
    second = built.second
    if second is None:
        second = steps.resize_batch(built.inputs, max(1, steps.batch_size(built.inputs) // 2))
    try:
        step(*second)
        step(*built.inputs)
    except Exception as err:  # the model's own code on inputs it was not written for
        # Dynamo wraps what the model's own code raised on fake tensors ("... got RuntimeError('The
        # size of tensor a (4) must match ...')"); name that.
        inner = _WRAPPED.search(str(err))
        name, text = (inner.group(1), inner.group(2)) if inner else (type(err).__name__, str(err))
        if inner:  # the inner error as its repr: its line breaks are the two characters "\n"
            text = text.replace("\\n", "\n")
        first = (text.strip().splitlines() or [""])[0][:200]
        size = "its second inputs" if built.second is not None else f"a batch of {steps.batch_size(second)}"
        return f"not checked: the model raises on {size} ({name}: {first})"
    return None


def _recompile_counts(tree: Path) -> dict[_Key, int]:
    """How many times each guard has failed so far, per frame and guard text (keyed as ``_key``)."""
    out: dict[_Key, int] = {}
    for code, reasons in guard_failures.items():
        loc = code_location(code, tree)
        for reason in reasons:
            key = (loc.path, loc.line, loc.function or code.co_name, _guard_text(reason))
            out[key] = out.get(key, 0) + 1
    return out


def _guard_text(reason: Any) -> str:
    # Each entry is "<frame>/<cache entry>: <failed guard>  # <source> (HINT ...)\nUser stack...";
    # keep the guard and its source comment, drop the cache-entry index and the stack.
    text = _GUARD_PREFIX.sub("", str(reason).split("\nUser stack trace:")[0]).strip()
    return re.sub(r"\s{2,}#", "  #", text)


def run(spec: ProbeSpec, build: Callable[[], Workload], settings: None) -> ProbeOutput:
    # no section of its own: it reads the shared compile: and timing: sections from the spec
    wl = spec.workload
    tree = Path(spec.tree)
    cfg = spec.compile

    if spec.device == "cpu":
        # The timing workers run ATen on this many threads, and Inductor's C++ kernels are
        # generated for the thread count they are compiled under: compiled under another, this
        # probe's cold compile would fill a cache the timing processes cannot use.
        torch.set_num_threads(spec.timing.cpu_threads)
    torch._dynamo.reset()
    counters.clear()
    guard_failures.clear()
    built = build()
    model = steps.prepare(built.model, wl.train)
    compiled = torch.compile(model, backend=cfg.backend, mode=cfg.mode, dynamic=cfg.dynamic)
    step = steps.make_step(compiled, wl.train, wl.amp, spec.device)

    with break_log.recording() as logged, limit_log.recording() as heard:
        start = time.perf_counter()
        try:
            step(*built.inputs)
        except torch._dynamo.exc.TorchDynamoException as err:
            return rejected(err, cfg.backend, tree)
        steps.synchronize(spec.device)
        cold = time.perf_counter() - start
    breakdown = compile_breakdown()
    first_frames = compiled_frames()
    during_first = {_key(r) for r in _recompile_reasons(tree)}

    # Same inputs again must hit the cache. A guard that fails on the first repeat may only see
    # state the first step set up (a buffer that took the batch's shape); one that fails again
    # on the next repeats fails every step. A recompile may break where the first compile did
    # not (the code after a break, recompiled for a value that crossed it): heard too.
    with break_log.recording() as later, limit_log.recording() as heard_later:
        step(*built.inputs)
        once = _recompile_counts(tree)
        for _ in range(2):
            step(*built.inputs)
        steps.synchronize(spec.device)
    again = _recompile_counts(tree)
    # What each frame holds in Dynamo's cache after the workload's own steps on its inputs (the
    # other batch's recompiles are counted in recompile_count), and the frames whose recompiles
    # reached a limit: Dynamo compiles them no more, and runs them eagerly.
    entries = _cache_entries(tree)
    hits = _limit_hits(heard + heard_later, tree, [], model)
    recompiles = [
        r.model_copy(update={"every_step": True})
        if _key(r) not in during_first and again.get(_key(r), 0) > once.get(_key(r), 0)
        else r
        for r in _recompile_reasons(tree, model)
    ]
    recompile_count = compiled_frames() - first_frames
    del compiled, step, model, built

    # Another batch size shows shape specialisation: Dynamo's guards, checked without a
    # backend compile of the graphs they guard.
    torch._dynamo.reset()
    guard_failures.clear()
    other = build()
    traced = torch.compile(steps.prepare(other.model, wl.train), backend="eager", dynamic=cfg.dynamic)
    traced_step = steps.make_step(traced, wl.train, wl.amp, spec.device)
    with limit_log.recording() as heard_second:
        traced_step(*other.inputs)
        before_second = compiled_frames()
        second_batch = _second_batch(traced_step, other)
        steps.synchronize(spec.device)
    hits = _limit_hits(heard_second, tree, hits, other.model)
    seen = {_key(r) for r in recompiles}
    recompiles += [r for r in _recompile_reasons(tree, other.model) if _key(r) not in seen]
    recompile_count += compiled_frames() - before_second
    frames = compiled_frame_names(tree)
    del traced, traced_step, other

    torch._dynamo.reset()
    fresh = build()
    fresh_model = steps.prepare(fresh.model, wl.train)
    with (
        steps.autocast(wl.amp, spec.device),
        torch.no_grad() if not wl.train else contextlib.nullcontext(),
    ):
        explained = torch._dynamo.explain(fresh_model)(*fresh.inputs)
    torch._dynamo.reset()

    breaks = graph_breaks_of(explained, tree, logged, later)
    metrics = CompileMetrics(
        backend=cfg.backend,
        # Dynamo's own counts (explain's): the findings list each break's line once.
        graph_count=explained.graph_count,
        graph_break_count=max(explained.graph_break_count, len(breaks)),
        graph_breaks=breaks,
        recompile_count=recompile_count,
        recompiles=recompiles,
        frames=frames,
        cache_entries=entries,
        recompile_limit_hits=hits,
        second_batch=second_batch,
        cold_compile_s=round(cold, 4),
        compile_breakdown_s=breakdown,
        op_count=explained.op_count,
    )
    return ProbeOutput(metrics=metrics)
