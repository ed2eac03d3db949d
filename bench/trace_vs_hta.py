"""perfcheck's trace analytics against HolisticTraceAnalysis (HTA) on the same traces: speed, peak
memory, and agreement of the communication overlap and the temporal breakdown.

    python bench/trace_vs_hta.py --hta-python /tmp/hta-venv/bin/python [--traces ../shared/traces]

HTA lives in a virtual environment of its own, never in the project's dependencies:
``python3 -m venv /tmp/hta-venv && /tmp/hta-venv/bin/pip install HolisticTraceAnalysis==0.5.0``.

Every measurement is a fresh process running this file with ``--worker``, so each side's peak RSS
(``ru_maxrss``) is its own. One job per pair of traces (base, head), the work of a review: read
both traces, compute the overlap and the breakdown of each, and diff head against base per GPU
kernel. Times are taken inside the worker, after its imports (reported apart), as the median of
``--repeat`` fresh processes.
"""

from __future__ import annotations

import argparse
import json
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
PAIRS = (
    ("a100_rank3_of8_control", "v100_rank1_of2_test"),
    ("a100_rank0_of2_nccl", "a100_rank0_of16"),
)
# HTA 0.5.0's figures as the traces' README gives them: overlap, idle, compute, non-compute (%).
REFERENCE = {
    "a100_rank3_of8_control": (47.03, 16.20, 61.23, 22.57),
    "v100_rank1_of2_test": (68.80, 7.47, 68.31, 24.23),
    "a100_rank0_of2_nccl": (14.31, 77.78, 17.26, 4.97),
    "a100_rank0_of16": (1.37, 69.44, 14.15, 16.41),
}
FIGURES = ("overlap", "idle", "compute", "non_compute")


def _peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _ours(files: list[Path], hta_rounding: bool) -> dict[str, Any]:
    start = time.perf_counter()
    from perfcheck.core.trace import diff_times, summarize

    imported = time.perf_counter()
    figures, summaries, analysis = {}, [], []
    for path in files:
        t = time.perf_counter()
        s = summarize(path, hta_rounding)
        b = s.breakdown
        assert b is not None, f"{path}: no GPU kernels"
        figures[path.name] = [s.comm_overlap_pct, b.idle_pct, b.compute_pct, b.non_compute_pct]
        analysis.append(time.perf_counter() - t)
        summaries.append(s)
    t = time.perf_counter()
    rows = len(diff_times(summaries[0].per_step(), summaries[1].per_step()))
    diff = time.perf_counter() - t
    return {
        "import_s": imported - start,
        "analysis_s": analysis,
        "diff_s": diff,
        "figures": figures,
        "rows": rows,
    }


def _hta(files: list[Path], _: bool) -> dict[str, Any]:
    start = time.perf_counter()
    import logging

    from hta.trace_analysis import TraceAnalysis
    from hta.trace_diff import DeviceType, TraceDiff

    logging.disable(logging.WARNING)
    imported = time.perf_counter()
    # HTA reads a folder of per-rank traces: give each file a folder of its own.
    folders: list[str] = []
    for path in files:
        folders.append(tempfile.mkdtemp(prefix="hta-"))
        (Path(folders[-1]) / path.name).symlink_to(path.resolve())
    figures, analysis = {}, []
    for path, folder in zip(files, folders, strict=True):
        t = time.perf_counter()
        ta = TraceAnalysis(trace_dir=folder)
        overlap = ta.get_comm_comp_overlap(visualize=False)
        breakdown = ta.get_temporal_breakdown(visualize=False)
        analysis.append(time.perf_counter() - t)
        b = breakdown.iloc[0]
        figures[path.name] = [
            float(overlap.iloc[0]["comp_comm_overlap_pctg"]),
            float(b["idle_time_pctg"]),
            float(b["compute_time_pctg"]),
            float(b["non_compute_time_pctg"]),
        ]
    t = time.perf_counter()
    rows = len(TraceDiff.compare_traces(folders[0], folders[1], device_type=DeviceType.GPU))
    diff = time.perf_counter() - t
    for folder in folders:
        shutil.rmtree(folder)
    return {
        "import_s": imported - start,
        "analysis_s": analysis,
        "diff_s": diff,
        "figures": figures,
        "rows": rows,
    }


def worker(side: str, files: list[Path], hta_rounding: bool) -> None:
    run = _ours if side == "ours" else _hta
    result = run(files, hta_rounding)
    result["peak_rss_mb"] = _peak_rss_mb()
    print(json.dumps(result))


