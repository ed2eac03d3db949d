"""What a GPU activity is: compute, communication, memory or other.

The rules are HolisticTraceAnalysis's (hta/utils/utils.py, ``get_kernel_type``), so overlap and
breakdown figures mean the same as HTA's: NCCL kernels are communication, memcpy/memset/DMA are
memory, and compute is whatever is none of those and not a synchronisation. The order matters:
an NCCL kernel is communication before anything else.
"""

from __future__ import annotations

import re
from typing import Literal

Kind = Literal["compute", "communication", "memory", "other"]

_COMMUNICATION = re.compile(r"nccl.*Kernel")
_MEMORY = re.compile(r"Memcpy|Memset|dma")
# HTA's "not compute" pattern, spelled out: its alternation also matches names that merely
# contain Memcpy or Sync anywhere (e.g. "Event Sync", "Context Sync").
_NOT_COMPUTE = re.compile(r"nccl.*Kernel|.*Memcpy|Memset|.*Sync")


_MEMORY_CATEGORIES = frozenset({"gpu_memcpy", "gpu_memset"})


def kernel_kind(name: str, cat: str | None = None) -> Kind:
    """The kind of a GPU activity, from its name as Kineto writes it (and its category, which for
    Kineto's memcpy/memset always agrees with the name; it covers tools that name them otherwise)."""
    if _COMMUNICATION.match(name):
        return "communication"
    if cat in _MEMORY_CATEGORIES or _MEMORY.match(name):
        return "memory"
    if _NOT_COMPUTE.match(name):
        return "other"
    return "compute"
