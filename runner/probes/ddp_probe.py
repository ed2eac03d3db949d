"""The `ddp` probe: the workload under DistributedDataParallel on ``ddp.world_size`` ranks.

Launched with torchrun (``torch.distributed.run --standalone``), never a launcher of our own:
the same command line runs one rank per GPU with NCCL, or several gloo ranks on a CPU. The ranks
are perfcheck.runner.ddp_worker; rank 0 writes the gathered metrics, read back here.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

from perfcheck.runner.probes.base import ProbeOutput, Workload, register
from perfcheck.schema import DdpMetrics, load_model
from perfcheck.spec import ProbeSpec


def _first_error(output: str) -> str:
    """The rank's own error line (`SomeError: ...`), not torchrun's summary around it."""
    for line in output.splitlines():
        text = line.split("]:", 1)[-1].strip()
        if text and "Error" in text.split(":", 1)[0] and not text.startswith("torch.distributed.elastic"):
            return text
    return "see the probe log"


class DdpProbe:
    name = "ddp"

    def run(self, spec: ProbeSpec, build: Callable[[], Workload]) -> ProbeOutput:
        with tempfile.TemporaryDirectory(prefix="perfcheck-ddp-") as tmp:
            out = Path(tmp)
            spec_path = out / "spec.json"
            spec_path.write_text(spec.model_dump_json())
            command = [
                sys.executable,
                "-m",
                "torch.distributed.run",
                "--standalone",
                "--nnodes=1",
                f"--nproc-per-node={spec.ddp.world_size}",
                "-m",
                "perfcheck.runner.ddp_worker",
                str(spec_path),
                str(out),
            ]
            # The orchestrator's timeout kills this process group, torchrun and its ranks with it.
            done = subprocess.run(command, capture_output=True, text=True, check=False)
            result = out / "ddp.json"
            sys.stderr.write(done.stdout + done.stderr)  # the ranks' output, into this probe's log
            if done.returncode != 0 or not result.exists():
                raise RuntimeError(
                    f"torchrun exited with code {done.returncode}: {_first_error(done.stderr)}"
                )
            metrics = load_model(DdpMetrics, result.read_bytes(), str(result))
        failed = [v for v in metrics.variants if v.error]
        message = "; ".join(f"{v.variant}: {v.error}" for v in failed) or None
        return ProbeOutput(metrics={"ddp": metrics}, message=message)


@register("ddp")
def _factory() -> DdpProbe:
    return DdpProbe()
