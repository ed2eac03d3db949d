"""One rank of the `fsdp` probe: ``torchrun ... -m perfcheck.runner.fsdp_worker SPEC.json OUT_DIR``.

Every rank builds the workload from its side's tree, shards it with FSDP2 (``fully_shard``: each
module of the wrap classes, then the root, unless build() sharded it itself) and trains a few steps
per variant: eager, each wrapped layer compiled (``module.compile()``) and the whole model
compiled. It records what Dynamo compiled, per function of the model, and one profiled step's
collectives, each with the FSDP unit whose ``FSDP::`` region issued it; after the eager variant,
the DTensor layout of every parameter and gradient and the redistributes the model's own code
made. Rank 0 gathers the ranks' graph hashes and writes OUT_DIR/fsdp.json.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import statistics
import sys
import time
import traceback
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import torch
import torch.distributed as dist
from torch._dynamo.utils import counters, guard_failures
from torch.distributed import fsdp as fsdp_api
from torch.distributed.device_mesh import DeviceMesh, init_device_mesh
from torch.distributed.tensor import DTensor

from perfcheck.core.probes.fsdp import (
    FsdpMetrics,
    FsdpSettings,
    FsdpVariant,
    GraphGroup,
    ParamLayout,
    Redistribute,
    UnitCollective,
)
from perfcheck.runner import break_log
from perfcheck.runner import step as steps
from perfcheck.runner.comm_trace import DTYPE_BYTES, STEP_MARK, comm_overlap_pct
from perfcheck.runner.ddp_worker import Recorder, gather_lines, rank_device
from perfcheck.runner.loader import call_build, load_build
from perfcheck.runner.locate import innermost_user_frame, relative_path, to_location
from perfcheck.runner.peak_memory import peak_rss_mb
from perfcheck.runner.probes.compile_probe import graph_breaks_of
from perfcheck.runner.process_end import run_and_end
from perfcheck.schema import RankGraphs, SourceLocation, load_model
from perfcheck.spec import ProbeSpec

PROFILED_STEPS = 2
_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


# -- where the workload itself shards ---------------------------------------------------------


class _Calls:
    """The workload's own fully_shard and distribute_tensor calls, by the module or tensor they
    made, with the line of the tree that made them."""

    def __init__(self, tree: Path) -> None:
        self.tree = tree
        self.sites: dict[int, SourceLocation] = {}

    def site(self) -> SourceLocation | None:
        frame = innermost_user_frame(traceback.extract_stack()[:-2], self.tree)
        return to_location(frame, self.tree) if frame is not None else None

    @contextlib.contextmanager
    def watching(self) -> Iterator[None]:
        """While the workload is imported and built, its fully_shard / distribute_tensor calls go
        through here (names it imported from torch before are looked up at call time too)."""
        import torch.distributed.tensor as dtensor_api

        real_shard, real_distribute = fsdp_api.fully_shard, dtensor_api.distribute_tensor

        def fully_shard(module: Any, *args: Any, **kwargs: Any) -> Any:
            out = real_shard(module, *args, **kwargs)
            where = self.site()
            for m in module if isinstance(module, list | tuple) else [module]:
                if where is not None:
                    for p in m.parameters(recurse=False):
                        self.sites.setdefault(id(p), where)
                    self.sites.setdefault(id(m), where)
            return out

        def distribute_tensor(tensor: Any, *args: Any, **kwargs: Any) -> Any:
            out = real_distribute(tensor, *args, **kwargs)
            where = self.site()
            if where is not None:
                self.sites[id(out)] = where
            return out

        fsdp_api.fully_shard, dtensor_api.distribute_tensor = fully_shard, distribute_tensor
        try:
            yield
        finally:
            fsdp_api.fully_shard, dtensor_api.distribute_tensor = real_shard, real_distribute


# -- wrapping ---------------------------------------------------------------------------------


def repeated_classes(model: torch.nn.Module) -> list[str]:
    """Classes that repeat inside a ModuleList or Sequential: the blocks of a model."""
    found: Counter[str] = Counter()
    for m in model.modules():
        if isinstance(m, torch.nn.ModuleList | torch.nn.Sequential):
            kinds = Counter(type(c).__name__ for c in m.children())
            found.update({k: n for k, n in kinds.items() if n > 1})
    return sorted(found)


def _units(model: torch.nn.Module) -> dict[str, Any]:
    return {name: m for name, m in model.named_modules() if isinstance(m, fsdp_api.FSDPModule)}


def _shard(model: torch.nn.Module, settings: FsdpSettings, mesh: DeviceMesh) -> list[str]:
    """fully_shard each module of the wrap classes, innermost first, then the root; the classes."""
    classes = settings.wrap or repeated_classes(model)
    policy = fsdp_api.MixedPrecisionPolicy(
        param_dtype=_DTYPES.get(settings.param_dtype or ""),
        reduce_dtype=_DTYPES.get(settings.reduce_dtype or ""),
    )
    chosen = [m for m in model.modules() if m is not model and type(m).__name__ in classes]
    for m in [*reversed(chosen), model]:  # children before the modules holding them, as FSDP2 wants
        fsdp_api.fully_shard(
            m, mesh=mesh, reshard_after_forward=settings.reshard_after_forward, mp_policy=policy
        )
    return list(classes)


# -- what Dynamo compiled ---------------------------------------------------------------------


class _Recorder(Recorder):
    """The ddp probe's recorder, noting also the function Dynamo was compiling (its code object)
    when it handed the graph over."""

    def __init__(self, backend: str) -> None:
        super().__init__(backend)
        self.codes: list[Any] = []

    def __call__(self, gm: torch.fx.GraphModule, example_inputs: list[Any]) -> Any:
        code = None
        with contextlib.suppress(Exception):  # an internal of Dynamo; without it, no grouping
            from torch._dynamo.symbolic_convert import InstructionTranslator

            code = InstructionTranslator.current_tx().f_code
        self.codes.append(code)
        return super().__call__(gm, example_inputs)


def _owner(code: Any, model: torch.nn.Module) -> tuple[str, int]:
    """ "Class.function" for a method of a module class in the model, and how many modules of it."""
    name: str = code.co_name
    for m in model.modules():
        cls: type = type(m)
        fn = getattr(cls, name, None)
        if getattr(fn, "__code__", None) is not code:
            continue
        # FSDP2 makes a subclass of each class it wraps: name the workload's own class.
        own = [c.__name__ for c in cls.__mro__ if not c.__module__.startswith("torch.")]
        same = [x for x in model.modules() if getattr(type(x), name, None) is fn]
        return f"{own[0] if own else cls.__name__}.{name}", len(same)
    return name, 0


_GUARD = re.compile(r"^\s*\d+/\d+:\s*")
_GUARD_SOURCE = re.compile(r"#\s*(?P<path>[^#]+):(?P<line>\d+) in (?P<function>\S+)\s*$")


def _guard(code: Any, tree: Path) -> tuple[str | None, SourceLocation | None]:
    """The first guard that failed for ``code`` ("self.index == 0  # if self.index % 2:") and
    the line of the tree it guards, as Dynamo's guard-failure text gives them."""
    reasons = guard_failures.get(code) or []
    if not reasons:
        return None, None
    text = _GUARD.sub("", str(reasons[0]).split("\nUser stack trace:")[0]).strip()
    where = None
    found = _GUARD_SOURCE.search(text)
    if found is not None:
        text = text[: found.start()].rstrip()
        # Dynamo's text can clip the start of the path; the function's own file is the full one.
        path = found["path"].strip()
        if Path(path).name == Path(code.co_filename).name:
            path = code.co_filename
        frame = traceback.FrameSummary(path, int(found["line"]), found["function"])
        where = to_location(frame, tree)
    return re.sub(r"\s{2,}#", "  #", text)[:300], where


