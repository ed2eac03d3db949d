"""The compile probe: graph count, graph breaks with their source lines, recompiles, cold compile.

Three passes, each over a freshly built model. The timed pass goes first, so the cold compile
really is cold in this process: ``torch.compile`` with the configured backend, one step, then the
same inputs again (a recompile there is one every step pays). Then the recompile check's other
batch, under Dynamo alone (backend ``eager``): a guard that fails on another batch size is
Dynamo's, whatever the backend, and under Inductor the automatic-dynamic recompile it provokes
was a second full compile (on the H200 about as long as the first, 50 s of ResNet-50's probe)
that nothing else uses. Last, ``torch._dynamo.explain`` gives the graph breaks with Dynamo's own
user stacks; breaks too are a Dynamo decision and do not depend on the backend.
"""

from __future__ import annotations

import contextlib
import re
import time
import traceback
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import torch._dynamo
from torch._dynamo.utils import counters, guard_failures

from perfcheck.runner import break_log
from perfcheck.runner import step as steps
from perfcheck.runner.break_log import LoggedBreak
from perfcheck.runner.dynamo_stats import compile_breakdown, compiled_frames
from perfcheck.runner.locate import innermost_user_frame, to_location
from perfcheck.runner.probes.base import ProbeOutput, Workload, register
from perfcheck.schema import CompileLatency, CompileMetrics, GraphBreak, Recompile, SourceLocation
from perfcheck.spec import ProbeSpec

_GUARD_PREFIX = re.compile(r"^\s*\d+/\d+:\s*")


def break_type(reason: str) -> str:
    """Dynamo's one-line break type: the first line of its reason in torch >= 2.7."""
    first = reason.strip().splitlines()[0] if reason.strip() else "unknown"
    return first.strip()


def _recompiled_at(code: Any, tree: Path) -> SourceLocation:
    """Where a recompiled code object starts, as the user reads it: a resume function's first line
    is the line of the original function where it resumes, and its name is the original's."""
    match = re.match(r"torch_dynamo_resume_in_(\w+?)_at_\d+$", code.co_name)
    name = match.group(1) if match else code.co_name
    return to_location(traceback.FrameSummary(code.co_filename, code.co_firstlineno, name), tree)


def _recompile_reasons(tree: Path) -> list[Recompile]:
    out: list[Recompile] = []
    seen: set[tuple[str, str]] = set()
    for code, reasons in guard_failures.items():
        for reason in reasons:
            # Each entry is "<frame>/<cache entry>: <failed guard>  # <source> (HINT ...)\nUser stack...";
            # keep the guard and its source comment, drop the cache-entry index and the stack.
            text = _GUARD_PREFIX.sub("", str(reason).split("\nUser stack trace:")[0]).strip()
            text = re.sub(r"\s{2,}#", "  #", text)
            key = (code.co_name, text)
            if key not in seen:
                seen.add(key)
                out.append(Recompile(function=code.co_name, reason=text, location=_recompiled_at(code, tree)))
    return out


def graph_breaks_of(explained: Any, tree: Path, logged: list[LoggedBreak] | None = None) -> list[GraphBreak]:
    """Every break: ``explain``'s, with its user stacks, and those Dynamo logged while compiling
    that explain does not list (a break at a frame's first line, in a generator, ...)."""
    grouped: Counter[tuple[str, str, SourceLocation | None]] = Counter()
    for reason in explained.break_reasons:
        frame = innermost_user_frame(reason.user_stack, tree) or (
            reason.user_stack[-1] if reason.user_stack else None
        )
        location = to_location(frame, tree) if frame is not None else None
        grouped[(break_type(reason.reason), reason.reason.strip(), location)] += 1
    explained_at = {(loc.path, loc.line) for (_, _, loc) in grouped if loc is not None}
    for lb in logged or []:
        location = to_location(innermost_user_frame(lb.stack, tree) or lb.stack[-1], tree)
        # Dynamo can log one break twice: when it gives up inlining a call at the break, and again
        # when it compiles the called function as a frame of its own (a wrapper's forward, say).
        if (location.path, location.line) not in explained_at:
            explained_at.add((location.path, location.line))
            grouped[(break_type(lb.reason), lb.reason, location)] += 1
    return [
        GraphBreak(break_type=kind, reason=text, location=loc, count=n)
        for (kind, text, loc), n in grouped.items()
    ]


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
        metrics={"compile": metrics},
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
        first = (str(err).strip().splitlines() or [""])[0][:200]
        return f"the call with another batch raised {type(err).__name__}: {first}"
    return None


class CompileProbe:
    name = "compile"

    def run(self, spec: ProbeSpec, build: Callable[[], Workload]) -> ProbeOutput:
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

        with break_log.recording() as logged:
            start = time.perf_counter()
            try:
                step(*built.inputs)
            except torch._dynamo.exc.TorchDynamoException as err:
                return rejected(err, cfg.backend, tree)
            steps.synchronize(spec.device)
            cold = time.perf_counter() - start
        breakdown = compile_breakdown()
        first_frames = compiled_frames()

        # Same inputs again must hit the cache.
        for _ in range(2):
            step(*built.inputs)
        steps.synchronize(spec.device)
        recompiles = _recompile_reasons(tree)
        recompile_count = compiled_frames() - first_frames
        del compiled, step, model, built

        # Another batch size shows shape specialisation: Dynamo's guards, checked without a
        # backend compile of the graphs they guard.
        torch._dynamo.reset()
        guard_failures.clear()
        other = build()
        traced = torch.compile(steps.prepare(other.model, wl.train), backend="eager", dynamic=cfg.dynamic)
        traced_step = steps.make_step(traced, wl.train, wl.amp, spec.device)
        traced_step(*other.inputs)
        before_second = compiled_frames()
        second_batch = _second_batch(traced_step, other)
        steps.synchronize(spec.device)
        seen = {(r.function, r.reason) for r in recompiles}
        recompiles += [r for r in _recompile_reasons(tree) if (r.function, r.reason) not in seen]
        recompile_count += compiled_frames() - before_second
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

        breaks = graph_breaks_of(explained, tree, logged)
        latency = _cold_compiles(spec, build) if spec.latency is not None else None
        metrics = CompileMetrics(
            backend=cfg.backend,
            graph_count=explained.graph_count,
            # One count: the breaks listed, so the table and the findings agree.
            graph_break_count=sum(b.count for b in breaks),
            graph_breaks=breaks,
            recompile_count=recompile_count,
            recompiles=recompiles,
            second_batch=second_batch,
            cold_compile_s=round(cold, 4),
            compile_breakdown_s=breakdown,
            op_count=explained.op_count,
            latency=latency,
        )
        return ProbeOutput(metrics={"compile": metrics})


def _cold_compiles(spec: ProbeSpec, build: Callable[[], Workload]) -> CompileLatency:
    """Compile latency where no timing pairs run to measure it (runner/cold_compile.py): one
    unmeasured cache-cold compile first, so that both sides measure after the same warm-up (head's
    first compile may have read base's cache), then ``spec.latency.compiles`` measured ones."""
    from perfcheck.runner.cold_compile import cold_compile

    assert spec.latency is not None
    cold_compile(spec, build, None)  # also starts Inductor's compile workers where it uses them
    samples = [cold_compile(spec, build, None) for _ in range(spec.latency.compiles)]
    return CompileLatency(measure="wall", samples=samples)


@register("compile")
def _factory() -> CompileProbe:
    return CompileProbe()
