"""The probes that need several ranks (`ddp`, `fsdp`) launch them with torchrun
(``torch.distributed.run --standalone``), never a launcher of their own: the same command line
runs one rank per GPU with NCCL, or several gloo ranks on a CPU. Rank 0 writes the gathered
result into the run's folder; the ranks' output goes into the calling probe's log.
"""

from __future__ import annotations

import re
import subprocess
import sys
import tempfile
from pathlib import Path

from perfcheck.spec import ProbeSpec

# A traceback's last line: an exception's (dotted) name, then its message.
_ERROR_LINE = re.compile(r"[A-Za-z_][\w.]*(Error|Exception|Interrupt|Exit)\b(: .*)?$")


def first_error(output: str) -> str:
    """The rank's own error line (`SomeError: ...`), not torchrun's summary around it, nor a
    traceback's source line that names an error (`raise RuntimeError(`)."""
    for line in output.splitlines():
        text = line.split("]:", 1)[-1].strip()
        if _ERROR_LINE.match(text) and not text.startswith("torch.distributed.elastic"):
            return text
    return "see the probe log"


def run_ranks(module: str, spec: ProbeSpec, world_size: int, result_name: str) -> tuple[bytes, str]:
    """``torchrun -m module SPEC OUT`` on ``world_size`` ranks; rank 0's OUT/result_name and where
    it was read from. Raises RuntimeError with the ranks' first error when there is no result."""
    with tempfile.TemporaryDirectory(prefix=f"perfcheck-{spec.probe}-") as tmp:
        out = Path(tmp)
        spec_path = out / "spec.json"
        spec_path.write_text(spec.model_dump_json())
        command = [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--standalone",
            "--nnodes=1",
            f"--nproc-per-node={world_size}",
            "-m",
            module,
            str(spec_path),
            str(out),
        ]
        # The orchestrator's timeout kills this process group, torchrun and its ranks with it.
        done = subprocess.run(command, capture_output=True, text=True, check=False)
        result = out / result_name
        sys.stderr.write(done.stdout + done.stderr)  # the ranks' output, into this probe's log
        if done.returncode != 0 or not result.exists():
            raise RuntimeError(f"torchrun exited with code {done.returncode}: {first_error(done.stderr)}")
        return result.read_bytes(), str(result)