def graph_groups(rec: _Recorder, model: torch.nn.Module, tree: Path) -> list[GraphGroup]:
    per: dict[Any, list[str]] = {}
    for code, digest in zip(rec.codes, rec.hashes, strict=True):
        if code is not None:
            per.setdefault(code, []).append(digest)
    groups = []
    for code, digests in per.items():
        name, modules = _owner(code, model)
        guard, guarded = _guard(code, tree)
        start = traceback.FrameSummary(code.co_filename, code.co_firstlineno, code.co_name)
        groups.append(
            GraphGroup(
                code=name,
                location=guarded if guarded is not None and guarded.in_tree else to_location(start, tree),
                graphs=len(digests),
                distinct=len(set(digests)),
                modules=modules,
                guard=guard,
            )
        )
    return sorted(
        groups, key=lambda g: (g.location.path if g.location else "", g.location.line if g.location else 0)
    )


# -- collectives, with the FSDP unit that issued each -----------------------------------------


def _unit_of(event: dict[str, Any], regions: list[dict[str, Any]]) -> str | None:
    """The innermost FSDP:: region around ``event`` on its thread: "FSDP::all_gather (layers.0)"
    is unit layers.0, a region without a name the root's; None: issued outside FSDP."""
    start, end = event["ts"], event["ts"] + event["dur"]
    inside = [
        r
        for r in regions
        if r.get("tid") == event.get("tid") and r["ts"] <= start and r["ts"] + r["dur"] >= end
    ]
    if not inside:
        return None
    name = str(max(inside, key=lambda r: r["ts"])["name"])
    return name[name.index("(") + 1 : name.rindex(")")] if name.endswith(")") and "(" in name else ""


