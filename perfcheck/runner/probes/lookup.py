"""Which run a probe name means in a worker: a descriptor's ``run=`` (perfcheck's own probes and
plugins', perfcheck/core/probes/), or a worker-only probe the orchestrator asks for by name.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable

from perfcheck.core import probes
from perfcheck.runner.probes.base import PluginProbe, Probe
from perfcheck.runner.probes.compile_latency_probe import CompileLatencyProbe

# Probes no descriptor names: run only where the orchestrator starts them (the compile probe's
# cache-cold compiles under valgrind, perfcheck/runner/latency/runs.py).
WORKER_ONLY: dict[str, Callable[[], Probe]] = {"compile_latency": CompileLatencyProbe}


def load_builtin() -> None:
    """Import the run modules of perfcheck's own probes (each descriptor's ``run=``), as a fork
    server does before it forks: called here rather than at import so that torch loads only in
    probe processes."""
    for kind in probes.built_in():
        if kind.run is not None:
            importlib.import_module(kind.run.partition(":")[0])


def get_probe(name: str) -> Probe:
    if name in WORKER_ONLY:
        return WORKER_ONLY[name]()
    kind = probes.get(name)
    if kind is None or kind.run is None:
        known = sorted({*WORKER_ONLY, *probes.names()})
        raise KeyError(f"unknown probe {name!r}; known: {', '.join(known)}")
    module, _, function = kind.run.partition(":")
    return PluginProbe(kind, getattr(importlib.import_module(module), function))
