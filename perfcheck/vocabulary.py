"""The review's vocabulary, which the probe registry (perfcheck/core/probes) fills: the finding
categories and each probe's metrics model.

The result contract (perfcheck/schema.py) checks a finding's category and a probe result's
metrics against them, and the probes' descriptors are built of the contract's types: so the
contract reads them here, in a module that imports nothing of perfcheck, and not from the
registry, which imports the descriptors. The registry registers the built-in probes' as it loads
and then says the vocabulary is complete; a lookup before that raises, rather than answer without
the built-in probes' categories and models (a document would be refused, or its metrics left
unchecked). A plugin's are added as it is loaded, after.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # only named in annotations: this module loads no pydantic of its own
    from pydantic import BaseModel

# The categories more than one probe raises, whose entries are perfcheck/core/matrix.yml's: a
# probe's process that crashed or hung (perfcheck/core/compare.py, for any probe) and what the
# distributed probes share (their variants that raised, too). Every other category is its
# probe's own, registered with the probe (perfcheck/core/probes); a finding's category is
# checked against them all.
SHARED_CATEGORIES = (
    "probe_crashed",
    "probe_timeout",
    "module_missing",
    "rank_graph_mismatch",
    "collective_drift",
    "collective_group_changed",
    "variant_failed",
)

_CATEGORIES: list[str] = []  # the probes' own, in the order they registered
_METRICS: dict[str, type[BaseModel]] = {}  # probe name -> its metrics model, in the same order
_complete = False


def register_categories(names: list[str]) -> None:
    """A probe's own finding categories (perfcheck/core/probes registers them with the probe)."""
    for name in names:
        if name not in SHARED_CATEGORIES and name not in _CATEGORIES:
            _CATEGORIES.append(name)


def register_metrics(probe: str, model: type[BaseModel]) -> None:
    """The model of what ``probe`` measured (``ProbeResult.metrics``)."""
    _METRICS[probe] = model


def mark_complete() -> None:
    """The built-in probes have registered theirs: lookups answer from now on."""
    global _complete
    _complete = True


def _loaded() -> None:
    if not _complete:
        raise RuntimeError("the built-in probes are not loaded: import perfcheck.core.probes first")


def registered_so_far() -> tuple[str, ...]:
    """The categories registered until now, complete or not: for the registry, which checks each
    probe's against those registered before it, the built-in probes' included."""
    return (*SHARED_CATEGORIES, *_CATEGORIES)


def categories() -> tuple[str, ...]:
    """Every finding category known now: the shared ones, the built-in probes' and the plugins'."""
    _loaded()
    return registered_so_far()


def metrics_model(probe: str) -> type[BaseModel] | None:
    """The metrics model of a registered probe; None for one not registered (yet) or without one."""
    _loaded()
    return _METRICS.get(probe)


def metrics_models() -> dict[str, type[BaseModel]]:
    """Every registered probe's metrics model by its name, in the order they registered."""
    _loaded()
    return dict(_METRICS)
