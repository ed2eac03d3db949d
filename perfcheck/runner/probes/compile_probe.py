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
Dynamo hits (perfcheck/runner/limit_log.py); the first, before Dynamo is reset, the compiled
entries each frame holds in its cache.
"""

from __future__ import annotations

import contextlib
import re
import time
import traceback
from collections.abc import Callable
from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch._dynamo
from torch._dynamo.utils import counters, guard_failures

from perfcheck.measures import (
    CompileMetrics,
    GraphBreak,
    NestingBlock,
    Recompile,
    RecompileLimitHit,
    SourceLocation,
)
from perfcheck.runner import break_log, limit_log, nesting
from perfcheck.runner import step as steps
from perfcheck.runner.break_log import LoggedBreak
from perfcheck.runner.dynamo_stats import cache_entries, compile_breakdown, compiled_frames
from perfcheck.runner.locate import (
    innermost_user_frame,
    lines_of,
    qualified_name,
    relative_path,
    to_location,
    user_name,
)
from perfcheck.runner.probes.base import ProbeOutput, Workload
from perfcheck.spec import ProbeSpec

_GUARD_PREFIX = re.compile(r"^\s*\d+/\d+:\s*")
_WRAPPED = re.compile(r"got (\w+(?:Error|Exception))\(['\"](.+?)['\"]\)")


def break_type(reason: str) -> str:
    """Dynamo's one-line break type: the first line of its reason in torch >= 2.7."""
    first = reason.strip().splitlines()[0] if reason.strip() else "unknown"
    return first.strip()


def _recompiled_at(code: Any, tree: Path) -> SourceLocation:
    """Where a recompiled code object starts, as the user reads it: a resume function's first line
    is the line of the original function where it resumes, and its name is the original's. Named by
    the code object's own qualified name (``Used.forward``), so that two functions that read alike
    are told apart."""
    frame = traceback.FrameSummary(code.co_filename, code.co_firstlineno, code.co_name)
    return to_location(frame, tree, qualname=code.co_qualname)


@dataclass(frozen=True)
class _CodeRef:
    """A code object known only by its name, file and first line (Dynamo's warning that a frame hit
    a recompile limit names no more): its qualified name found by position, as ``made_at`` reads it."""

    co_name: str
    co_filename: str
    co_firstlineno: int

    @property
    def co_qualname(self) -> str:
        return qualified_name(self.co_filename, self.co_firstlineno, self.co_name) or self.co_name


def _code_at(code: tuple[str, str, int], tree: Path) -> SourceLocation:
    """``_recompiled_at`` of a code object known by its name, file and first line."""
    return _recompiled_at(_CodeRef(*code), tree)


# The guarded value's name in a failed guard: the last attribute of a path from the frame's
# ``self`` (``self._modules['neuron']._buffers['v']``, ``L['self'].layers[0].mem``).
_GUARDED = re.compile(r"(?:L\['self'\]|\bself)((?:\.\w+|\[[^\]]*\])+)")
_ATTR = re.compile(r"\.(\w+)|\['(\w+)'\]")
_MAX_SOURCES = 2000  # files of the tree searched for where a guarded value is made


def guarded_name(reason: str) -> str | None:
    """The attribute a failed guard checks, or None when it guards a local or an input."""
    match = _GUARDED.search(reason)
    if match is None:
        return None
    names = [a or b for a, b in _ATTR.findall(match.group(1))]
    names = [n for n in names if n not in ("_buffers", "_parameters", "_modules")]
    return names[-1] if names else None


_TENSOR_GUARD = re.compile(r"\b(size|rank|stride|dtype|device|requires_grad) mismatch")


def made_at(name: str, tree: Path, code: Any = None, tensor: bool = False) -> SourceLocation | None:
    """Where the tree makes attribute ``name``: first in the recompiled ``code``'s own class (the
    functions beside it, by the code objects its file compiles to: a sibling class that reads the
    same is another class), then in the rest of its file, then in the tree's other files. For a
    tensor's metadata (``tensor=True``: a size, rank or dtype guard) where it gets the metadata the
    guard expected: its ``register_buffer``/``register_parameter`` call; for a Python value
    (``self.calls == 1``) where it changes: an augmented assignment (``self.calls += 1``); then any
    assignment to ``self.<name>``."""
    escaped = re.escape(name)
    registered = re.compile(rf"""register_(?:buffer|parameter)\(\s*['"]{escaped}['"]""")
    changed = re.compile(rf"\bself\.{escaped}\s*(?:[-+*/%@&|^]|//|\*\*|<<|>>)=")
    assigned = re.compile(rf"\bself\.{escaped}\s*=(?!=)")
    patterns = [registered, changed, assigned] if tensor else [changed, registered, assigned]
    files = sorted(tree.rglob("*.py"))[:_MAX_SOURCES]
    own: Path | None = None
    scopes: list[tuple[Path, frozenset[int] | None]] = []
    if code is not None and relative_path(code.co_filename, tree) is not None:
        own = Path(code.co_filename).resolve()
        qualname = user_name(code.co_qualname)
        owner = qualname.rpartition(".")[0] if "." in qualname else qualname
        scopes.append((own, lines_of(str(own), owner)))  # its class, or the function alone
        scopes.append((own, None))
    scopes += [(f, None) for f in files if f.resolve() != own]
    for file, lines in scopes:
        try:
            text = file.read_text(errors="replace").splitlines()
        except OSError:
            continue
        for pattern in patterns:
            for n, line in enumerate(text, start=1):
                if (lines is None or n in lines) and pattern.search(line):
                    frame = traceback.FrameSummary(str(file), n, "<module>", line=line.strip())
                    return to_location(frame, tree, qualname=qualified_name(str(file), n))
    return None


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


