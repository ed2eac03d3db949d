"""Collectives and their overlap with compute, read from one profiled training step's chrome trace.

Pure (no torch), over the trace's events as dicts. Two sources, whichever the backend leaves:
NCCL's ``record_param_comms`` events (collective name, dtype, element count, group size) with
``nccl*`` GPU kernels, or gloo's ``gloo:<op>`` events, which run on gloo's own threads and carry
their input's type and shape. The overlap follows HolisticTraceAnalysis's definition: the share of
communication time during which compute was also running.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from typing import Any

from perfcheck.core.probes.ddp import Collective
from perfcheck.core.trace.intervals import covered, merge, shared

DTYPE_BYTES = {
    "float": 4, "float32": 4, "c10::float": 4,
    "double": 8, "float64": 8,
    "c10::half": 2, "half": 2, "float16": 2,
    "c10::bfloat16": 2, "bfloat16": 2,
    "long": 8, "long int": 8, "int64": 8,
    "int": 4, "int32": 4,
    "bool": 1, "unsigned char": 1, "signed char": 1, "uint8": 1, "int8": 1,
}  # fmt: skip
_OP_NAMES = {"allreduce": "all_reduce", "allgather": "all_gather", "reducescatter": "reduce_scatter"}


def op_name(name: str) -> str:
    """A collective's name as the review says it: "allreduce", "_allgather_base" -> all_reduce, all_gather."""
    key = name.lower().replace("_", "").removesuffix("base").removesuffix("coalesced")
    return _OP_NAMES.get(key, name.lower())


def _nelems(dims: Any) -> int:
    if not isinstance(dims, list) or not dims or not isinstance(dims[0], list):
        return 0
    n = 1
    for d in dims[0]:
        n *= int(d)
    return n


def _complete(events: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    return [e for e in events if e.get("ph") == "X" and isinstance(e.get("dur"), int | float)]


def collectives(events: Iterable[dict[str, Any]], world_size: int, steps: int = 1) -> list[Collective]:
    """Collectives per step, grouped by (op, group size, dtype, bytes), over ``steps`` profiled steps."""
    seen: Counter[tuple[str, int, str, int]] = Counter()
    done = _complete(events)
    nccl = [e for e in done if e.get("name") == "record_param_comms"]
    for e in nccl:
        args = e.get("args") or {}
        op = str(args.get("Collective name", "unknown"))
        if op in ("barrier", "init"):
            continue
        dtype = str(args.get("dtype", "unknown"))
        nelems = int(args.get("In msg nelems") or 0)
        size = DTYPE_BYTES.get(dtype.lower(), 0)
        seen[(op_name(op), int(args.get("Group size") or world_size), dtype, nelems * size)] += 1
    if not nccl:
        for e in done:
            name = str(e.get("name", ""))
            if not name.startswith("gloo:"):
                continue
            args = e.get("args") or {}
            dtype = str((args.get("Input type") or ["unknown"])[0])
            size = DTYPE_BYTES.get(dtype.lower(), 0)
            seen[
                (op_name(name.split(":", 1)[1]), world_size, dtype, _nelems(args.get("Input Dims")) * size)
            ] += 1
    return [
        Collective(op=op, group_size=g, dtype=dtype, bytes=b, count=max(1, round(n / steps)))
        for (op, g, dtype, b), n in sorted(seen.items())
    ]


STEP_MARK = "perfcheck:step"
_BACKWARD_NODE = "autograd::engine::evaluate_function: "


def _gpu_overlap_pct(kernels: list[dict[str, Any]]) -> float | None:
    """HolisticTraceAnalysis's definition: the share of NCCL kernel time covered by compute kernels."""
    comm = [e for e in kernels if "nccl" in str(e.get("name", "")).lower()]
    compute = [e for e in kernels if "nccl" not in str(e.get("name", "")).lower()]
    comm_iv = merge((e["ts"], e["ts"] + e["dur"]) for e in comm)
    total = covered(comm_iv)
    if total <= 0:
        return None
    hidden = shared(comm_iv, merge((e["ts"], e["ts"] + e["dur"]) for e in compute))
    return round(100.0 * hidden / total, 2)


def _cpu_overlap_pct(done: list[dict[str, Any]]) -> float | None:
    """gloo on a CPU: the share of collectives issued while backward still had work to do.

    Durations of gloo's threads are not a usable signal when ranks share a few cores (the same
    build measured 40-80 % on repeated runs), but the order is: a collective launched before the
    step's last backward node starts can be hidden; one launched after it cannot.
    """
    marks = [e for e in done if e.get("name") == STEP_MARK]
    gloo_threads = {e.get("tid") for e in done if str(e.get("name", "")).startswith("gloo:")}
    issued = hidden = 0
    for mark in marks:
        lo, hi = mark["ts"], mark["ts"] + mark["dur"]
        inside = [e for e in done if lo <= e["ts"] <= hi]
        issues = [e for e in inside if str(e.get("name", "")).startswith("c10d::")]
        # Backward's own work: autograd nodes, but not AccumulateGrad, which only stores a gradient
        # (DDP's hooks fire right after it, so counting it would call every bucket hidden).
        compute_starts = [
            e["ts"]
            for e in inside
            if str(e.get("name", "")).startswith(_BACKWARD_NODE)
            and "AccumulateGrad" not in str(e.get("name", ""))
            and e.get("tid") not in gloo_threads
        ]
        last = max(compute_starts, default=lo)
        issued += len(issues)
        hidden += sum(1 for e in issues if e["ts"] + e["dur"] < last)
    return round(100.0 * hidden / issued, 2) if issued else None


def comm_overlap_pct(events: Iterable[dict[str, Any]]) -> float | None:
    done = _complete(events)
    kernels = [e for e in done if e.get("cat") == "kernel"]
    if any("nccl" in str(e.get("name", "")).lower() for e in kernels):
        return _gpu_overlap_pct(kernels)
    # gloo, even with CUDA tensors, communicates from host threads: judge it by launch order.
    return _cpu_overlap_pct(done)
