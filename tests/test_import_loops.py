"""No import loops in perfcheck/ (issue 43): every import counts, a deferred one inside a function and
one under ``TYPE_CHECKING`` too, since each is a dependency a reader must hold in mind and a loop
dodged at run time is still a loop. Read from the source with ``ast``, no module imported.

One knot is left, listed here so that it can only shrink: the schema's finding categories and each
probe's metrics model come from the probe registry (perfcheck/core/probes), whose descriptors are
built of the schema's types. (The config is out of it: the settings its sections are made of live
in perfcheck/settings.py, below both the config and the probes.)"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent / "perfcheck"
KNOWN_KNOT = {
    "perfcheck.core.compile_latency",
    "perfcheck.core.matrix",
    "perfcheck.core.probes",
    "perfcheck.core.probes.amp",
    "perfcheck.core.probes.compile",
    "perfcheck.core.probes.custom_ops",
    "perfcheck.core.probes.ddp",
    "perfcheck.core.probes.export",
    "perfcheck.core.probes.fsdp",
    # fsdp.py's models and its layout comparison, split out of it: in the knot as fsdp.py was.
    "perfcheck.core.probes.fsdp_layout",
    "perfcheck.core.probes.fsdp_models",
    "perfcheck.core.probes.kind",
    "perfcheck.core.probes.profile",
    "perfcheck.core.probes.timing",
    "perfcheck.schema",
}


def modules() -> dict[str, Path]:
    found = {}
    for path in ROOT.rglob("*.py"):
        parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


def imports(name: str, path: Path, known: dict[str, Path]) -> set[str]:
    """The perfcheck modules ``name`` imports anywhere in its source (``from a import b`` counts
    as a.b where b is a module, else as a; a package's __init__ runs for each of its modules)."""

    def owner(target: str) -> str | None:
        while target and target not in known:
            target = target.rpartition(".")[0]
        return target or None

    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*up, *([node.module] if node.module else [])])
            targets = [base, *(f"{base}.{a.name}" for a in node.names)]
        else:
            continue
        for target in targets:
            mod = owner(target) if target.startswith("perfcheck") else None
            if mod is not None and mod != name:
                out.add(mod)
    return out


def loops(graph: dict[str, set[str]]) -> list[set[str]]:
    """The strongly connected parts of more than one module (Tarjan's algorithm, iteratively)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[set[str]] = []
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, edges = work[-1]
            for nxt in edges:
                if nxt not in index:
                    index[nxt] = low[nxt] = len(index)
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, iter(sorted(graph[nxt]))))
                    break
                if nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    part = set()
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        part.add(member)
                        if member == node:
                            break
                    if len(part) > 1:
                        found.append(part)
    return found


def test_the_finder_sees_a_loop_through_a_deferred_import() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert loops(graph) == [{"a", "b", "c"}]


def test_perfcheck_has_no_import_loop_but_the_known_knot_and_it_does_not_grow() -> None:
    known = modules()
    graph = {name: imports(name, path, known) for name, path in known.items()}
    found = loops(graph)
    others = [sorted(part) for part in found if part != KNOWN_KNOT and not part <= KNOWN_KNOT]
    assert others == [], f"import loops: {others}"
    assert all(part <= KNOWN_KNOT for part in found)
