"""What Dynamo compiled on one fsdp rank, per function of the model: each compiled frame's graphs
grouped by the model's code that made them, with the guard that failed where one recompiled,
and where two ranks' first differing graph differs (perfcheck/runner/distributed/fsdp_worker.py runs the
rank). Imports torch: only ranks load it.
"""

from __future__ import annotations

import contextlib
import difflib
import re
import traceback
from pathlib import Path
from typing import Any

import torch
from torch._dynamo.utils import guard_failures

from perfcheck.core.probes.ddp import RankGraphs, first_rank_mismatch
from perfcheck.core.probes.fsdp_models import (
    GraphGroup,
)
from perfcheck.measures import SourceLocation
from perfcheck.runner.distributed.ddp_worker import Recorder, gather_lines
from perfcheck.runner.source.locate import innermost_user_frame, to_location

_STACK_FRAME = re.compile(r'File "(?P<path>[^"]+)", line (?P<line>\d+), in (?P<function>\S+)')


class FrameRecorder(Recorder):
    """The ddp probe's recorder, noting also the function Dynamo was compiling (its code object)
    when it handed the graph over, and each graph's nodes with the line of the tree that made each
    (Dynamo's stack trace of the node), to say where two ranks' graphs part."""

    def __init__(self, backend: str, tree: Path) -> None:
        super().__init__(backend)
        self.tree = tree
        self.codes: list[Any] = []
        self.nodes: list[list[tuple[str, str]]] = []  # per graph: (node, "path\tline\tfunction")

    def __call__(self, gm: torch.fx.GraphModule, example_inputs: list[Any]) -> Any:
        code = None
        with contextlib.suppress(Exception):  # an internal of Dynamo; without it, no grouping
            from torch._dynamo.symbolic_convert import InstructionTranslator

            code = InstructionTranslator.current_tx().f_code
        self.codes.append(code)
        self.nodes.append([(str(n.format_node()), self._made_at(n)) for n in gm.graph.nodes])
        return super().__call__(gm, example_inputs)

    def _made_at(self, node: torch.fx.Node) -> str:
        frames = [
            traceback.FrameSummary(m["path"], int(m["line"]), m["function"])
            for m in _STACK_FRAME.finditer(str(node.meta.get("stack_trace") or ""))
        ]
        frame = innermost_user_frame(frames, self.tree)
        return f"{frame.filename}\t{frame.lineno}\t{frame.name}" if frame is not None else ""


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


def graph_groups(rec: FrameRecorder, model: torch.nn.Module, tree: Path) -> list[GraphGroup]:
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


def _location(made_at: str, tree: Path) -> SourceLocation | None:
    path, _, rest = made_at.partition("\t")
    line, _, function = rest.partition("\t")
    if not path or not line.isdigit():
        return None
    return to_location(traceback.FrameSummary(path, int(line), function), tree)


def rank_difference(
    rec: FrameRecorder, ranks: list[RankGraphs], tree: Path, device: str
) -> tuple[SourceLocation | None, list[str]]:
    """Where the first graph that differs between ranks parts from rank 0's: the line of the tree
    that made the first differing node with one, and those nodes ("rank 1: %mul = ..."). A
    collective: every rank calls it (each holds every rank's hashes); nothing to do where they agree."""
    mismatch = first_rank_mismatch(ranks)
    if mismatch is None:
        return None, []
    graph, odd = mismatch
    mine = rec.nodes[graph - 1] if graph <= len(rec.nodes) else []
    every = gather_lines([f"{node}\t{at}".replace("\n", " ") for node, at in mine], device)
    sides = [(0, every[0]), (odd[0], every[odd[0]])]
    texts = [[line.partition("\t")[0] for line in lines] for _, lines in sides]
    matcher = difflib.SequenceMatcher(a=texts[0], b=texts[1], autojunk=False)
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag == "equal":
            continue
        differing = [(sides[0][0], sides[0][1][i]) for i in range(i1, i2)]
        differing += [(sides[1][0], sides[1][1][j]) for j in range(j1, j2)]
        for _, line in differing:
            at = _location(line.partition("\t")[2], tree)
            if at is not None and at.in_tree:
                shown = [f"rank {r}: {text.partition(chr(9))[0]}"[:300] for r, text in differing[:6]]
                return at, shown
    return None, []
