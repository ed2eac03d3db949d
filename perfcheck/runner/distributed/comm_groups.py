"""Every collective of one training step on this rank, with its process group and where in the
compiled step it ran (perfcheck/core/probes/collective_groups.py compares them). Imports torch:
only ranks load it.

The source is the process groups' own flight recorder (``TORCH_FR_BUFFER_SIZE``), which gloo and
NCCL both keep: per collective its op, input sizes and dtypes, the process group's name and the
Python stack that issued it. The profiler's trace knows none of the group on gloo, and a
TorchDispatchMode would stop Dynamo from compiling. The stack says where the collective ran: in
a compiled graph (an FX graph module's, AOTAutograd's or Inductor's code between the tree's frame
and the collective) or in eager code, and in which function of the tree; Dynamo names the function
it resumes in after a graph break ``torch_dynamo_resume_in_<function>_at_<line>`` and gives it
the break's line, so a collective the break moved is placed at it. Inside a compiled graph
Python reports the function's first line, so the collective's own call site comes from the graph
Dynamo handed the backend (``GraphSites``: each collective node's line, as Dynamo traced it).
"""

from __future__ import annotations

import contextlib
import os
import pickle
import re
import traceback
from pathlib import Path
from typing import Any, TypeVar

import torch
import torch.distributed as dist
from pydantic import BaseModel

from perfcheck.core.probes.collective_groups import CollectiveCall, RankCalls
from perfcheck.measures import SourceLocation
from perfcheck.runner.distributed.comm_trace import DTYPE_BYTES, op_name
from perfcheck.runner.source.locate import innermost_user_frame, to_location

M = TypeVar("M", bound=BaseModel)

FR_ENV = "TORCH_FR_BUFFER_SIZE"
# Entries the recorder keeps (a ring): one step's collectives must fit, thousands for the largest models.
FR_ENTRIES = 8192

# The flight recorder's dtype names (c10::ScalarType) as torch spells them.
_DTYPES = {
    "Float": "float32", "Double": "float64", "Half": "float16", "BFloat16": "bfloat16",
    "Long": "int64", "Int": "int32", "Short": "int16", "Char": "int8", "Byte": "uint8", "Bool": "bool",
}  # fmt: skip
_SIZES = {
    "float32": 4, "float64": 8, "float16": 2, "bfloat16": 2,
    "int64": 8, "int32": 4, "int16": 2, "int8": 1, "uint8": 1, "bool": 1,
}  # fmt: skip

# A frame of the code a compiled graph runs: Dynamo's FX graph module, AOTAutograd's wrappers or
# Inductor's output code, between the tree's function and the collective. (FX names a graph
# module's code "<eval_with_key>.N" in torch 2.13, after the line that made it in later ones: the
# AOTAutograd and Inductor frames around it say it too.)
_COMPILED = (
    "<eval_with_key>",
    "/torch/fx/graph_module.py",
    "/torch/_functorch/_aot_autograd/",
    "/torch/_inductor/",
    "codegen(",
)


def enable() -> None:
    """Before the process groups are made: the flight recorder keeps the last ``FR_ENTRIES``
    collectives (a larger buffer asked for by the environment is kept)."""
    with contextlib.suppress(ValueError):
        if int(os.environ.get(FR_ENV) or 0) >= FR_ENTRIES:
            return
    os.environ[FR_ENV] = str(FR_ENTRIES)


def _entries() -> list[dict[str, Any]] | None:
    """The recorder's entries, oldest first; None where this torch keeps none."""
    c10d = torch._C._distributed_c10d
    for dump in ("_dump_fr_trace", "_dump_nccl_trace"):
        fn = getattr(c10d, dump, None)
        if fn is None:
            continue
        try:
            # torch's own pickle of its own recorder, made in this process.
            entries = pickle.loads(fn()).get("entries", [])
        except Exception:  # a backend without a recorder, or one torch did not build with
            continue
        if entries:
            return sorted(entries, key=lambda e: int(e.get("record_id", 0)))
    return [] if int(os.environ.get(FR_ENV) or 0) > 0 else None


