"""What a worker process costs beyond its work: what it imports, and how it ends.

An eager timing worker must not pay for Dynamo (about as much again as torch itself) unless
something in it compiles; and every worker ends as ``sys.exit(main())`` would, less the
interpreter's teardown (perfcheck/runner/process/end.py)."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch

from perfcheck.runner.dynamo import stats as dynamo_stats


@pytest.mark.e2e
def test_an_eager_timing_worker_does_not_import_dynamo() -> None:
    probe = (
        "import sys, perfcheck.runner.timing.worker\n"
        "print(sorted(m for m in ('torch._dynamo', 'torch._inductor') if m in sys.modules))"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=120
    )
    assert done.stdout.strip() == "[]", done.stdout


def test_the_counters_read_what_dynamo_counted_once_it_is_loaded() -> None:
    before = dynamo_stats.compile_activity()
    torch.compile(lambda x: x * 2, backend="eager")(torch.ones(3))
    assert "torch._dynamo" in sys.modules
    assert dynamo_stats.compile_activity() > before and dynamo_stats.compiled_frames() >= 1


ENDING = """\
import atexit, sys, threading, time
from perfcheck.runner.process.end import run_and_end

def main():
    atexit.register(lambda: print("atexit ran"))
    threading.Thread(target=time.sleep, args=(3600,)).start()  # not a daemon: never joined
    print("unflushed", end="")
    {body}

run_and_end(main)
"""


@pytest.mark.e2e
@pytest.mark.parametrize(
    ("body", "code", "stderr"),
    [
        ("return 3", 3, ""),
        ("return None", 0, ""),
        ("sys.exit('no spec given')", 1, "no spec given"),
        ("raise ValueError('bad spec')", 1, "Traceback (most recent call last)"),
    ],
)
def test_a_worker_ends_with_its_exit_code_its_output_and_its_atexit_handlers(
    body: str, code: int, stderr: str
) -> None:
    done = subprocess.run(
        [sys.executable, "-c", ENDING.format(body=body)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == code, done.stderr
    assert done.stdout == "unflushedatexit ran\n"
    assert stderr in done.stderr
    if "ValueError" in body:
        assert "ValueError: bad spec" in done.stderr


ON_CORES = """\
import os, sys, threading
from perfcheck.runner.latency.cold_compile import on_cores
from perfcheck.runner.timing.worker import pin_to

cores = set(map(int, sys.argv[1].split(",")))
os.sched_setaffinity(0, cores)
started, stop = threading.Event(), threading.Event()
ids = []


def other():  # a thread torch started, as the autograd engine's device thread is
    ids.append(threading.get_native_id())
    started.set()
    stop.wait()


threading.Thread(target=other, daemon=True).start()
started.wait()
pin_to(min(cores))
print(sorted(os.sched_getaffinity(ids[0])))
with on_cores(cores):
    print(sorted(os.sched_getaffinity(ids[0])), sorted(os.sched_getaffinity(0)))
print(sorted(os.sched_getaffinity(ids[0])), sorted(os.sched_getaffinity(0)))
stop.set()
"""


@pytest.mark.e2e
def test_a_compile_after_the_rounds_has_every_core_in_every_thread() -> None:
    # A timing worker pins all its threads to one core for its rounds; its cache-cold compile then
    # wants all of them, in the thread that compiles a training step's backward too.
    from conftest import SESSION_CPUS

    if len(SESSION_CPUS) < 2:
        pytest.skip("needs two cores to tell one from all")
    cores = ",".join(map(str, SESSION_CPUS))
    done = subprocess.run(
        [sys.executable, "-c", ON_CORES, cores], capture_output=True, text=True, check=True, timeout=60
    )
    pinned, inside, after = done.stdout.strip().splitlines()
    one, every = [min(SESSION_CPUS)], list(SESSION_CPUS)
    assert pinned == str(one)
    assert inside == f"{every} {every}"
    assert after == f"{one} {one}"
