"""The probes the review knows, in the order their rows appear in a workload's table.

One line per probe; a plugin adds its own with ``register``. See ``kind.py`` for what a
descriptor carries.
"""

from __future__ import annotations

from perfcheck.bot.probes import amp, compile, custom_ops, ddp, export, profile, timing
from perfcheck.bot.probes.kind import ProbeKind

_REGISTRY: dict[str, ProbeKind] = {}


def register(kind: ProbeKind) -> ProbeKind:
    """Add a probe (a plugin's, say); its name must be new."""
    if kind.name in _REGISTRY and _REGISTRY[kind.name] is not kind:
        raise ValueError(f"a probe named {kind.name!r} is registered already")
    _REGISTRY[kind.name] = kind
    return kind


for _kind in (
    timing.PROBE,
    compile.PROBE,
    ddp.PROBE,
    amp.PROBE,
    custom_ops.PROBE,
    export.PROBE,
    profile.PROBE,
):
    register(_kind)


def kinds() -> list[ProbeKind]:
    return list(_REGISTRY.values())


def names() -> tuple[str, ...]:
    return tuple(_REGISTRY)


def defaults() -> tuple[str, ...]:
    """What runs when neither --probes nor a workload's `probes` say: the single-process checks."""
    return tuple(k.name for k in _REGISTRY.values() if k.default)


def get(name: str) -> ProbeKind | None:
    return _REGISTRY.get(name)