def _op(name: str) -> str:
    key = name.removeprefix("c10d::").strip("_").replace("_", "")
    for stem, op in (
        ("allgather", "all_gather"),
        ("reducescatter", "reduce_scatter"),
        ("allreduce", "all_reduce"),
    ):
        if key.startswith(stem):
            return op
    return key


def _message(args: dict[str, Any]) -> tuple[str, int]:
    """dtype and bytes of the larger of the call's first two tensors: the unsharded message. A
    coalesced call records its tensors as a "TensorList" without their dtype: 0 bytes, unknown."""
    dims, types = args.get("Input Dims") or [], args.get("Input type") or []
    best, dtype = 0, "unknown"
    for d, t in list(zip(dims, types, strict=False))[:2]:
        shapes = d if d and isinstance(d[0], list) else [d]
        n = sum(int(torch.Size(s).numel()) for s in shapes if isinstance(s, list))
        size = DTYPE_BYTES.get(str(t).lower(), 0)
        if n * size >= best:
            best, dtype = n * size, str(t)
    return dtype, best


def collectives(events: list[dict[str, Any]], world: int, profiled: int) -> list[UnitCollective]:
    done = [e for e in events if e.get("ph") == "X" and isinstance(e.get("dur"), int | float)]
    regions = [e for e in done if str(e.get("name", "")).startswith("FSDP::")]
    seen: Counter[tuple[str, str | None, str, int]] = Counter()
    for e in done:
        name = str(e.get("name", ""))
        if not name.startswith("c10d::") or "barrier" in name or "wait" in name:
            continue
        dtype, size = _message(e.get("args") or {})
        seen[(_op(name), _unit_of(e, regions), dtype, size)] += 1
    return [
        UnitCollective(
            op=op, unit=unit, dtype=dtype, bytes=size, group_size=world, count=max(1, round(n / profiled))
        )
        for (op, unit, dtype, size), n in sorted(
            seen.items(), key=lambda kv: (kv[0][0], kv[0][1] or "", kv[0][2:])
        )
    ]


def _profile(
    step: Callable[..., Any], inputs: tuple[Any, ...], device: str, trace: Path
) -> list[dict[str, Any]]:
    from torch.profiler import ProfilerActivity, profile, record_function

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.startswith("cuda") else [])
    with profile(activities=activities, record_shapes=True) as prof:
        for _ in range(PROFILED_STEPS):
            with record_function(STEP_MARK):
                step(*inputs)
        steps.synchronize("cuda" if device.startswith("cuda") else "cpu")
    prof.export_chrome_trace(str(trace))
    return list(json.loads(trace.read_text()).get("traceEvents", []))


# -- layouts ----------------------------------------------------------------------------------


def _placements(t: Any) -> tuple[list[str], list[int]]:
    if isinstance(t, DTensor):
        return [repr(p) for p in t.placements], list(t.device_mesh.shape)
    return [], []


def layouts(model: torch.nn.Module, calls: _Calls) -> list[ParamLayout]:
    units = _units(model)
    owner: dict[int, str] = {}
    for name, unit in sorted(units.items(), key=lambda kv: -len(kv[0])):  # innermost unit first
        for p in unit.parameters():
            owner.setdefault(id(p), name)
    out = []
    for name, p in model.named_parameters():
        placements, mesh = _placements(p)
        grad = _placements(p.grad)[0] if p.grad is not None else None
        out.append(
            ParamLayout(
                name=name,
                unit=owner.get(id(p)),
                placements=placements,
                mesh=mesh,
                dtype=str(p.dtype).removeprefix("torch."),
                grad_placements=grad,
                sharded_at=calls.sites.get(id(p)),
            )
        )
    return out


