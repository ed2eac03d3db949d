"""A worker's peak memory is its own, whatever the size of the process that started it."""

from __future__ import annotations

import subprocess
import sys

import pytest

READ = (
    "import resource\n"
    "from perfcheck.runner.timing.peak_memory import peak_rss_mb\n"
    "print(peak_rss_mb(), resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)"
)


@pytest.mark.e2e
def test_a_worker_started_by_a_large_process_reads_its_own_peak() -> None:
    held = bytearray(300 * 2**20)
    held[:: 2**12] = b"\x01" * len(held[:: 2**12])  # touched: resident, in this process's RSS
    read = [sys.executable, "-c", READ]
    done = subprocess.run(read, capture_output=True, text=True, check=True, timeout=60)
    own, inherited = map(float, done.stdout.split())
    assert own < 150, done.stdout  # the interpreter and perfcheck's module, not this test's 300 MB
    if sys.platform.startswith("linux"):
        assert inherited > 300, done.stdout  # what getrusage says, carried over exec from here
    del held
