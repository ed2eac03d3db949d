"""A process's own peak resident memory, on the CPU.

Not ``getrusage``'s ``ru_maxrss`` on Linux: the kernel carries that figure across ``exec`` from the
process that started this one, so a worker started by a large process reads its parent's size as
its own peak (a 14 MB child of a 600 MB parent read 613 MB), and a memory regression smaller than
the parent's size disappears under it. ``VmHWM`` in ``/proc/self/status`` is the high-water mark
of this process's own address space."""

from __future__ import annotations

import resource
import sys


def peak_rss_mb() -> float:
    try:
        with open("/proc/self/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024  # kB
    except (OSError, ValueError, IndexError):
        pass
    # No procfs: ru_maxrss is bytes on macOS, KiB elsewhere.
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / 2**20 if sys.platform == "darwin" else peak / 1024
