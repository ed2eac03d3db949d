"""One rank of the `fsdp` probe:
``torchrun ... -m perfcheck.runner.distributed.fsdp_worker SPEC.json OUT_DIR``.

Every rank builds the workload from its side's tree, shards it with FSDP2 (``fully_shard``: each
module of the wrap classes, then the root, unless build() sharded it itself) and trains a few steps
per variant: eager, each wrapped layer compiled (``module.compile()``) and the whole model
compiled. It records what Dynamo compiled, per function of the model, and one profiled step's
collectives, each with its size and the FSDP unit whose ``FSDP::`` region issued it; after one
eager step, the FSDP units as FSDP2 itself holds them (one per ``fully_shard`` call, the modules it
grouped, the call's line in the workload, ``reshard_after_forward``, mixed precision and offload
as they run), the DTensor layout of every parameter and gradient and the redistributes the model's own
code made. The ranks gather their graph hashes and, where they differ, the nodes of the first
graph that differs, so the line that differs between ranks is named. The last timed step's
collectives come from the process groups' flight recorder too, each with its group and where in
the compiled step it ran (perfcheck/runner/distributed/comm_groups.py). Rank 0 writes OUT_DIR/fsdp.json.
"""

from __future__ import annotations

import contextlib
import json
import os
import statistics
import sys
import time
import traceback
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import torch
import torch.distributed as dist
from torch._dynamo.utils import counters, guard_failures
from torch.distributed import fsdp as fsdp_api
from torch.distributed.device_mesh import DeviceMesh, init_device_mesh
from torch.distributed.tensor import DTensor

from perfcheck.core.probes.collective_groups import CollectiveCall, RankCalls
from perfcheck.core.probes.ddp import RankGraphs
from perfcheck.core.probes.fsdp_models import (
    FsdpMetrics,
    FsdpSettings,
    FsdpUnit,
    FsdpVariant,
    ParamLayout,
    Redistribute,
    UnitCollective,
    shared,
    unit_name,
)
from perfcheck.measures import SourceLocation
from perfcheck.runner import step as steps
from perfcheck.runner.distributed import comm_groups
from perfcheck.runner.distributed.comm_trace import comm_overlap_pct
from perfcheck.runner.distributed.ddp_worker import gather_lines, rank_device
from perfcheck.runner.distributed.fsdp_collectives import PROFILED_STEPS, collectives, profile_steps
from perfcheck.runner.distributed.fsdp_graphs import (
    FrameRecorder,
    graph_groups,
    rank_difference,
)
from perfcheck.runner.dynamo import break_log
from perfcheck.runner.dynamo.break_events import graph_breaks_of
from perfcheck.runner.process.end import run_and_end
from perfcheck.runner.process.loader import call_build, load_build
from perfcheck.runner.source.locate import innermost_user_frame, relative_path, to_location
from perfcheck.runner.timing.peak_memory import peak_rss_mb
from perfcheck.schema import load_model
from perfcheck.spec import ProbeSpec

_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


# -- where the workload itself shards ---------------------------------------------------------


class _Calls:
    """Where the workload itself shards: each of its fully_shard calls, by the FSDP state the call
    made (one per unit, whichever module or modules it was given and however the workload imported
    fully_shard), and each distribute_tensor call, by the tensor it made; each with the line of the
    tree that made the call."""

    def __init__(self, tree: Path) -> None:
        self.tree = tree
        self.sites: dict[int, SourceLocation] = {}

    def site(self) -> SourceLocation | None:
        frame = innermost_user_frame(traceback.extract_stack()[:-2], self.tree)
        return to_location(frame, self.tree) if frame is not None else None

    @contextlib.contextmanager
    def watching(self) -> Iterator[None]:
        """While the workload is imported and built, FSDP's per-call state init and
        distribute_tensor report here (names the workload imported from torch before are looked
        up at call time too)."""
        import torch.distributed.tensor as dtensor_api
        from torch.distributed.fsdp._fully_shard._fsdp_state import FSDPState

        real_init, real_distribute = FSDPState.init, dtensor_api.distribute_tensor

        def init(state: Any, *args: Any, **kwargs: Any) -> Any:
            # fully_shard(module or [modules]) makes one state and calls its init once.
            where = self.site()
            if where is not None:
                self.sites[id(state)] = where
            return real_init(state, *args, **kwargs)

        def distribute_tensor(tensor: Any, *args: Any, **kwargs: Any) -> Any:
            out = real_distribute(tensor, *args, **kwargs)
            where = self.site()
            if where is not None:
                self.sites[id(out)] = where
            return out

        FSDPState.init, dtensor_api.distribute_tensor = init, distribute_tensor  # type: ignore[method-assign,assignment]
        try:
            yield
        finally:
            FSDPState.init, dtensor_api.distribute_tensor = real_init, real_distribute  # type: ignore[method-assign]


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
    """Every module FSDP manages as (part of) a unit, by its path."""
    return {name: m for name, m in model.named_modules() if isinstance(m, fsdp_api.FSDPModule)}


