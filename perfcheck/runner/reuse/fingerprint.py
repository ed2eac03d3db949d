"""The environment fingerprint of one side: what must match before timings are compared."""

from __future__ import annotations

import os
import platform
import subprocess
import sys
from functools import cache

from perfcheck.measures import Environment


def _cpu_model() -> str | None:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or None


def _driver() -> str | None:
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=20,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip().splitlines()[0] if out.returncode == 0 and out.stdout.strip() else None


@cache
def environment(device: str) -> Environment:
    import torch

    try:
        import triton

        triton_version: str | None = triton.__version__
    except ImportError:
        triton_version = None
    on_gpu = device == "cuda" and torch.cuda.is_available()
    return Environment(
        python=platform.python_version(),
        torch=torch.__version__,
        triton=triton_version,
        cuda=torch.version.cuda,
        driver=_driver() if on_gpu else None,
        gpu_name=torch.cuda.get_device_name(0) if on_gpu else None,
        gpu_count=torch.cuda.device_count() if on_gpu else 0,
        cpu=_cpu_model(),
        cpu_count=os.cpu_count(),
        platform=f"{platform.system()} {platform.machine()} ({sys.implementation.name})",
    )


def main(argv: list[str] | None = None) -> int:
    """``python -m perfcheck.runner.reuse.fingerprint DEVICE.json fd:N``: this interpreter's environment
    on the device the file names (``{"device": "cuda"}``), as a probe process of it reports it. Run
    by the orchestrator behind base's walls, where reused results are checked against it
    (perfcheck/runner/reuse/store.py): it runs no code of any tree."""
    import json

    from perfcheck.runner.process.channel import write_result

    args = sys.argv[1:] if argv is None else argv
    if len(args) != 2:
        print("usage: python -m perfcheck.runner.reuse.fingerprint DEVICE.json fd:N", file=sys.stderr)
        return 2
    with open(args[0], encoding="utf-8") as f:
        device = str(json.load(f)["device"])
    write_result(args[1], environment(device).model_dump_json())
    return 0


if __name__ == "__main__":
    from perfcheck.runner.process.end import run_and_end

    run_and_end(main)