def _guarded_made_at(text: str, code: Any, tree: Path) -> SourceLocation | None:
    """Where the tree makes the value failed guard ``text`` checks, in the recompiled ``code``'s own
    class first (``made_at``)."""
    name = guarded_name(text)
    return made_at(name, tree, code, bool(_TENSOR_GUARD.search(text))) if name else None


def _recompile_reasons(tree: Path) -> list[Recompile]:
    out: list[Recompile] = []
    seen: set[_Key] = set()
    for code, reasons in guard_failures.items():
        for reason in reasons:
            text = _guard_text(reason)
            key = _code_key(code, text)
            if key not in seen:
                seen.add(key)
                location = _recompiled_at(code, tree)
                origin = _guarded_made_at(text, code, tree)
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
    heard: list[limit_log.LimitHit], tree: Path, into: list[RecompileLimitHit]
) -> list[RecompileLimitHit]:
    """``into`` with the recompile limits Dynamo was heard hitting, once per frame and limit (the
    probe's first pass, which compiles with the configured backend, first)."""
    out = list(into)
    seen = {(h.function, _at(h.location), h.limit) for h in out}
    for hit in heard:
        location = _code_at(hit.code, tree)
        record = RecompileLimitHit(
            function=hit.code[0],
            location=location,
            limit=hit.limit,
            value=hit.value,
            compiles=hit.compiles,
            reason=_guard_text(hit.reason),
            made_at=_guarded_made_at(_guard_text(hit.reason), _CodeRef(*hit.code), tree),
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


# Dynamo's note when it gives up on a frame after a break it cannot resume from; the break itself
# is logged beside it, so the note marks that break rather than being one.
_FELL_BACK = "Failed to handle graph break gracefully"
_ENCOUNTERED = "Graph break encountered:"


def _wording(reason: str) -> int:
    """How fully a reason says what happened: Dynamo's registry entries ("Explanation:", hints, a
    documentation link) over its terse developer strings (``generic_jump TensorVariable()``)."""
    text = reason.strip()
    if text.startswith(_FELL_BACK):
        return 0
    return 2 if "Explanation:" in text else 1


_RESUME = re.compile(r"torch_dynamo_resume_in_(\w+?)_at_\d+$")


def _recompiling_after(lb: LoggedBreak | None, tree: Path) -> SourceLocation | None:
    """Where the earlier break is whose code after it (a resume function) Dynamo was compiling
    again when it took ``lb``; None where it took it on a first compile, or not in a resume function."""
    if lb is None or lb.compiling is None or not lb.recompiling:
        return None
    name, filename, first = lb.compiling
    match = _RESUME.match(name)
    return to_location(traceback.FrameSummary(filename, first, match.group(1)), tree) if match else None


_Event = tuple[str, list[traceback.FrameSummary], str, LoggedBreak | None]


def graph_breaks_of(
    explained: Any,
    tree: Path,
    logged: list[LoggedBreak] | None = None,
    later: list[LoggedBreak] | None = None,
) -> list[GraphBreak]:
    """Every break, one per line of the tree that reached it: ``explain``'s, with its user
    stacks, and those Dynamo logged while compiling that explain does not list (a break at a
    frame's first line, in a generator, ...). Dynamo reports one break up to three times (explain's
    terse reason, its log's registry entry, a note that it fell back to eager); they are one
    break, with the fullest wording. A break inside an installed package is placed at the tree's
    line that called into it, with the package's line as its origin, and Dynamo's second record of
    it, from the package's own frame, is the same break (``_reached_from_the_tree``).

    ``later``: the breaks Dynamo logged on later calls with the same inputs, where it recompiles.
    A line only they reach is a break too, counted once (the recompiles it was taken on are
    counted as recompiles); the lines the first call reached keep its counts. A break Dynamo took
    only while recompiling the code after another break says where that break is
    (``recompiling_after``)."""
    places: dict[tuple[str, int], dict[str, Any]] = {}
    first: list[_Event] = [(r.reason, r.user_stack, "explain", None) for r in explained.break_reasons]
    first += [(lb.reason, lb.stack, "log", lb) for lb in logged or []]
    for event in first:
        _add(places, event, tree)
    seen = set(places)
    for lb in later or []:
        _add(places, (lb.reason, lb.stack, "later", lb), tree, skip=seen)
    _reached_from_the_tree(places)
    out = []
    for p in places.values():
        reason = p["reason"] or p["note"] or _FELL_BACK
        out.append(
            GraphBreak(
                break_type=break_type(reason),
                reason=reason,
                location=p["location"],
                # explain counts each break it took; the log repeats them, and adds those explain misses
                count=max(p["explain"], p["log"], 1),
                origin=p["origin"],
                fell_back=p["fell_back"],
                recompiling_after=p["after"] if not p["first_compiles"] else None,
                **_nesting_fields(p["nesting"]),
            )
        )
    return out


def _nesting_fields(blocks: list[nesting.Block] | None) -> dict[str, Any]:
    """GraphBreak's nesting_depth and nesting; nothing where the source could not be read."""
    if blocks is None:
        return {}
    return {
        "nesting_depth": len(blocks),
        "nesting": [NestingBlock(kind=b.kind, line=b.line, code=b.code or None) for b in blocks],  # type: ignore[arg-type]
    }


def _add(
    places: dict[tuple[str, int], dict[str, Any]],
    event: _Event,
    tree: Path,
    skip: AbstractSet[tuple[str, int]] = frozenset(),
) -> None:
    """One record of a break, added to the place of the tree's line that reached it."""
    reason, stack, source, lb = event
    if not stack:
        return
    frame = innermost_user_frame(stack, tree) or stack[-1]
    location = to_location(frame, tree)
    key = (location.path, location.line)
    if key in skip:
        return
    if key not in places:
        places[key] = {
            "location": location,
            "reason": "",
            "note": "",
            "explain": 0,
            "log": 0,
            "later": 0,
            "fell_back": False,
            "origin": None,
            "after": None,
            "first_compiles": 0,
            # The blocks around the line in its own function, read from the side's own file here,
            # in the probe process: the report job never parses the tree's code.
            "nesting": nesting.blocks_in_file(frame.filename, frame.lineno or 0, frame.name),
        }
    place = places[key]
    after = _recompiling_after(lb, tree)
    if after is None:
        place["first_compiles"] += 1
    elif place["after"] is None:
        place["after"] = after
    if reason.strip().startswith(_FELL_BACK):
        place["fell_back"] = True
        # The break itself, where the note is all Dynamo logged of it.
        place["note"] = place["note"] or reason.strip().partition(_ENCOUNTERED)[2].strip()
        return
    place[source] += 1
    if _wording(reason) > _wording(place["reason"]):
        place["reason"] = reason.strip()
    innermost = stack[-1]
    if place["origin"] is None and location.in_tree and innermost is not frame:
        place["origin"] = to_location(innermost, tree)


def _reached_from_the_tree(places: dict[tuple[str, int], dict[str, Any]]) -> None:
    """A package's break that a line of the tree reaches is that line's break. Dynamo takes it
    twice: inlining the package's function from the tree's frame, it splits that frame at the call
    (the tree's line, the package's line as its origin); the function then runs as a frame of its
    own, which Dynamo compiles and splits at the package's line again, with no line of the tree
    on its stack. The second is the same break: counted with the first, not beside it."""
    reached: dict[tuple[str, int], dict[str, Any]] = {}
    for p in places.values():
        origin = p["origin"]
        if origin is not None:
            reached.setdefault((origin.path, origin.line), p)
    for key, p in list(places.items()):
        caller = None if p["location"].in_tree else reached.get(key)
        if caller is None:
            continue
        del places[key]
        caller["explain"] += p["explain"]
        caller["log"] += p["log"]
        caller["first_compiles"] += p["first_compiles"]
        if _wording(p["reason"]) > _wording(caller["reason"]):
            caller["reason"] = p["reason"]
        # Not its fell_back: Dynamo giving up the package's frame is not giving up the tree's,
        # which resumed after the call (and whose fell_back takes base's breaks there with it).


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
        first = (text.strip().splitlines() or [""])[0][:200]
        size = "its second inputs" if built.second is not None else f"a batch of {steps.batch_size(second)}"
        return f"not checked: the model raises on {size} ({name}: {first})"
    return None


def _recompile_counts(tree: Path) -> dict[_Key, int]:
    """How many times each guard has failed so far, per frame and guard text (keyed as ``_key``)."""
    out: dict[_Key, int] = {}
    for code, reasons in guard_failures.items():
        loc = _recompiled_at(code, tree)
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
    hits = _limit_hits(heard + heard_later, tree, [])
    recompiles = [
        r.model_copy(update={"every_step": True})
        if _key(r) not in during_first and again.get(_key(r), 0) > once.get(_key(r), 0)
        else r
        for r in _recompile_reasons(tree)
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
    hits = _limit_hits(heard_second, tree, hits)
    seen = {_key(r) for r in recompiles}
    recompiles += [r for r in _recompile_reasons(tree) if _key(r) not in seen]
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