def _shard(model: torch.nn.Module, settings: FsdpSettings, mesh: DeviceMesh) -> list[str]:
    """fully_shard each module of the wrap classes, innermost first, then the root; the classes.
    ``reshard_after_forward`` unset is FSDP2's own default (None): every unit reshards after
    forward but the root, which keeps its parameters for backward."""
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


def _states(model: torch.nn.Module) -> list[tuple[Any, list[str]]]:
    """FSDP's states in the model's order, one per fully_shard call (a unit), each with the paths
    of the modules that call grouped: fully_shard([a, b]) is one state of two modules."""
    seen: dict[int, tuple[Any, list[str]]] = {}
    for name, m in model.named_modules():
        if isinstance(m, fsdp_api.FSDPModule):
            state = m._get_fsdp_state()
            seen.setdefault(id(state), (state, []))[1].append(name)
    return list(seen.values())


def _groups(state: Any) -> list[Any]:
    """The state's parameter groups (torch 2.13 keeps a list; earlier releases one group)."""
    many = getattr(state, "_fsdp_param_groups", None)
    if many is not None:
        return list(many)
    one = getattr(state, "_fsdp_param_group", None)
    return [one] if one is not None else []


def _reshards(group: Any) -> bool | int:
    """reshard_after_forward as the group runs it: False keeps the unsharded parameters after
    forward, True frees them, an int reshards them to that many ranks."""
    after, mesh = group.post_forward_mesh_info, group.mesh_info
    if after is None:
        return False
    if after == mesh:
        return True
    return int(getattr(after, "shard_mesh_size", 0)) or True


def _dtype(d: Any) -> str | None:
    return str(d).removeprefix("torch.") if d is not None else None


class Units:
    """The FSDP units of the sharded model as FSDP itself holds them, once its lazy init ran (the
    first forward: only then does the root's reshard_after_forward take its default)."""

    def __init__(self, model: torch.nn.Module, calls: _Calls) -> None:
        self.units: list[FsdpUnit] = []
        self.of_param: dict[int, str] = {}  # id(sharded parameter) -> unit name
        self.by_fqn: dict[str, str] = {}  # FSDP's own name of the unit ("a, b") -> unit name
        for state, modules in _states(model):
            name = unit_name(modules)
            groups = _groups(state)
            policy = groups[0].mp_policy if groups else getattr(state, "_mp_policy", None)
            params = [fp for g in groups for fp in g.fsdp_params]
            for fp in params:
                self.of_param[id(fp.sharded_param)] = name
            for g in groups:
                self.by_fqn[g._module_fqn or ""] = name
            self.units.append(
                FsdpUnit(
                    name=name,
                    modules=modules,
                    reshard_after_forward=_reshards(groups[0]) if groups else None,
                    param_dtype=_dtype(getattr(policy, "param_dtype", None)),
                    reduce_dtype=_dtype(getattr(policy, "reduce_dtype", None)),
                    output_dtype=_dtype(getattr(policy, "output_dtype", None)),
                    cast_forward_inputs=getattr(policy, "cast_forward_inputs", None),
                    offload_policy=repr(groups[0].offload_policy)[:200] if groups else None,
                    params=len(params),
                    sharded_at=calls.sites.get(id(state)),
                )
            )


# -- what Dynamo compiled ---------------------------------------------------------------------


# -- collectives, with the FSDP unit that issued each -----------------------------------------


# -- layouts ----------------------------------------------------------------------------------


def _placements(t: Any) -> tuple[list[str], list[int]]:
    if isinstance(t, DTensor):
        return [repr(p) for p in t.placements], list(t.device_mesh.shape)
    return [], []


