"""The probes the review knows, in the order their rows appear in a workload's table.

One line per probe; a plugin adds its own with ``register``. See ``kind.py`` for what a
descriptor carries. Registering a probe adds its finding categories and metrics model to the
review's vocabulary (perfcheck/vocabulary.py), which the result contract reads; once the
built-in probes are in, the vocabulary is complete.
"""

from __future__ import annotations

import re

from perfcheck.core import matrix
from perfcheck.core.probes import amp, compile, custom_ops, ddp, export, fsdp, profile, timing
from perfcheck.core.probes.kind import ProbeKind
from perfcheck.vocabulary import (
    SHARED_CATEGORIES,
    mark_complete,
    register_categories,
    register_metrics,
    registered_so_far,
)

_NAME = re.compile(r"^[a-z][a-z0-9_]*$")

_REGISTRY: dict[str, ProbeKind] = {}
_BUILT_IN: list[str] = []  # the names registered by perfcheck's own registry (below), not a plugin


def register(kind: ProbeKind, built_in: bool = False) -> ProbeKind:
    """Add a probe (a plugin's, say) with the finding categories and matrix entries it carries;
    its name and its categories must be new. Raises ValueError saying what clashes."""
    if kind.name in _REGISTRY:
        if _REGISTRY[kind.name] is kind:
            return kind
        raise ValueError(f"a probe named {kind.name!r} is registered already")
    if not _NAME.match(kind.name):
        raise ValueError(f"probe name {kind.name!r}: expected lowercase letters, digits and '_'")
    # Against those registered before it: the vocabulary is not complete while the built-in
    # probes register.
    taken = sorted(set(kind.categories) & set(registered_so_far()))
    if taken:
        raise ValueError(f"probe {kind.name}: categories {', '.join(taken)} exist already")
    bad = [c for c in kind.categories if not _NAME.match(c)]
    if bad:
        raise ValueError(
            f"probe {kind.name}: category {bad[0]!r}: expected lowercase letters, digits and '_'"
        )
    unknown = [c for c in kind.raises if c not in registered_so_far()]
    if unknown:
        raise ValueError(f"probe {kind.name}: raises {unknown[0]!r}, which is no finding category")
    stray = [c for c in kind.entries if c not in kind.raises]
    if stray:
        raise ValueError(f"probe {kind.name}: an entry for {stray[0]!r}, which it does not raise")
    # A plugin's entries are validated first; perfcheck's own when one is first asked for.
    matrix.register_entries(dict(kind.categories), f"probe {kind.name}", later=built_in)
    matrix.register_probe_entries(kind.name, dict(kind.entries), f"probe {kind.name}")
    register_categories(list(kind.categories))
    if kind.metrics is not None:
        register_metrics(kind.name, kind.metrics)
    _REGISTRY[kind.name] = kind
    if built_in:
        _BUILT_IN.append(kind.name)
    return kind


for _kind in (
    timing.PROBE,
    compile.PROBE,
    ddp.PROBE,
    fsdp.PROBE,
    amp.PROBE,
    custom_ops.PROBE,
    export.PROBE,
    profile.PROBE,
):
    register(_kind, built_in=True)
mark_complete()


def built_in() -> list[ProbeKind]:
    """perfcheck's own probes, not a plugin's."""
    return [_REGISTRY[n] for n in _BUILT_IN]


def builtin_categories() -> tuple[str, ...]:
    """The shared categories and perfcheck's own probes', not a plugin's."""
    return (*SHARED_CATEGORIES, *(c for k in built_in() for c in k.categories))


def kinds() -> list[ProbeKind]:
    return list(_REGISTRY.values())


def names() -> tuple[str, ...]:
    return tuple(_REGISTRY)


def defaults() -> tuple[str, ...]:
    """What runs when neither --probes nor a workload's `probes` say: the single-process checks."""
    return tuple(k.name for k in _REGISTRY.values() if k.default)


def get(name: str) -> ProbeKind | None:
    return _REGISTRY.get(name)
