"""Record one device pass of a workload on a GPU: its Kineto trace and the figures perfcheck reads
from it, as a recorded input for the CPU tests of perfcheck/runner/timing/device_metrics.py.

    python bench/device_trace.py --workload mlp --steps 3 --out tests/data/h200-device-pass
"""

from __future__ import annotations

import argparse
import gzip
import json
import shutil
import sys
import tempfile
from pathlib import Path

from perfcheck.runner.timing.worker import Session
from perfcheck.settings import TimingConfig, WorkloadConfig
from perfcheck.spec import ProbeSpec


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workload", default="mlp", help="a built-in workload")
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--out", type=Path, required=True, help="writes OUT.trace.json.gz and OUT.json")
    args = parser.parse_args()
    spec = ProbeSpec(
        probe="timing",
        side="base",
        tree=tempfile.mkdtemp(),
        device="cuda",
        workload=WorkloadConfig(name=args.workload, entry=args.workload, train=True),
        timing=TimingConfig(),
    )
    session = Session(spec)
    setup = session.setup()
    session.warmup(None)
    trace = Path(tempfile.mkdtemp()) / "trace.json"
    figures = session.device(args.steps, keep=trace)
    with trace.open("rb") as src, gzip.open(f"{args.out}.trace.json.gz", "wb") as dst:
        shutil.copyfileobj(src, dst)
    record = {
        "workload": args.workload,
        "steps": args.steps,
        "environment": setup["environment"],
        "figures": figures,
    }
    Path(f"{args.out}.json").write_text(json.dumps(record, indent=1) + "\n")
    print(json.dumps(figures))
    return 0


if __name__ == "__main__":
    sys.exit(main())