def layouts(model: torch.nn.Module, calls: _Calls, units: Units) -> list[ParamLayout]:
    """Every parameter's layout (read while the parameters are sharded), the unit FSDP put it in
    and the workload's line that sharded it: its distribute_tensor, else its unit's fully_shard."""
    site = {u.name: u.sharded_at for u in units.units}
    out = []
    for name, p in model.named_parameters():
        placements, mesh = _placements(p)
        grad = _placements(p.grad)[0] if p.grad is not None else None
        unit = units.of_param.get(id(p))
        out.append(
            ParamLayout(
                name=name,
                unit=unit,
                placements=placements,
                mesh=mesh,
                dtype=str(p.dtype).removeprefix("torch."),
                grad_placements=grad,
                sharded_at=calls.sites.get(id(p)) or (site.get(unit) if unit is not None else None),
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
        self.units: Units | None = None  # after the first forward (layout_pass)


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


def _sized(found: list[UnitCollective], calls: list[CollectiveCall]) -> list[UnitCollective]:
    """The profiler's collectives; on gloo, whose trace has no group, each with the size of the
    group the recorded calls ran it on (NCCL's trace says it itself)."""
    if dist.get_backend() != "gloo":
        return found
    return comm_groups.with_group_sizes(found, calls, dist.get_world_size())


def run_variant(
    variant: str, spec: ProbeSpec, settings: FsdpSettings, b: Built, device: str, world: int, out_dir: Path
) -> tuple[FsdpVariant, FrameRecorder]:
    torch._dynamo.reset()
    counters.clear()
    guard_failures.clear()
    if device.startswith("cuda"):
        torch.cuda.reset_peak_memory_stats()
    rec = FrameRecorder(spec.compile.backend, Path(spec.tree))
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
    since = None
    with break_log.recording() as logged:
        for i in range(settings.steps):
            if i == settings.steps - 1:  # the last step's collectives, with their groups
                since = comm_groups.mark()
            start = time.perf_counter()
            step(*b.inputs)
            steps.synchronize(kind)
            if i:  # the first step compiles
                times.append((time.perf_counter() - start) * 1000)
        calls = comm_groups.calls_since(since, Path(spec.tree), rec.sites)
        events = profile_steps(
            step, b.inputs, device, out_dir / f"trace-{variant}-rank{dist.get_rank()}.json"
        )
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
        collectives=_sized(
            collectives(events, world, PROFILED_STEPS, b.units.by_fqn if b.units else None), calls
        ),
        comm_overlap_pct=comm_overlap_pct(events),
        peak_memory_mb=[_memory_mb(device)],
        # this rank's own; main() gathers every rank's
        collective_calls=[RankCalls(ranks=[dist.get_rank()], calls=calls)],
    )
    if variant == "compiled_layers":  # the next variant starts from the plain modules again
        for m in [m for name, m in _units(b.model).items() if name] or [b.model]:
            m._compiled_call_impl = None
    return metrics, rec


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
    b.units = Units(b.model, b.calls)
    params = layouts(b.model, b.calls, b.units)
    for p in b.model.parameters():
        p.grad = None
    return params, _merge(moved), outs


def main(argv: list[str]) -> int:
    spec = load_model(ProbeSpec, Path(argv[0]).read_bytes(), argv[0])
    settings = spec.section(FsdpSettings)
    out_dir, tree = Path(argv[1]), Path(spec.tree)
    device = rank_device(spec, int(os.environ.get("LOCAL_RANK", "0")))
    if device.startswith("cuda"):
        torch.cuda.set_device(device)
    backend = (
        settings.backend if settings.backend != "auto" else ("nccl" if device.startswith("cuda") else "gloo")
    )
    comm_groups.enable()
    dist.init_process_group(backend)
    rank, world = dist.get_rank(), dist.get_world_size()
    mesh = init_device_mesh("cuda" if device.startswith("cuda") else "cpu", (world,))
    built = Built(spec, settings, tree, device, mesh)
    params, moved, outs = layout_pass(built, spec, tree)
    variants: list[FsdpVariant] = []
    for variant in settings.variants:
        try:
            metrics, rec = run_variant(variant, spec, settings, built, device, world, out_dir)
        except Exception as err:  # one variant failing is a finding; the others still run
            metrics = FsdpVariant(variant=variant, error=f"{type(err).__name__}: {err}"[:2000])
            rec = FrameRecorder(spec.compile.backend, tree)
        hashes = gather_lines(rec.hashes, device)
        mine = [c for r in metrics.collective_calls for c in r.calls]
        calls = comm_groups.by_ranks(gather_lines(comm_groups.lines(mine), device))
        ranks = (
            [RankGraphs(rank=r, graph_hashes=h) for r, h in enumerate(hashes)] if variant != "eager" else []
        )
        differs_at, differing = rank_difference(rec, ranks, tree, device)
        memory = gather_lines([str(m) for m in metrics.peak_memory_mb], device)
        variants.append(
            metrics.model_copy(
                update={
                    "ranks": ranks,
                    "rank_differs_at": differs_at,
                    "rank_differing_nodes": differing,
                    "peak_memory_mb": [float(m[0]) for m in memory if m],
                    "collective_calls": calls,
                }
            )
        )
    if rank == 0:
        units = built.units.units if built.units else []
        result = FsdpMetrics(
            backend=backend,
            world_size=world,
            device=device.split(":")[0],
            wrapped_by=built.wrapped_by,  # type: ignore[arg-type]
            wrap=built.classes,
            units=units,
            reshard_after_forward=shared([u.reshard_after_forward for u in units if u.name]),
            param_dtype=shared([u.param_dtype for u in units]),
            reduce_dtype=shared([u.reduce_dtype for u in units]),
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
