"""Counting a region's instructions under valgrind's callgrind, from inside the counted process.

The probe process runs as ``valgrind --tool=callgrind --instr-atstart=no python ...``: nothing is
instrumented at first, so importing torch runs at valgrind's uninstrumented speed (18 s here, 86 s
instrumented). Around the region the process switches instrumentation on and dumps the counters
at each stage boundary, through callgrind's client requests. torch's own ``_valgrind_toggle``
toggles *collection*, which counts nothing while instrumentation is off, so the requests come
from a four-function C shim built with valgrind's own header. Compiler subprocesses (the C++
builds Inductor starts) are not followed: their time is the wall-clock measure's to see.
"""

from __future__ import annotations

import ctypes
import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

# Where a probe process under callgrind writes its dumps; the orchestrator sets it.
OUT_ENV = "PERFCHECK_CALLGRIND_DIR"

_SHIM = r"""
#include <valgrind/callgrind.h>
void pc_start(void) { CALLGRIND_START_INSTRUMENTATION; CALLGRIND_ZERO_STATS; }
void pc_dump(const char *label) { CALLGRIND_DUMP_STATS_AT(label); }
void pc_stop(void) { CALLGRIND_STOP_INSTRUMENTATION; }
int pc_running(void) { return RUNNING_ON_VALGRIND; }
"""


class CallgrindError(RuntimeError):
    """Callgrind was asked for and cannot count here; the message says why."""


def valgrind() -> str | None:
    return shutil.which("valgrind")


def header_dir() -> Path | None:
    """The folder holding ``valgrind/callgrind.h``: beside the valgrind binary's prefix."""
    found = valgrind()
    candidates = [Path(found).resolve().parent.parent / "include"] if found else []
    candidates.append(Path("/usr/include"))
    return next((c for c in candidates if (c / "valgrind" / "callgrind.h").is_file()), None)


def command(out_dir: Path) -> list[str]:
    """The prefix that runs a process under callgrind with instrumentation off until asked."""
    found = valgrind()
    if found is None:
        raise CallgrindError("valgrind is not on PATH")
    return [
        found,
        "--tool=callgrind",
        "--instr-atstart=no",
        "--trace-children=no",
        "--dump-line=no",
        "--dump-instr=no",
        f"--callgrind-out-file={out_dir}/callgrind.out.%p",
        "-q",
    ]


def _build_shim(folder: Path) -> Path:
    include = header_dir()
    compiler = shutil.which(os.environ.get("CC", "cc")) or shutil.which("gcc")
    if include is None or compiler is None:
        raise CallgrindError("valgrind's callgrind.h or a C compiler is missing")
    src, lib = folder / "pc_callgrind.c", folder / "pc_callgrind.so"
    src.write_text(_SHIM)
    subprocess.run(
        [compiler, "-shared", "-fPIC", "-O1", f"-I{include}", "-o", str(lib), str(src)],
        check=True,
        capture_output=True,
    )
    return lib


_TRIGGER = re.compile(r"^desc: Trigger: Client Request: (\S+)", re.M)
_TOTALS = re.compile(r"^(?:totals|summary): (\d+)", re.M)


class Counter:
    """The instructions between ``start`` and each ``dump(label)``, read back from the dumps."""

    def __init__(self) -> None:
        out = os.environ.get(OUT_ENV)
        if not out:
            raise CallgrindError(f"{OUT_ENV} is not set: the process was not started under callgrind")
        self.out = Path(out)
        self._lib = ctypes.CDLL(str(_build_shim(Path(tempfile.mkdtemp(prefix="perfcheck-cg-")))))
        self._lib.pc_dump.argtypes = [ctypes.c_char_p]
        if not self._lib.pc_running():
            raise CallgrindError("the process is not running under valgrind")

    def start(self) -> None:
        self._seen = set(self.out.glob(f"callgrind.out.{os.getpid()}.*"))
        self._lib.pc_start()

    def dump(self, label: str) -> None:
        self._lib.pc_dump(label.encode())

    def stop(self) -> list[tuple[str, int]]:
        """Stop instrumenting; (label, instructions) of every dump since ``start``, in order."""
        self._lib.pc_stop()
        new = [p for p in self.out.glob(f"callgrind.out.{os.getpid()}.*") if p not in self._seen]
        out = []
        for path in sorted(new, key=lambda p: int(p.name.rsplit(".", 1)[1])):
            text = path.read_text(errors="replace")
            trigger, totals = _TRIGGER.search(text), _TOTALS.search(text)
            if trigger is None or totals is None:
                raise CallgrindError(f"cannot read callgrind's dump {path.name}")
            count = int(totals.group(1))
            if count >= 2**63:
                # A negative count wrapped around: seen with OpenMP threads running in the region
                # (latency_runs.CALLGRIND_ENV keeps ATen on one thread for this and for noise).
                raise CallgrindError(f"callgrind's dump {path.name} holds a negative count")
            out.append((trigger.group(1), count))
            path.unlink()  # a dump per stage boundary: megabytes each, read once
        return out
