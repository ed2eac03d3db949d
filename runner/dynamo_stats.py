"""What Dynamo and Inductor report about their own work: counters and compile-time splits."""

from __future__ import annotations

import torch._dynamo
from torch._dynamo.utils import counters


def compiled_frames() -> int:
    return int(counters["frames"]["ok"])


def compile_activity() -> int:
    """A number that grows whenever anything compiles (frames, graphs, AOT, Inductor, autotuning)."""
    return sum(sum(c.values()) for c in counters.values())


def compile_breakdown() -> dict[str, float]:
    """Seconds spent in Dynamo, AOTAutograd and Inductor, split as torch itself times them."""
    spent = torch._dynamo.utils.calculate_time_spent()
    total = spent.get("entire_frame_compile", 0.0)
    backend = spent.get("backend_compile", 0.0)
    inductor = spent.get("inductor_compile", 0.0)
    out = {"dynamo": max(total - backend, 0.0), "aot_autograd": max(backend - inductor, 0.0)}
    if inductor:
        out["inductor"] = inductor
    out["total"] = total
    return {k: round(v, 4) for k, v in out.items()}