def mark() -> int | None:
    """The last collective recorded so far (-1: none yet); None where nothing is recorded."""
    entries = _entries()
    if entries is None:
        return None
    return max((int(e.get("record_id", -1)) for e in entries), default=-1)


# -- the graphs' collectives, where the tree calls them ---------------------------------------

_STACK_FRAME = re.compile(r'File "(?P<path>[^"]+)", line (?P<line>\d+), in (?P<function>\S+)')


class GraphSites:
    """The collective nodes of each graph a backend is handed, by the function Dynamo compiled
    (its name and file) and the compile: each node's innermost line of the tree, from the stack
    Dynamo traced it with. DDPOptimizer hands one compile's graph over in pieces, in order."""

    def __init__(self) -> None:
        self.by_frame: dict[tuple[str, str], dict[str, list[str]]] = {}

    def note(self, gm: torch.fx.GraphModule) -> None:
        with contextlib.suppress(Exception):  # Dynamo's internals; without them, no call sites
            from torch._dynamo.symbolic_convert import InstructionTranslator
            from torch._guards import CompileContext

            code = InstructionTranslator.current_tx().f_code
            compile_id = str(CompileContext.current_compile_id())
            stacks = [
                str(n.meta.get("stack_trace") or "")
                for n in gm.graph.nodes
                if n.op == "call_function" and "c10d" in str(n.target) and "wait_tensor" not in str(n.target)
            ]
            frame = self.by_frame.setdefault((code.co_name, code.co_filename), {})
            frame.setdefault(compile_id, []).extend(stacks)

    def sites(self, function: str, filename: str, tree: Path) -> list[SourceLocation | None] | None:
        """The call sites of the function's graph's collectives, in order; None where its
        compiles disagree (a recompile that traced other collectives) or it compiled none."""
        compiles = list(self.by_frame.get((function, filename), {}).values())
        if not compiles or any(c != compiles[0] for c in compiles) or not compiles[0]:
            return None
        return [_site(stack, tree) for stack in compiles[0]]


def _site(stack: str, tree: Path) -> SourceLocation | None:
    frames = [
        traceback.FrameSummary(m["path"], int(m["line"]), m["function"]) for m in _STACK_FRAME.finditer(stack)
    ]
    frame = innermost_user_frame(frames, tree)
    return to_location(frame, tree) if frame is not None else None


# -- one step's calls -------------------------------------------------------------------------


class _Groups:
    """Process groups by name: their global ranks and whether each is the default group."""

    def __init__(self) -> None:
        self.known: dict[str, tuple[list[int], bool]] = {}

    def of(self, name: str) -> tuple[list[int], bool]:
        if name not in self.known:
            ranks: list[int] = []
            world = False
            with contextlib.suppress(Exception):  # a group this rank is no member of, or gone
                for pg, pg_name in dist.distributed_c10d._world.pg_names.items():
                    if pg_name == name:
                        ranks = list(dist.get_process_group_ranks(pg))
                        world = pg is dist.distributed_c10d._get_default_group()
                        break
            self.known[name] = (ranks, world)
        return self.known[name]


def _bytes(sizes: Any, dtype: str) -> int:
    total = 0
    for shape in sizes if isinstance(sizes, list) else []:
        n = 1
        for d in shape if isinstance(shape, list) else []:
            n *= int(d)
        total += n
    return total * _SIZES.get(dtype, DTYPE_BYTES.get(dtype.lower(), 0))


def _frames(entry: dict[str, Any]) -> list[traceback.FrameSummary]:
    """The entry's stack, outermost first (the recorder lists it innermost first)."""
    frames = [
        traceback.FrameSummary(str(f.get("filename", "")), int(f.get("line") or 0), str(f.get("name", "")))
        for f in entry.get("frames") or []
        if isinstance(f, dict)
    ]
    return frames[::-1]


