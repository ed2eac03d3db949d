"""One profiled step's collectives on an fsdp rank, each with its size and the FSDP unit whose
``FSDP::`` region issued it (perfcheck/runner/distributed/fsdp_worker.py runs the rank). Imports torch:
only ranks load it.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from perfcheck.core.probes.fsdp_models import (
    UnitCollective,
)
from perfcheck.runner import step as steps
from perfcheck.runner.distributed.comm_trace import DTYPE_BYTES, STEP_MARK

PROFILED_STEPS = 2


def _unit_of(event: dict[str, Any], regions: list[dict[str, Any]], by_fqn: dict[str, str]) -> str | None:
    """The unit whose innermost FSDP:: region on its thread holds ``event``: "FSDP::all_gather
    (layers.0)" is unit layers.0, "(layers.0, layers.1)" the one unit fully_shard([layers.0,
    layers.1]) made (``by_fqn`` maps FSDP's names to the units'), a region without a name the
    root's; None: issued outside FSDP."""
    start, end = event["ts"], event["ts"] + event["dur"]
    inside = [
        r
        for r in regions
        if r.get("tid") == event.get("tid") and r["ts"] <= start and r["ts"] + r["dur"] >= end
    ]
    if not inside:
        return None
    name = str(max(inside, key=lambda r: r["ts"])["name"])
    fqn = name[name.index("(") + 1 : name.rindex(")")] if name.endswith(")") and "(" in name else ""
    return by_fqn.get(fqn, fqn)


def _op(name: str) -> str:
    key = name.removeprefix("c10d::").removeprefix("gloo:").strip("_").replace("_", "")
    for stem, op in (
        ("allgather", "all_gather"),
        ("reducescatter", "reduce_scatter"),
        ("allreduce", "all_reduce"),
    ):
        if key.startswith(stem):
            return op
    return key


def _numel(shapes: Any) -> int:
    shapes = shapes if shapes and isinstance(shapes[0], list) else [shapes]
    return sum(int(torch.Size(s).numel()) for s in shapes if isinstance(s, list))


def _message(args: dict[str, Any]) -> tuple[str, int]:
    """dtype and bytes of the larger of the call's first two tensors: the unsharded message. A
    call that takes a list of tensors (all_reduce, broadcast) records them as a "TensorList"
    without their dtype: unknown, 0 bytes (``_listed`` reads them from the backend)."""
    dims, types = args.get("Input Dims") or [], args.get("Input type") or []
    best, dtype = 0, "unknown"
    for d, t in list(zip(dims, types, strict=False))[:2]:
        size = DTYPE_BYTES.get(str(t).lower(), 0)
        if _numel(d) * size >= best:
            best, dtype = _numel(d) * size, str(t)
    return dtype, best


class _Backend:
    """What the process group itself recorded of each call, for the calls whose tensors the
    profiler lists without a dtype: NCCL's record_param_comms inside the call (dtype, element
    counts), or gloo's own ``gloo:<op>`` event on its worker thread (dtype and shapes) of the same
    op and shapes, the first not yet matched from when the call was issued."""

    def __init__(self, done: list[dict[str, Any]]) -> None:
        self.nccl = [e for e in done if e.get("name") == "record_param_comms"]
        self.gloo = sorted(
            (e for e in done if str(e.get("name", "")).startswith("gloo:")), key=lambda e: e["ts"]
        )
        self.used: set[int] = set()

    def message(self, call: dict[str, Any]) -> tuple[str, int]:
        start, end, tid = call["ts"], call["ts"] + call["dur"], call.get("tid")
        for e in self.nccl:
            if e.get("tid") == tid and start <= e["ts"] <= end:
                args = e.get("args") or {}
                dtype = str(args.get("dtype", "unknown"))
                n = max(int(args.get("In msg nelems") or 0), int(args.get("Out msg nelems") or 0))
                return dtype, n * DTYPE_BYTES.get(dtype.lower(), 0)
        dims = ((call.get("args") or {}).get("Input Dims") or [[]])[0]
        for i, e in enumerate(self.gloo):
            args = e.get("args") or {}
            if i in self.used or e["ts"] < start or _op(str(e["name"])) != _op(str(call["name"])):
                continue
            if args.get("Input Dims") != dims:
                continue
            self.used.add(i)
            dtype = str((args.get("Input type") or ["unknown"])[0])
            return dtype, _numel(dims) * DTYPE_BYTES.get(dtype.lower(), 0)
        return "unknown", 0


def collectives(
    events: list[dict[str, Any]], world: int, profiled: int, by_fqn: dict[str, str] | None = None
) -> list[UnitCollective]:
    done = [e for e in events if e.get("ph") == "X" and isinstance(e.get("dur"), int | float)]
    regions = [e for e in done if str(e.get("name", "")).startswith("FSDP::")]
    backend = _Backend(done)
    seen: Counter[tuple[str, str | None, str, int]] = Counter()
    for e in sorted(done, key=lambda e: e["ts"]):
        name = str(e.get("name", ""))
        if not name.startswith("c10d::") or "barrier" in name or "wait" in name:
            continue
        dtype, size = _message(e.get("args") or {})
        if not size:
            dtype, size = backend.message(e)
        seen[(_op(name), _unit_of(e, regions, by_fqn or {}), dtype, size)] += 1
    return [
        UnitCollective(
            op=op, unit=unit, dtype=dtype, bytes=size, group_size=world, count=max(1, round(n / profiled))
        )
        for (op, unit, dtype, size), n in sorted(
            seen.items(), key=lambda kv: (kv[0][0], kv[0][1] or "", kv[0][2:])
        )
    ]


def profile_steps(
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