@contextlib.contextmanager
def redistributes(tree: Path) -> Iterator[list[Redistribute]]:
    """Every DTensor.redistribute the workload's own code calls while the block runs (eager only:
    Dynamo would trace this wrapper)."""
    seen: list[Redistribute] = []
    real = DTensor.redistribute

    def redistribute(self: DTensor, device_mesh: Any = None, placements: Any = None, **kwargs: Any) -> Any:
        frame = innermost_user_frame(traceback.extract_stack()[:-1], tree)
        if frame is not None:
            seen.append(
                Redistribute(
                    source=[repr(p) for p in self.placements],
                    target=[repr(p) for p in placements or ()],
                    mesh=list((device_mesh or self.device_mesh).shape),
                    shape=list(self.shape),
                    location=to_location(frame, tree),
                )
            )
        return real(self, device_mesh, placements, **kwargs)

    DTensor.redistribute = redistribute  # type: ignore[method-assign]
    try:
        yield seen
    finally:
        DTensor.redistribute = real  # type: ignore[method-assign]


def _merge(calls: list[Redistribute]) -> list[Redistribute]:
    counted: Counter[str] = Counter(c.model_dump_json(exclude={"count"}) for c in calls)
    return [Redistribute.model_validate({**json.loads(k), "count": n}) for k, n in counted.items()]


# -- one variant ------------------------------------------------------------------------------


class Built:
    """One rank's sharded workload."""

    def __init__(
        self, spec: ProbeSpec, settings: FsdpSettings, tree: Path, device: str, mesh: DeviceMesh
    ) -> None:
        self.calls = _Calls(tree)
        torch.manual_seed(0)
        with self.calls.watching():
            built = call_build(load_build(spec.workload.entry, tree), device)
        self.model = steps.prepare(built.model, train=True)
        self.inputs = built.inputs
        self.wrapped_by = "workload" if _units(self.model) else "perfcheck"
        self.classes = _shard(self.model, settings, mesh) if self.wrapped_by == "perfcheck" else []


def _fsdp_break(lb: break_log.LoggedBreak, tree: Path) -> bool:
    """A break FSDP2 makes on purpose: Dynamo stopped inside torch.distributed (its hooks are
    torch._dynamo.disable'd), called from the workload's line that calls a sharded module."""
    frames = [relative_path(f.filename, tree) for f in lb.stack]
    last = max((i for i, rel in enumerate(frames) if rel is not None), default=-1)
    return any("/torch/distributed/" in f.filename.replace("\\", "/") for f in lb.stack[last + 1 :])


def _memory_mb(device: str) -> float:
    if device.startswith("cuda"):
        return round(torch.cuda.max_memory_allocated() / 2**20, 2)
    return round(peak_rss_mb(), 2)


def run_variant(
    variant: str, spec: ProbeSpec, settings: FsdpSettings, b: Built, device: str, world: int, out_dir: Path
) -> tuple[FsdpVariant, list[str]]:
    torch._dynamo.reset()
    counters.clear()
    guard_failures.clear()
    if device.startswith("cuda"):
        torch.cuda.reset_peak_memory_stats()
    rec = _Recorder(spec.compile.backend)
    net: Any = b.model
    if variant == "compiled_layers":
        layers = [m for name, m in _units(b.model).items() if name] or [b.model]
        for m in layers:
            m.compile(backend=rec, dynamic=spec.compile.dynamic)
    elif variant == "compiled_model":
        net = torch.compile(b.model, backend=rec, dynamic=spec.compile.dynamic)
    kind = "cuda" if device.startswith("cuda") else "cpu"
    step = steps.make_step(
        net, True, spec.workload.amp, kind, optimizer=torch.optim.SGD(b.model.parameters(), lr=0.0)
    )
    times: list[float] = []
    with break_log.recording() as logged:
        for i in range(settings.steps):
            start = time.perf_counter()
            step(*b.inputs)
            steps.synchronize(kind)
            if i:  # the first step compiles
                times.append((time.perf_counter() - start) * 1000)
        events = _profile(step, b.inputs, device, out_dir / f"trace-{variant}-rank{dist.get_rank()}.json")
    tree = Path(spec.tree)
    theirs = [lb for lb in logged if _fsdp_break(lb, tree)]
    ours = graph_breaks_of(SimpleNamespace(break_reasons=[]), tree, [lb for lb in logged if lb not in theirs])
    metrics = FsdpVariant(
        variant=variant,  # type: ignore[arg-type]
        step_ms=round(statistics.median(times), 4) if times else None,
        graph_count=len(rec.hashes),
        graph_breaks=ours,
        fsdp_breaks=len(theirs),
        recompiles=max(0, len(rec.hashes) - len(set(rec.codes))),
        graphs=graph_groups(rec, b.model, Path(spec.tree)),
        collectives=collectives(events, world, PROFILED_STEPS),
        comm_overlap_pct=comm_overlap_pct(events),
        peak_memory_mb=[_memory_mb(device)],
    )
    if variant == "compiled_layers":  # the next variant starts from the plain modules again
        for m in [m for name, m in _units(b.model).items() if name] or [b.model]:
            m._compiled_call_impl = None
    return metrics, rec.hashes