def _call(
    entry: dict[str, Any], tree: Path, groups: _Groups, sites: GraphSites, seen: dict[tuple[str, str], int]
) -> CollectiveCall:
    pg = entry.get("process_group") or ("", "")
    name, desc = str(pg[0]), (str(pg[1]) if len(pg) > 1 else None)
    ranks, world = groups.of(name)
    dtypes = entry.get("input_dtypes") or ["unknown"]
    dtype = _DTYPES.get(str(dtypes[0]), str(dtypes[0]).lower())
    frames = _frames(entry)
    # The graph's code: AOTAutograd's wrappers, an FX graph module, Inductor's output code. The
    # tree's frame outside it runs the graph; Inductor's code carries a frame of the tree inside
    # it too, at the line that called the collective.
    compiled = next((i for i, f in enumerate(frames) if any(m in f.filename for m in _COMPILED)), None)
    graph = compiled is not None
    user = innermost_user_frame(frames[:compiled] if graph else frames, tree)
    inside = innermost_user_frame(frames[compiled:], tree) if graph else None
    site = to_location(inside, tree) if inside is not None else None
    if user is not None and graph and inside is None:
        # The n-th collective this function's graph issued in the step is its graph's n-th
        # collective node (each entry into the graph issues all of them, in order).
        nodes = sites.sites(user.name, user.filename, tree)
        key = (user.name, user.filename)
        if nodes:
            site = nodes[seen.get(key, 0) % len(nodes)]
        seen[key] = seen.get(key, 0) + 1
    at = to_location(user, tree) if user is not None else None
    return CollectiveCall(
        op=op_name(str(entry.get("profiling_name", "unknown")).split(":", 1)[-1]),
        dtype=dtype,
        bytes=_bytes(entry.get("input_sizes"), dtype),
        group=name,
        group_desc=desc,
        ranks=ranks,
        world=world,
        graph=graph,
        frame=user.name if user is not None else None,
        frame_at=at,
        site=site if site is not None else (at if not graph else None),
    )


def calls_since(since: int | None, tree: Path, sites: GraphSites) -> list[CollectiveCall]:
    """The collectives recorded after ``since`` (``mark()``'s), in the order they were issued,
    identical ones in a row counted as one; none where nothing is recorded or the recorder's
    ring no longer holds them all."""
    entries = _entries() if since is not None else None
    if not entries or since is None:
        return []
    after = [e for e in entries if int(e.get("record_id", -1)) > since]
    if after and int(after[0].get("record_id", -1)) != since + 1:
        return []  # the ring overwrote some: a partial step would read as lost collectives
    groups, seen = _Groups(), {}  # type: ignore[var-annotated]
    out: list[CollectiveCall] = []
    for entry in after:
        call = _call(entry, tree, groups, sites, seen)
        if out and out[-1].model_copy(update={"count": 1}) == call:
            out[-1] = out[-1].model_copy(update={"count": out[-1].count + 1})
        else:
            out.append(call)
    return out


def with_group_sizes(collectives: list[M], calls: list[CollectiveCall], world: int) -> list[M]:
    """gloo's profiler trace says nothing of a collective's group, so every one reads as the
    world's: each of ``collectives`` (a model with op, bytes and group_size) of an op and size that
    the recorded calls ran on groups of one size alone, with that size."""
    sizes: dict[tuple[str, int], set[int]] = {}
    for call in calls:
        sizes.setdefault((call.op, call.bytes), set()).add(len(call.ranks))
    out = []
    for c in collectives:
        known = sizes.get((getattr(c, "op", ""), getattr(c, "bytes", -1)), set())
        if getattr(c, "group_size", None) == world and len(known) == 1 and (size := min(known)) > 0:
            out.append(c.model_copy(update={"group_size": size}))
        else:
            out.append(c)
    return out


def lines(calls: list[CollectiveCall]) -> list[str]:
    """This rank's calls as lines for ``gather_lines``."""
    return [c.model_dump_json() for c in calls]


def by_ranks(gathered: list[list[str]]) -> list[RankCalls]:
    """Every rank's gathered lines, the ranks that issued the same calls together."""
    out: list[RankCalls] = []
    for rank, texts in enumerate(gathered):
        calls = [CollectiveCall.model_validate_json(t) for t in texts if t]
        same = next((i for i, r in enumerate(out) if r.calls == calls), None)
        if same is None:
            out.append(RankCalls(ranks=[rank], calls=calls))
        else:
            out[same] = out[same].model_copy(update={"ranks": [*out[same].ranks, rank]})
    return [r for r in out if r.calls]
