"""What Dynamo and Inductor report about their own work: counters and compile-time splits.

Dynamo is not imported here: importing it costs a process about as much again as torch itself, and
a process that never imported it compiled nothing, so its counters are all zero (an eager timing
worker stays that cheap unless the workload itself calls ``torch.compile``)."""

from __future__ import annotations

import sys
from collections.abc import Mapping
from types import ModuleType


def _utils() -> ModuleType | None:
    """``torch._dynamo.utils`` where something loaded it, else None (nothing compiled)."""
    return sys.modules.get("torch._dynamo.utils")


def _counters() -> Mapping[str, Mapping[str, int]]:
    utils = _utils()
    return utils.counters if utils is not None else {}


def compiled_frames() -> int:
    frames = _counters().get("frames", {})
    return int(frames.get("ok", 0))


def compile_activity() -> int:
    """A number that grows whenever anything compiles (frames, graphs, AOT, Inductor, autotuning)."""
    return sum(sum(c.values()) for c in _counters().values())


def reset() -> None:
    """Dynamo's compiled code and guards dropped, where Dynamo is loaded (elsewhere there are none)."""
    dynamo = sys.modules.get("torch._dynamo")
    if dynamo is not None:
        dynamo.reset()


def compile_breakdown() -> dict[str, float]:
    """Seconds spent in Dynamo, AOTAutograd and Inductor, split as torch itself times them."""
    utils = _utils()
    spent = utils.calculate_time_spent() if utils is not None else {}
    total = spent.get("entire_frame_compile", 0.0)
    backend = spent.get("backend_compile", 0.0)
    inductor = spent.get("inductor_compile", 0.0)
    out = {"dynamo": max(total - backend, 0.0), "aot_autograd": max(backend - inductor, 0.0)}
    if inductor:
        out["inductor"] = inductor
    out["total"] = total
    return {k: round(v, 4) for k, v in out.items()}


def cache_entries() -> dict[tuple[str, str, int], int]:
    """How many compiled entries each code object Dynamo has compiled holds in its cache now, by
    its name, file and first line (the frames that hold none left out): one per guard set that
    passed, up to the recompile limit."""
    convert_frame = sys.modules.get("torch._dynamo.convert_frame")
    eval_frame = sys.modules.get("torch._dynamo.eval_frame")
    if convert_frame is None or eval_frame is None:
        return {}
    out: dict[tuple[str, str, int], int] = {}
    for ref in list(convert_frame.input_codes.seen):
        code = ref()
        if code is None:
            continue
        n = len(eval_frame._debug_get_cache_entry_list(code))
        if n:
            key = (code.co_name, code.co_filename, code.co_firstlineno)
            out[key] = max(out.get(key, 0), n)
    return out
