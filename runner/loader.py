"""Import a workload's ``build`` function from one side's tree.

``path/to/file.py:function`` is imported from the side's tree, so base and head each run their
own code; ``package.module:function`` is imported with the tree first on ``sys.path``.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from perfcheck.runner.workloads import BUILTIN_WORKLOADS


class WorkloadError(Exception):
    """The workload could not be imported or built; the message is meant for the user."""


def resolve_entry(entry: str) -> str:
    return BUILTIN_WORKLOADS.get(entry, entry)


def _import_file(path: Path) -> Any:
    # A unique module name per file keeps base and head (and same-named files) apart.
    digest = hashlib.sha256(str(path).encode()).hexdigest()[:10]
    name = f"_perfcheck_workload_{path.stem}_{digest}"
    if name in sys.modules:
        # Once per process, as Python imports a module: a probe that builds the model twice must
        # not run the module's top level twice (a torch.library definition there would clash).
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise WorkloadError(f"cannot import {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[name]  # a failed import is not cached, as Python does not cache one
        raise
    return module


def load_build(entry: str, tree: Path) -> Callable[..., Any]:
    """The ``build`` callable named by ``entry``. Raises WorkloadError or the import's own error."""
    target, sep, func = resolve_entry(entry).rpartition(":")
    if not sep:
        raise WorkloadError(
            f"workload entry {entry!r} is neither a built-in name nor 'path/file.py:function' "
            "or 'package.module:function'"
        )
    tree = tree.resolve()
    if target.endswith(".py") or "/" in target:
        path = (tree / target).resolve()
        if not path.is_relative_to(tree):
            raise WorkloadError(f"workload file {target!r} lies outside the tree {tree}")
        if not path.is_file():
            raise WorkloadError(f"workload file {target!r} does not exist in {tree}")
        for folder in (str(path.parent), str(tree)):
            if folder not in sys.path:
                sys.path.insert(0, folder)
        module = _import_file(path)
    else:
        if str(tree) not in sys.path:
            sys.path.insert(0, str(tree))
        module = importlib.import_module(target)
    build = getattr(module, func, None)
    if not callable(build):
        raise WorkloadError(f"{target} has no callable {func!r}")
    return build


@dataclass(frozen=True)
class Built:
    """What ``build(device)`` gave, in the one shape every probe uses: positional inputs."""

    model: Any
    inputs: tuple[Any, ...]
    # The recompile check's call with another batch: build()'s third item (None: no such call);
    # ``second_given`` False when it gave none, and the probe halves the batch itself.
    second: tuple[Any, ...] | None = None
    second_given: bool = False


SHAPES = (
    "build() returns (model, inputs) or (model, inputs, second_inputs); inputs: a tuple, one value "
    "or a dict of keyword inputs"
)


def call_build(build: Callable[..., Any], device: str) -> Built:
    """Call the workload's ``build``; what it raises is the workload's own error (ValueError for a
    result of the wrong shape). Keyword inputs (a dict) run through ``KeywordCall``."""
    result = build(device)
    if not isinstance(result, tuple | list) or len(result) not in (2, 3):
        raise ValueError(f"{SHAPES}; got {type(result).__name__}")
    model, inputs, *rest = result
    second = rest[0] if rest else None
    if isinstance(inputs, Mapping):
        names = tuple(str(k) for k in inputs)
        if second is not None and (not isinstance(second, Mapping) or tuple(second) != names):
            raise ValueError(f"second inputs must be a dict with the same keys as inputs: {', '.join(names)}")
        from perfcheck.runner.keyword_call import KeywordCall

        model = KeywordCall(model, names)
        inputs = tuple(inputs.values())
        second = tuple(second.values()) if second is not None else None

    def positional(x: Any) -> tuple[Any, ...]:
        return x if isinstance(x, tuple) else (x,)  # a list is one argument, as Python passes it

    return Built(
        model,
        positional(inputs),
        positional(second) if second is not None else None,
        second_given=bool(rest),
    )