def layout_pass(
    b: Built, spec: ProbeSpec, tree: Path
) -> tuple[list[ParamLayout], list[Redistribute], list[list[str]]]:
    """One eager forward and backward: the parameters' and gradients' layouts, the redistributes
    the model's code makes, and the layouts of outputs that are DTensors."""
    for p in b.model.parameters():
        p.grad = None
    with (
        redistributes(tree) as moved,
        steps.autocast(spec.workload.amp, "cuda" if spec.device == "cuda" else "cpu"),
    ):
        out = b.model(*b.inputs)
    steps._loss(out).backward()
    outs = [_placements(t)[0] for t in torch.utils._pytree.tree_leaves(out) if isinstance(t, DTensor)]
    params = layouts(b.model, b.calls)
    for p in b.model.parameters():
        p.grad = None
    return params, _merge(moved), outs


def main(argv: list[str]) -> int:
    spec = load_model(ProbeSpec, Path(argv[0]).read_bytes(), argv[0])
    settings = FsdpSettings.model_validate(spec.settings)
    out_dir, tree = Path(argv[1]), Path(spec.tree)
    device = rank_device(spec, int(os.environ.get("LOCAL_RANK", "0")))
    if device.startswith("cuda"):
        torch.cuda.set_device(device)
    backend = (
        settings.backend if settings.backend != "auto" else ("nccl" if device.startswith("cuda") else "gloo")
    )
    dist.init_process_group(backend)
    rank, world = dist.get_rank(), dist.get_world_size()
    mesh = init_device_mesh("cuda" if device.startswith("cuda") else "cpu", (world,))
    built = Built(spec, settings, tree, device, mesh)
    params, moved, outs = layout_pass(built, spec, tree)
    variants: list[FsdpVariant] = []
    for variant in settings.variants:
        try:
            metrics, hashes = run_variant(variant, spec, settings, built, device, world, out_dir)
        except Exception as err:  # one variant failing is a finding; the others still run
            metrics, hashes = FsdpVariant(variant=variant, error=f"{type(err).__name__}: {err}"[:2000]), []
        ranks = gather_lines(hashes, device)
        memory = gather_lines([str(m) for m in metrics.peak_memory_mb], device)
        variants.append(
            metrics.model_copy(
                update={
                    "ranks": [RankGraphs(rank=r, graph_hashes=h) for r, h in enumerate(ranks)]
                    if variant != "eager"
                    else [],
                    "peak_memory_mb": [float(m[0]) for m in memory if m],
                }
            )
        )
    if rank == 0:
        result = FsdpMetrics(
            backend=backend,
            world_size=world,
            device=device.split(":")[0],
            wrapped_by=built.wrapped_by,  # type: ignore[arg-type]
            wrap=built.classes,
            units=sorted(_units(built.model)),
            reshard_after_forward=settings.reshard_after_forward if built.wrapped_by == "perfcheck" else None,
            param_dtype=settings.param_dtype,
            reduce_dtype=settings.reduce_dtype,
            params=params,
            redistributes=moved,
            outputs=outs,
            variants=variants,
        )
        (out_dir / "fsdp.json").write_text(result.model_dump_json())
    with contextlib.suppress(Exception):
        dist.barrier()
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    run_and_end(lambda: main(sys.argv[1:]))
