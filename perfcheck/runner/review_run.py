"""What one review runs: the two sides (a tree and its interpreter each) and the review's settings.
At the bottom of the runner: every stage takes one, none imports another stage to get it.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from perfcheck.config import Config
from perfcheck.measures import Side
from perfcheck.settings import WorkloadConfig

if TYPE_CHECKING:
    pass


@dataclass(frozen=True)
class SideSetup:
    side: Side
    tree: Path
    python: str = sys.executable


@dataclass(frozen=True)
class ReviewRun:
    base: SideSetup
    head: SideSetup
    config: Config
    device: str = "cpu"
    workloads: list[WorkloadConfig] = field(default_factory=list)
    probes: tuple[str, ...] = ()  # empty: each workload's `probes`, else the default ones
    out_dir: Path = Path("perfcheck-out")
    jobs: int = 1
    sandboxed: bool = (
        False  # each side's processes behind walls of their own (perfcheck/runner/process/sandbox.py)
    )
    # The store of base's structural results (perfcheck/runner/reuse/store.py): where this run records
    # base's (a trusted run's --record-base), where it looks for them (--reuse-base); no probe
    # process sees either folder.
    record_base: Path | None = None
    reuse_base: Path | None = None
    base_revision: str | None = None  # base's commit, which a record names
