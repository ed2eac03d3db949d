"""Import a workload's ``build`` function from one side's tree.

``path/to/file.py:function`` is imported from the side's tree, so base and head each run their
own code; ``package.module:function`` is imported with the tree first on ``sys.path``.
"""

from __future__ import annotations

import atexit
import hashlib
import importlib
import importlib.metadata
import importlib.util
import re
import shutil
import sys
import tempfile
import tomllib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from perfcheck.runner.workloads import BUILTIN_WORKLOADS


class WorkloadError(Exception):
    """The workload could not be imported or built; the message is meant for the user."""


def import_roots(tree: Path) -> list[Path]:
    """Where a side's own packages import from, as if installed: the tree's root, and its ``src/``
    (the src layout) when that holds a package."""
    src = tree / "src"
    has_package = src.is_dir() and any((d / "__init__.py").is_file() for d in src.iterdir() if d.is_dir())
    return [src, tree] if has_package else [tree]


def _first_on_path(*folders: str | Path) -> None:
    """``folders`` first on ``sys.path``, in the order given."""
    for folder in reversed([str(f) for f in folders]):
        if folder in sys.path:
            sys.path.remove(folder)
        sys.path.insert(0, folder)


def _metadata_of(tree: Path) -> None:
    """The side's project metadata, so that ``importlib.metadata.version("pkg")`` in the package's
    ``__init__`` works from a bare checkout as it does once installed: a minimal ``.dist-info`` for
    the ``[project]`` of the tree's pyproject.toml, unless that project is installed already."""
    try:
        project = tomllib.loads((tree / "pyproject.toml").read_text(encoding="utf-8")).get("project", {})
    except (OSError, ValueError):
        return
    name = project.get("name")
    if not isinstance(name, str) or not re.fullmatch(r"[A-Za-z0-9._-]{1,100}", name):
        return
    try:
        importlib.metadata.distribution(name)
        return
    except importlib.metadata.PackageNotFoundError:
        pass
    version = project.get("version")
    if not isinstance(version, str) or not re.fullmatch(r"[\w.+!-]{1,64}", version):
        version = "0+unknown"  # dynamic (setuptools-scm and the like): a version, not the version
    folder = Path(tempfile.mkdtemp(prefix="perfcheck-metadata-"))
    atexit.register(shutil.rmtree, folder, True)
    info = folder / f"{re.sub(r'[-.]+', '_', name)}-{version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    sys.path.append(str(folder))


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
    _metadata_of(tree)
    if target.endswith(".py") or "/" in target:
        path = (tree / target).resolve()  # an absolute target stays itself
        if not path.is_file():
            where = f"in {tree}" if path.is_relative_to(tree) else "(outside the tree)"
            raise WorkloadError(f"workload file {target!r} does not exist {where}")
        # A file outside the tree (a CI folder, say) is imported against this side's tree.
        _first_on_path(str(path.parent), *import_roots(tree))
        module = _import_file(path)
    else:
        _first_on_path(*import_roots(tree))
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
        from perfcheck.runner.process.keyword_call import KeywordCall

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
