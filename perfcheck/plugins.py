"""Plugin probes: modules named under ``plugins:`` in perfcheck.yml, each holding a ``PROBE``
descriptor (perfcheck/core/probes/kind.py) that perfcheck registers with the probes, finding categories and
root-cause matrix entries it carries.

A plugin is imported by module name only, never from a path: the config is read from the base
branch, and the module must be installed where perfcheck runs (the runner and bot images), so a
pull request can neither add a plugin nor change the code of one on the side that holds the
write token. The descriptor module imports no torch; its run function lives in the module its
``run`` names, which only the probe's worker process imports.
"""

from __future__ import annotations

import importlib
import re

from perfcheck.core.probes.kind import ProbeKind

_MODULE = re.compile(r"^[A-Za-z_]\w*(\.[A-Za-z_]\w*)*$")
_TARGET = re.compile(r"^[A-Za-z_]\w*(\.[A-Za-z_]\w*)*:[A-Za-z_]\w*$")


class PluginError(ValueError):
    """A plugin that cannot be used; the message is meant for the user as it stands."""


def load(module: str, reserved: frozenset[str] = frozenset()) -> ProbeKind:
    """Import ``module`` and register its probe (loading one twice is harmless). ``reserved``: the
    names a probe may not take (the config's own keys, which the config passes: this module
    imports no config, so that the two do not import each other)."""
    from perfcheck.core import probes

    if not _MODULE.match(module):
        raise PluginError(
            f"expected the name of an installed module (such as acme.perfcheck_fsdp), not {module!r}"
        )
    try:
        mod = importlib.import_module(module)
    except (Exception, SystemExit) as err:  # whatever the plugin does at import is its error
        raise PluginError(f"cannot import {module}: {type(err).__name__}: {err}") from None
    kind = getattr(mod, "PROBE", None)
    if not isinstance(kind, ProbeKind):
        raise PluginError(f"{module} has no PROBE (a perfcheck.core.probes.kind.ProbeKind)")
    if kind.run is None or not _TARGET.match(kind.run):
        raise PluginError(
            f"{module}: PROBE.run: expected 'module:function' of the run function, got {kind.run!r}"
        )
    if kind.name in reserved:
        raise PluginError(f"{module}: probe name {kind.name!r} is a config key of perfcheck's own")
    try:
        probes.register(kind)
    except ValueError as err:
        raise PluginError(f"{module}: {err}") from None
    return kind


def load_all(modules: tuple[str, ...] | list[str]) -> list[ProbeKind]:
    return [load(m) for m in modules]
