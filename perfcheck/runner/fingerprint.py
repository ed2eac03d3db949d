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