def _job(python: str, side: str, files: list[Path], hta_rounding: bool = False) -> dict[str, Any]:
    argv = [python, __file__, "--worker", side, *map(str, files)]
    if hta_rounding:
        argv.append("--hta-rounding")
    done = subprocess.run(argv, capture_output=True, text=True, check=False, timeout=1800)
    if done.returncode != 0:
        raise SystemExit(f"{side} worker failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def _repeated_job(python: str, side: str, files: list[Path], repeat: int) -> dict[str, Any]:
    """Medians over ``repeat`` fresh processes, and the fastest total: on a shared machine the
    minimum is the least disturbed measurement, the median the typical one."""
    runs = [_job(python, side, files) for _ in range(repeat)]
    out = dict(runs[0])
    for key in ("import_s", "diff_s", "peak_rss_mb"):
        out[key] = statistics.median(r[key] for r in runs)
    out["analysis_s"] = [statistics.median(r["analysis_s"][i] for r in runs) for i in range(len(files))]
    totals = [sum(r["analysis_s"]) + r["diff_s"] for r in runs]
    analyses = [sum(r["analysis_s"]) for r in runs]
    out["total_s"], out["total_min_s"] = statistics.median(totals), min(totals)
    out["analysis_sum_s"], out["analysis_min_s"] = statistics.median(analyses), min(analyses)
    return out


def _agreement(name: str, ours: list[float], hta: list[float]) -> str:
    worst = max(abs(a - b) for a, b in zip(ours, hta, strict=True))
    cells = " | ".join(f"{a:.2f} / {b:.2f}" for a, b in zip(ours, hta, strict=True))
    return f"| {name} | {cells} | {worst:.2f} |"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--hta-python", help="python of a venv with HolisticTraceAnalysis (required)")
    parser.add_argument("--python", default=sys.executable, help="python with perfcheck (default: this one)")
    parser.add_argument("--traces", type=Path, default=REPO.parent / "shared" / "traces")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--worker", choices=("ours", "hta"), help=argparse.SUPPRESS)
    parser.add_argument("--hta-rounding", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("files", nargs="*", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args.worker, args.files, args.hta_rounding)
        return 0
    if not args.hta_python:
        parser.error("--hta-python is required")

    columns = ("import s", "analysis s", "diff s", "total s (median)", "total s (min)", "peak RSS MB")
    print("| job (base → head) | side | " + " | ".join(columns) + " |")
    print("|---|---|---|---|---|---|---|---|")
    keys = ("total_s", "total_min_s", "analysis_sum_s", "analysis_min_s", "peak_rss_mb")
    measured: dict[str, dict[str, list[float]]] = {side: {k: [] for k in keys} for side in ("ours", "hta")}
    figures: dict[str, dict[str, list[float]]] = {"ours": {}, "hta": {}}
    for pair in PAIRS:
        files = [args.traces / f"{name}.json.gz" for name in pair]
        for side, python in (("ours", args.python), ("hta", args.hta_python)):
            r = _repeated_job(python, side, files, args.repeat)
            for k in keys:
                measured[side][k].append(r[k])
            figures[side].update(r["figures"])
            analysis = " + ".join(f"{x:.2f}" for x in r["analysis_s"])
            print(
                f"| {pair[0]} → {pair[1]} | {side} | {r['import_s']:.2f} | {analysis} | {r['diff_s']:.3f} "
                f"| {r['total_s']:.2f} | {r['total_min_s']:.2f} | {r['peak_rss_mb']:.0f} |"
            )
    print()
    ours, hta = measured["ours"], measured["hta"]
    for label, key in (
        ("parse + overlap + breakdown + diff, median", "total_s"),
        ("parse + overlap + breakdown + diff, min", "total_min_s"),
        ("parse + overlap + breakdown only, median", "analysis_sum_s"),
        ("parse + overlap + breakdown only, min", "analysis_min_s"),
    ):
        ratios = [h / o for o, h in zip(ours[key], hta[key], strict=True)]
        print(f"speed-up, HTA / ours ({label}): " + ", ".join(f"{q:.1f}x" for q in ratios))
    shares = (o / h for o, h in zip(ours["peak_rss_mb"], hta["peak_rss_mb"], strict=True))
    print("peak RSS, ours / HTA: " + ", ".join(f"{q:.2f}" for q in shares))

    rounded: dict[str, list[float]] = {}
    for pair in PAIRS:
        files = [args.traces / f"{name}.json.gz" for name in pair]
        rounded.update(_job(args.python, "ours", files, hta_rounding=True)["figures"])
    for title, ours in (("exact times (default)", figures["ours"]), ("--hta-rounding", rounded)):
        print(f"\nagreement, {title}: ours / HTA live, percent; last column the largest difference (pp)")
        print("| trace | overlap | idle | compute | non-compute | max Δ |")
        print("|---|---|---|---|---|---|")
        for name in sorted(ours):
            print(_agreement(name.removesuffix(".json.gz"), ours[name], figures["hta"][name]))
    print("\nHTA live vs the README's HTA 0.5.0 figures, largest difference (pp):")
    for name, ref in REFERENCE.items():
        live = figures["hta"][f"{name}.json.gz"]
        print(f"  {name}: {max(abs(a - b) for a, b in zip(live, ref, strict=True)):.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
