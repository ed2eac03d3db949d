"""One rank of the `ddp` probe: ``torchrun ... -m perfcheck.runner.distributed.ddp_worker SPEC.json OUT_DIR``.

Every rank builds the workload from its side's tree and trains it a few steps under each DDP
variant: eager ``DDP(model)``, ``torch.compile(DDP(model))`` (Dynamo's DDPOptimizer splits the
graph at bucket boundaries so all-reduce can overlap backward) and ``DDP(torch.compile(model))``.
Each rank hashes the graphs its backend is handed; rank 0 gathers everything and writes
OUT_DIR/ddp.json. One profiled step per variant (never a timed one) gives the collectives and
how much of their time ran while compute did; the last timed step's collectives are read from the
process groups' flight recorder, each with its group and where in the compiled step it ran
(perfcheck/runner/distributed/comm_groups.py).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch._dynamo.utils import counters
from torch.nn.parallel import DistributedDataParallel

from perfcheck.core.probes.collective_groups import CollectiveCall
from perfcheck.core.probes.ddp import Collective, DdpMetrics, DdpSettings, DdpVariantMetrics, RankGraphs
from perfcheck.runner import step as steps
from perfcheck.runner.distributed import comm_groups
from perfcheck.runner.distributed.comm_trace import STEP_MARK, collectives, comm_overlap_pct
from perfcheck.runner.dynamo.break_events import graph_breaks_of
from perfcheck.runner.process.end import run_and_end
from perfcheck.runner.process.loader import call_build, load_build
from perfcheck.schema import load_model
from perfcheck.spec import ProbeSpec

# Steps in the profile pass: the overlap is their pooled figure and the collectives their average.
PROFILED_STEPS = 3


def rank_device(spec: ProbeSpec, local_rank: int) -> str:
    if spec.device != "cuda":
        return "cpu"
    # One GPU per rank when there are enough; otherwise ranks share (gloo on one GPU).
    return f"cuda:{local_rank % max(1, torch.cuda.device_count())}"


def _backend_name(spec: ProbeSpec) -> str:
    if spec.section(DdpSettings).backend != "auto":
        return spec.section(DdpSettings).backend
    return "nccl" if spec.device == "cuda" else "gloo"


class Recorder:
    """Wraps the configured backend: counts the graphs it is handed, hashes their code and notes
    where the tree calls the collectives in them."""

    def __init__(self, backend: str) -> None:
        self.inner = torch._dynamo.lookup_backend(backend)
        self.hashes: list[str] = []
        self.sites = comm_groups.GraphSites()  # where the graphs' collectives are called

    def __call__(self, gm: torch.fx.GraphModule, example_inputs: list[Any]) -> Any:
        self.hashes.append(hashlib.sha256(gm.code.encode()).hexdigest()[:16])
        self.sites.note(gm)
        return self.inner(gm, example_inputs)


def _wrap(variant: str, model: torch.nn.Module, device: str, spec: ProbeSpec, rec: Recorder) -> Any:
    ids = [int(device.split(":")[1])] if device.startswith("cuda:") else None

    def ddp(module: Any) -> DistributedDataParallel:
        return DistributedDataParallel(
            module, device_ids=ids, bucket_cap_mb=spec.section(DdpSettings).bucket_cap_mb
        )

    if variant == "eager":
        return ddp(model)
    if variant == "compiled_ddp":
        return torch.compile(ddp(model), backend=rec, dynamic=spec.compile.dynamic)
    return ddp(torch.compile(model, backend=rec, dynamic=spec.compile.dynamic))


def _profiled_step(step: Any, inputs: tuple[Any, ...], device: str, trace: Path) -> dict[str, Any]:
    from torch.profiler import ProfilerActivity, profile, record_function

    activities = [ProfilerActivity.CPU]
    if device.startswith("cuda"):
        activities.append(ProfilerActivity.CUDA)
    with profile(activities=activities, record_shapes=True) as prof:
        for _ in range(PROFILED_STEPS):
            with record_function(STEP_MARK):
                step(*inputs)
        steps.synchronize("cuda" if device.startswith("cuda") else "cpu")
    prof.export_chrome_trace(str(trace))
    return json.loads(trace.read_text())


def _sized(
    found: list[Collective], calls: list[CollectiveCall], spec: ProbeSpec, world: int
) -> list[Collective]:
    """The profiler's collectives; on gloo, whose trace has no group, each with the size of the
    group the recorded calls ran it on (NCCL's trace says it itself)."""
    return comm_groups.with_group_sizes(found, calls, world) if _backend_name(spec) == "gloo" else found


def run_variant(
    variant: str, spec: ProbeSpec, tree: Path, device: str, world: int, out_dir: Path
) -> tuple[DdpVariantMetrics, list[str], list[CollectiveCall]]:
    torch._dynamo.reset()
    counters.clear()
    torch.manual_seed(0)
    built = call_build(load_build(spec.workload.entry, tree), device)
    model, inputs = built.model, built.inputs
    model = steps.prepare(model, train=True)
    rec = Recorder(spec.compile.backend)
    net = _wrap(variant, model, device, spec, rec)
    # DDP only does its work in backward, so the probe always trains, whatever the workload says.
    step = steps.make_step(net, True, spec.workload.amp, "cuda" if device.startswith("cuda") else "cpu")
    times: list[float] = []
    last = spec.section(DdpSettings).steps - 1
    since = None
    for i in range(last + 1):
        if i == last:  # the collectives of the last step, compiled and warm, with their groups
            since = comm_groups.mark()
        start = time.perf_counter()
        step(*inputs)
        steps.synchronize("cuda" if device.startswith("cuda") else "cpu")
        if i:  # the first step compiles
            times.append((time.perf_counter() - start) * 1000)
    calls = comm_groups.calls_since(since, tree, rec.sites)
    graphs = int(counters["stats"]["unique_graphs"])
    trace = _profiled_step(step, inputs, device, out_dir / f"trace-{variant}-rank{dist.get_rank()}.json")
    breaks = []
    if variant != "eager":
        torch._dynamo.reset()
        rebuilt = call_build(load_build(spec.workload.entry, tree), device)
        fresh, fresh_inputs = rebuilt.model, rebuilt.inputs
        explained = torch._dynamo.explain(steps.prepare(fresh, train=True))(*fresh_inputs)
        breaks = graph_breaks_of(explained, tree)
    metrics = DdpVariantMetrics(
        variant=variant,  # type: ignore[arg-type]
        step_ms=round(statistics.median(times), 4) if times else None,
        graph_count=graphs,
        graph_breaks=breaks,
        ddp_splits=max(0, len(rec.hashes) - graphs) if variant == "compiled_ddp" else 0,
        collectives=_sized(
            collectives(trace.get("traceEvents", []), world, PROFILED_STEPS), calls, spec, world
        ),
        comm_overlap_pct=comm_overlap_pct(trace.get("traceEvents", [])),
    )
    return metrics, rec.hashes, calls


def gather_lines(lines: list[str], device: str) -> list[list[str]]:
    """Every rank's list of strings, on every rank (all_gather_object would need numpy)."""
    data = torch.tensor(list("\n".join(lines).encode()), dtype=torch.uint8, device=device)
    sizes = [torch.zeros(1, dtype=torch.int64, device=device) for _ in range(dist.get_world_size())]
    dist.all_gather(sizes, torch.tensor([data.numel()], dtype=torch.int64, device=device))
    longest = max(int(n.item()) for n in sizes)
    padded = torch.zeros(longest, dtype=torch.uint8, device=device)
    padded[: data.numel()] = data
    parts = [torch.zeros(longest, dtype=torch.uint8, device=device) for _ in sizes]
    dist.all_gather(parts, padded)
    texts = [bytes(p[: int(n.item())].tolist()).decode() for p, n in zip(parts, sizes, strict=True)]
    return [t.split("\n") if t else [] for t in texts]


def main(argv: list[str]) -> int:
    spec = load_model(ProbeSpec, Path(argv[0]).read_bytes(), argv[0])
    out_dir = Path(argv[1])
    tree = Path(spec.tree)
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    device = rank_device(spec, local_rank)
    if device.startswith("cuda"):
        torch.cuda.set_device(device)
    comm_groups.enable()
    dist.init_process_group(_backend_name(spec))
    rank, world = dist.get_rank(), dist.get_world_size()
    variants: list[DdpVariantMetrics] = []
    for variant in spec.section(DdpSettings).variants:
        calls: list[CollectiveCall] = []
        try:
            metrics, hashes, calls = run_variant(variant, spec, tree, device, world, out_dir)
        except Exception as err:  # one variant failing is a finding; the others still run
            metrics, hashes = DdpVariantMetrics(variant=variant, error=f"{type(err).__name__}: {err}"), []
        ranks = [RankGraphs(rank=r, graph_hashes=h) for r, h in enumerate(gather_lines(hashes, device))]
        grouped = comm_groups.by_ranks(gather_lines(comm_groups.lines(calls), device))
        variants.append(
            metrics.model_copy(
                update={"ranks": ranks if variant != "eager" else [], "collective_calls": grouped}
            )
        )
    if rank == 0:
        result = DdpMetrics(backend=_backend_name(spec), world_size=world, variants=variants)
        (out_dir / "ddp.json").write_text(result.model_dump_json())
    with contextlib.suppress(Exception):
        dist.barrier()
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    run_and_end(lambda: main(sys.argv[1:]))
