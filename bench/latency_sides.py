"""Compile latency's samples side by side, per pair: where two identical sides' cache-cold
compiles differ (an A/A that is not silent), this says in which stage and in what work.

    python bench/latency_sides.py OUT/result.json [OUT2/result.json ...]

For each workload of each review: every pair's wall time and stages (Dynamo, AOTAutograd,
Inductor) for base and head, the work Inductor's counters say each compile did (Triton kernels
built or found, autotuning benchmarks; what the process compiled before it, its warm-up), and
the mean of each over the pairs.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from statistics import mean
from typing import Any


def _latency(results: list[dict[str, Any]]) -> dict[str, Any] | None:
    for r in results:
        if r.get("probe") == "compile" and (r.get("metrics") or {}).get("latency"):
            return r["metrics"]["latency"]
    return None


def _line(sample: dict[str, Any]) -> str:
    stages = " ".join(f"{k} {v:.2f}" for k, v in sorted(sample.get("stages_s", {}).items()))
    work = " ".join(f"{k}={v}" for k, v in sorted(sample.get("work", {}).items()))
    earlier = " ".join(f"{k}={v}" for k, v in sorted(sample.get("earlier", {}).items()))
    return (
        f"{sample['wall_s']:.2f} s ({stages}){' · ' + work if work else ''}"
        f"{' · before it: ' + earlier if earlier else ''}"
    )


def report(path: Path) -> None:
    review = json.loads(path.read_text())
    print(f"# {path}: {review.get('verdict')} · {review.get('summary', '')[:160]}")
    for wl in review.get("workloads", []):
        base, head = _latency(wl.get("base", [])), _latency(wl.get("head", []))
        if base is None or head is None:
            print(f"{wl['name']}: no compile-latency samples on both sides")
            continue
        print(f"{wl['name']} ({base.get('measure')})")
        for i, (b, h) in enumerate(zip(base["samples"], head["samples"], strict=False)):
            print(f"  pair {i + 1}: base {_line(b)}")
            print(f"          head {_line(h)}")
        for side, lat in (("base", base), ("head", head)):
            samples = lat["samples"]
            if not samples:
                continue
            stages = sorted({k for s in samples for k in s.get("stages_s", {})})
            means = " ".join(
                f"{k} {mean(s.get('stages_s', {}).get(k, 0.0) for s in samples):.2f}" for k in stages
            )
            print(f"  mean {side}: {mean(s['wall_s'] for s in samples):.2f} s ({means})")


def main() -> int:
    for arg in sys.argv[1:]:
        report(Path(arg))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
