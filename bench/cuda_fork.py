"""Which import initializes CUDA's driver, and whether a child forked after the fork server's
imports can still use CUDA: ``python bench/cuda_fork.py`` on a GPU machine, one JSON line per case.

Why: perfcheck/runner/process/forkserver.py serves only where its imports leave CUDA's driver uninitialized (a
child forked after ``cuInit`` cannot use CUDA). On the H200's image the check said the driver was
initialized after the server's imports. ``torch.cuda.is_available()`` calls ``cudaGetDeviceCount``,
which runs ``cuInit``, unless ``PYTORCH_NVML_BASED_CUDA_CHECK=1`` asks it to count devices through
NVML; this measures each import step both ways, then forks a child that runs a CUDA kernel.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

STEPS = [
    "import torch",
    "import torch._dynamo",
    "import torch._dynamo.backends.common",
    "import torch._functorch.aot_autograd",
    "import torch._inductor.compile_fx",
    "import torch.export",
    "from perfcheck.runner import timing_worker, worker",
    "from perfcheck.runner.probes.lookup import load_builtin; load_builtin()",
    "import torch; torch.cuda.device_count()",
    "from perfcheck.runner.process.forkserver_warmup import preimport; REFUSAL = preimport()",
]

CHILD = """
import json, os, sys, time
from perfcheck.runner.process.forkserver_warmup import cuda_driver_initialized
steps = json.loads(sys.argv[1])
seen = []
for step in steps:
    start = time.perf_counter()
    exec(step)
    seen.append({"step": step, "driver_initialized": cuda_driver_initialized(),
                 "s": round(time.perf_counter() - start, 2)})
pid = os.fork()
if pid == 0:
    try:
        # As a fork server's child: every inherited descriptor closed, its own environment, then
        # what transformers does on import (a device count before CUDA is initialized).
        for name in os.listdir("/proc/self/fd"):
            if int(name) > 2:
                try:
                    os.close(int(name))
                except OSError:
                    pass
        os.environ.pop("PYTORCH_NVML_BASED_CUDA_CHECK", None)
        import torch
        print("child: device_count", torch.cuda.device_count(), "available", torch.cuda.is_available(),
              file=sys.stderr)
        print("child:", torch.cuda.get_device_name(0), file=sys.stderr)
        value = (torch.ones(4, device="cuda") * 2).sum().item()
        os._exit(0 if value == 8.0 else 5)
    except BaseException as err:
        print("child:", type(err).__name__, err, file=sys.stderr)
        os._exit(4)
_, status = os.waitpid(pid, 0)
print(json.dumps({"steps": seen, "refusal": REFUSAL, "forked_child_exit": os.waitstatus_to_exitcode(status)}))
"""


def main() -> int:
    for nvml in ("0", "1"):
        env = {**os.environ, "PYTORCH_NVML_BASED_CUDA_CHECK": nvml}
        start = time.perf_counter()
        done = subprocess.run(
            [sys.executable, "-c", CHILD, json.dumps(STEPS)],
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        line = done.stdout.strip().splitlines()[-1] if done.stdout.strip() else "{}"
        print(
            json.dumps(
                {
                    "nvml_check": nvml,
                    "exit": done.returncode,
                    "wall_s": round(time.perf_counter() - start, 1),
                    "result": json.loads(line),
                    "stderr_tail": done.stderr[-1500:],
                }
            )
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
