"""Base vs head per kernel (or CPU op) name: what was added, removed, or changed in time."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Literal

import msgspec

Status = Literal["added", "removed", "changed", "same"]


class Change(msgspec.Struct, frozen=True):
    name: str
    base_us: float | None  # None: not in base
    head_us: float | None  # None: not in head

    @property
    def status(self) -> Status:
        if self.base_us is None:
            return "added"
        if self.head_us is None:
            return "removed"
        return "same" if self.base_us == self.head_us else "changed"

    @property
    def delta_us(self) -> float:
        return (self.head_us or 0.0) - (self.base_us or 0.0)


def diff_times(base: Mapping[str, float], head: Mapping[str, float]) -> list[Change]:
    """Every name of either side, largest absolute time change first (ties by name)."""
    changes = [Change(name, base.get(name), head.get(name)) for name in base.keys() | head.keys()]
    return sorted(changes, key=lambda c: (-abs(c.delta_us), c.name))


def structural(changes: list[Change]) -> list[Change]:
    """The names present on one side only: exact, whatever their time."""
    return [c for c in changes if c.status in ("added", "removed")]
