"""Compile latency's trust figures: A/A spread and cost of each measure, and a planted deeper graph.

Each trial is a real review (``perfcheck.review.run``, ``--probes compile``) of the demo's base
against itself (A/A) or against the demo's base with eight more layers (the plant), with
``compile.measure`` callgrind or wall. It records per trial the pairs' head/base ratios, the
verdict's interval, the findings and what the latency measurement cost in wall-clock seconds (the
review's time less its two compile probes). ``report`` prints the table docs/benchmarks.md shows.

    python bench/compile_latency.py run --backend inductor --measure callgrind --trials 2 --out cg.json
    python bench/compile_latency.py run --backend aot_eager --measure wall --trials 3 --out wall.json
    python bench/compile_latency.py report cg.json wall.json
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from perfcheck.config import parse_config
from perfcheck.measures import CompileMetrics
from perfcheck.review import ReviewRequest, run
from perfcheck.runner.process.sides import SHARED_CACHE_ENV

REPO = Path(__file__).resolve().parent.parent
DEMO = REPO / "examples" / "demo" / "base"
LAYERS = 8

CONFIG = """
workloads:
  - {{name: classifier, entry: model.py:build, train: true, timeout_s: 1800}}
compile: {{backend: {backend}, measure: {measure}, runs: {runs}, callgrind_budget_s: 100000}}
"""


def _deeper(root: Path) -> Path:
    """The demo's base with LAYERS more Linear+ReLU layers between its two."""
    text = (DEMO / "model.py").read_text()
    text = text.replace(
        "        self.fc2 = nn.Linear(128, 10)\n",
        f"        self.extra = nn.ModuleList(nn.Linear(128, 128) for _ in range({LAYERS}))\n"
        "        self.fc2 = nn.Linear(128, 10)\n",
    )
    text = text.replace(
        "        return self.fc2(h)\n",
        "        for layer in self.extra:\n"
        "            h = torch.relu(layer(h))\n"
        "        return self.fc2(h)\n",
    )
    root.mkdir(parents=True, exist_ok=True)
    (root / "model.py").write_text(text)
    return root


def _trial(kind: str, backend: str, measure: str, runs: int, work: Path) -> dict[str, Any]:
    head = DEMO if kind == "A/A" else _deeper(work / "deeper")
    config = parse_config(CONFIG.format(backend=backend, measure=measure, runs=runs), "bench.yml")
    start = time.monotonic()
    result, _ = run(
        ReviewRequest(base=DEMO, head=head, config=config, out_dir=work / "out", probes=("compile",))
    )
    total = time.monotonic() - start
    wl = result.workloads[0]
    structural = sum(r.duration_s for r in [*wl.base, *wl.head])
    compiled = {side: getattr(wl, side)[0].metrics_as(CompileMetrics) for side in ("base", "head")}
    latency = {side: m.latency for side, m in compiled.items()}
    key = "instructions" if measure == "callgrind" else "wall_s"
    pairs = [
        getattr(h, key) / getattr(b, key)
        for b, h in zip(latency["base"].samples, latency["head"].samples, strict=False)  # type: ignore[union-attr]
    ]
    change = wl.compile_latency
    return {
        "kind": kind,
        "backend": backend,
        "measure": measure,
        "runs": runs,
        "pair_pct": [round((r - 1) * 100, 4) for r in pairs],
        "interval_pct": [round(change.low_pct, 3), round(change.change_pct, 3), round(change.high_pct, 3)]
        if change
        else None,
        "findings": [(f.category, f.severity, f.evidence.get("stage")) for f in result.findings],
        "first_compile_s": [compiled[side].cold_compile_s for side in ("base", "head")],
        "latency_cost_s": round(total - structural, 1),
        "review_s": round(total, 1),
        "samples": {s: [x.model_dump() for x in v.samples] for s, v in latency.items() if v},  # type: ignore[union-attr]
    }


def cmd_run(args: argparse.Namespace) -> int:
    os.environ.pop(SHARED_CACHE_ENV, None)  # the measured compiles are cold, or not measured at all
    out: list[dict[str, Any]] = []
    for i in range(args.trials):
        for kind in ("A/A", "deeper"):
            with tempfile.TemporaryDirectory(prefix="perfcheck-bench-latency-") as work:
                got = _trial(kind, args.backend, args.measure, args.runs, Path(work))
            print(json.dumps({k: v for k, v in got.items() if k != "samples"}), file=sys.stderr)
            out.append({"trial": i, **got})
            Path(args.out).write_text(json.dumps(out, indent=1))
    return 0


def cmd_report(args: argparse.Namespace) -> int:
    trials = [t for path in args.files for t in json.loads(Path(path).read_text())]
    print("| backend | measure | trial | pairs' head/base (%) | interval (%) | findings | latency cost |")
    print("|---|---|---|---|---|---|---|")
    for t in trials:
        pairs = ", ".join(f"{p:+.3f}" for p in t["pair_pct"])
        low, mid, high = t["interval_pct"] or (math.nan,) * 3
        found = "; ".join(f"{c} ({s}, {st})" for c, s, st in t["findings"]) or "none"
        interval = f"{mid:+.2f} ({low:+.2f} … {high:+.2f})"
        print(
            f"| {t['backend']} | {t['measure']} | {t['kind']} | {pairs} | {interval} "
            f"| {found} | {t['latency_cost_s']:.0f} s |"
        )
    aa = [p for t in trials if t["kind"] == "A/A" for p in t["pair_pct"]]
    if len(aa) > 1:
        print(
            f"\nA/A pairs: n = {len(aa)}, sd {statistics.stdev(aa):.3f} %, max |x| {max(map(abs, aa)):.3f} %"
        )
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    sub = parser.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run")
    r.add_argument("--backend", default="inductor")
    r.add_argument("--measure", choices=("callgrind", "wall"), default="callgrind")
    r.add_argument("--runs", type=int, default=3)
    r.add_argument("--trials", type=int, default=2)
    r.add_argument("--out", required=True)
    p = sub.add_parser("report")
    p.add_argument("files", nargs="+")
    args = parser.parse_args()
    return cmd_run(args) if args.cmd == "run" else cmd_report(args)


if __name__ == "__main__":
    sys.exit(main())
