"""perfcheck's trace analytics against HolisticTraceAnalysis (HTA) on the same traces: speed, peak
memory, and agreement of the communication overlap and the temporal breakdown, per trace; and
whether diff rows grouped by HTA's short name (``--short-names``) are HTA's ``TraceDiff`` rows.

    python bench/trace_vs_hta.py --hta-python /tmp/hta-venv/bin/python \\
        --traces ../shared/traces --traces /tmp/hta-traces --traces tests/data [--repeat 5]

HTA lives in a virtual environment of its own, never in the project's dependencies:
``python3 -m venv /tmp/hta-venv && /tmp/hta-venv/bin/pip install HolisticTraceAnalysis==0.5.0``.

HTA's own test traces (its repository's tests/data, MIT licence: V100, A100, MI250, nanosecond
resolution, sampled ranks) are not kept in this repository; copy the ones in HTA_TRACES out of a
clone of HTA (a work tree or a bare git directory) at its v0.5.0 tag with

    git clone --branch v0.5.0 https://github.com/facebookresearch/HolisticTraceAnalysis /tmp/hta-src
    python bench/trace_vs_hta.py --collect-hta /tmp/hta-src --out /tmp/hta-traces

Every measurement is a fresh process running this file with ``--worker``, so each side's peak RSS
(``ru_maxrss``) is its own. A job is one trace: read it, compute the overlap and the temporal
breakdown (perfcheck's ``summarize`` also totals every kernel and CPU op). Times are taken inside
the worker, after its imports (reported apart), over ``--repeat`` fresh processes per side: the
median is the typical figure, the minimum the least disturbed on a shared machine.

``--whole-process`` times instead what a user meets: ``perfcheck trace summary FILE`` against a
small script doing HTA's equivalent (TraceAnalysis(trace_dir), get_comm_comp_overlap,
get_temporal_breakdown; HTA_SCRIPT), each a whole process under ``/usr/bin/time``, start-up and
imports included, the two sides taking turns, ``--repeat`` runs each (``--bytecode``: as
bench/startup.py says)::

    .venv/bin/python bench/trace_vs_hta.py --whole-process --hta-python /tmp/hta-venv/bin/python \
        --traces ../shared/traces --traces /tmp/hta-traces --traces tests/data --repeat 7
"""

from __future__ import annotations

import argparse
import json
import math
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
HTA_TAG = "v0.5.0"
# name -> (path in HTA's repository, what it is): the traces of its tests/data that have GPU
# activity and fit a snapshot (h100/h100_trace.json.gz and vision_transformer/* are over 4 MiB).
HTA_TRACES = {
    "v100_df_index_resolver": ("tests/data/df_index_resolver/df_index_resolver.json.gz", "V100, 216k events"),
    "v100_ns_resolution": (
        "tests/data/ns_resolution_trace/rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz",
        "V100, nanosecond timestamps",
    ),
    "mi250_minitoy_rocm6": (
        "tests/data/amd_trace/mi250_minitoy_train_ROCm6_2_kineto.json.gz",
        "AMD MI250, ROCm 6.2",
    ),
    "sampled_rank0": ("tests/data/trace_filter/sampled_rank-0.json.gz", "sampled rank 0 of 2"),
    "sampled_rank1": ("tests/data/trace_filter/sampled_rank-1.json.gz", "sampled rank 1 of 2"),
    "trace_compare_base": ("tests/data/trace_compare/base/base.json.gz", "HTA's TraceDiff test, base"),
    "trace_compare_test": ("tests/data/trace_compare/test/test.json.gz", "HTA's TraceDiff test, test"),
    "a100_triton_example": ("tests/data/triton_example/triton_example.json.gz", "A100, a Triton kernel"),
    "a100_alexnet": (
        "tests/data/critical_path/alexnet/benchmark_result_2869224_1695835535_trace.json.gz",
        "A100, no ProfilerStep",
    ),
    "a100_cuda_event_sync": (
        "tests/data/critical_path/cuda_event_sync/event_sync_trace.json.gz",
        "A100, event sync",
    ),
}
# The shared traces (../shared/traces/README.md says where in HTA's tests/data each comes from).
SHARED_TRACES = {
    "a100_rank3_of8_control": "A100, rank 3 of 8",
    "v100_rank1_of2_test": "V100, rank 1 of 2",
    "a100_rank0_of2_nccl": "A100, rank 0 of 2, ns timestamps",
    "a100_rank0_of16": "A100, rank 0 of 16",
}
# The project's own real traces in tests/data (tests/data/README.md, h200-mlp-hta-diff.json).
OWN_TRACES = {
    "h200-device-pass.trace": "H200, CUDA activity only",
    "h200-mlp-fp32.pt.trace": "H200, float32 MLP step",
    "h200-mlp-bf16.pt.trace": "H200, bfloat16 MLP step",
}
# Pairs whose GPU diff rows are compared with HTA's TraceDiff, both namings.
DIFF_PAIRS = (
    ("h200-mlp-fp32.pt.trace", "h200-mlp-bf16.pt.trace"),
    ("a100_rank3_of8_control", "v100_rank1_of2_test"),
    ("a100_rank0_of2_nccl", "a100_rank0_of16"),
    ("sampled_rank0", "sampled_rank1"),
    ("trace_compare_base", "trace_compare_test"),
)
FIGURES = ("overlap", "idle", "compute", "non_compute")
# What --whole-process runs on HTA's side, as a user of HTA would: a trace folder in, the overlap
# and the temporal breakdown out (HTA's log lines switched off, which only spares it time).
HTA_SCRIPT = """
import logging, sys
from hta.trace_analysis import TraceAnalysis
logging.disable(logging.WARNING)
ta = TraceAnalysis(trace_dir=sys.argv[1])
ta.get_comm_comp_overlap(visualize=False)
ta.get_temporal_breakdown(visualize=False)
"""
SPEED_TARGET, MEMORY_TARGET = 5.0, 1 / 3


def _peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _ours(path: Path, hta_rounding: bool = False) -> dict[str, Any]:
    start = time.perf_counter()
    from perfcheck.core.trace import summarize

    imported = time.perf_counter()
    s = summarize(path, hta_rounding)
    analysis = time.perf_counter() - imported
    b = s.breakdown
    figures = [s.comm_overlap_pct, *((b.idle_pct, b.compute_pct, b.non_compute_pct) if b else (None,) * 3)]
    return {"import_s": imported - start, "analysis_s": analysis, "figures": figures, "events": s.events}


def _trace_folder(path: Path) -> str:
    # HTA reads a folder of per-rank traces: give the file a folder of its own.
    folder = tempfile.mkdtemp(prefix="hta-")
    (Path(folder) / path.name).symlink_to(path.resolve())
    return folder


def _number(x: Any) -> float | None:
    x = float(x)
    return None if math.isnan(x) else x  # HTA's overlap is NaN without communication


def _hta(path: Path) -> dict[str, Any]:
    start = time.perf_counter()
    import logging

    from hta.trace_analysis import TraceAnalysis

    logging.disable(logging.WARNING)
    imported = time.perf_counter()
    folder = _trace_folder(path)
    t = time.perf_counter()
    ta = TraceAnalysis(trace_dir=folder)
    overlap = ta.get_comm_comp_overlap(visualize=False)
    breakdown = ta.get_temporal_breakdown(visualize=False)
    analysis = time.perf_counter() - t
    shutil.rmtree(folder)
    b = breakdown.iloc[0]
    figures = [
        _number(overlap.iloc[0]["comp_comm_overlap_pctg"]),
        _number(b["idle_time_pctg"]),
        _number(b["compute_time_pctg"]),
        _number(b["non_compute_time_pctg"]),
    ]
    return {"import_s": imported - start, "analysis_s": analysis, "figures": figures}


def _first_step(path: Path) -> str | None:
    from perfcheck.core.trace import StepError, summarize

    try:
        return str(min(summarize(path, steps="all").analysed))
    except StepError:
        return None  # no ProfilerStep: the whole trace, as HTA takes it


def _ours_diff(files: list[Path]) -> dict[str, Any]:
    """GPU rows of the first ProfilerStep of each side, as HTA's TraceDiff takes by default:
    {naming: {row name: [base count, head count, base us, head us]}}."""
    from perfcheck.core.trace import by_hta_short_name, summarize

    out: dict[str, dict[str, list[float]]] = {}
    sides = [summarize(path, hta_rounding=True, steps=_first_step(path)) for path in files]
    for naming, group in (("full", lambda s: s), ("hta-short", by_hta_short_name)):
        rows: dict[str, list[float]] = {}
        for i, s in enumerate(group(side) for side in sides):
            for op in s.kernels:
                row = rows.setdefault(op.name, [0, 0, 0.0, 0.0])
                row[i], row[2 + i] = op.count, op.total_us
        out[naming] = rows
    return out


def _hta_diff(files: list[Path]) -> dict[str, Any]:
    import logging

    from hta.trace_diff import DeviceType, TraceDiff

    logging.disable(logging.WARNING)
    folders = [_trace_folder(path) for path in files]
    out: dict[str, dict[str, list[float]]] = {}
    for naming, short in (("full", False), ("hta-short", True)):
        df = TraceDiff.compare_traces(
            folders[0], folders[1], device_type=DeviceType.GPU, use_short_name=short
        )
        columns = [f"{side}_{what}" for what in ("counts", "total_duration") for side in ("Control", "Test")]
        out[naming] = {
            str(name): [float(x) for x in row] for name, row in zip(df.index, df[columns].values, strict=True)
        }
    for folder in folders:
        shutil.rmtree(folder)
    return out


TRACE_WORKERS: dict[str, Callable[[Path], dict[str, Any]]] = {
    "ours": _ours,
    "ours-rounded": lambda path: _ours(path, hta_rounding=True),
    "hta": _hta,
}
DIFF_WORKERS: dict[str, Callable[[list[Path]], dict[str, Any]]] = {
    "ours-diff": _ours_diff,
    "hta-diff": _hta_diff,
}


def worker(kind: str, files: list[Path]) -> None:
    if kind in DIFF_WORKERS:
        result = DIFF_WORKERS[kind](files)
    else:
        result = {**TRACE_WORKERS[kind](files[0]), "peak_rss_mb": _peak_rss_mb()}
    print(json.dumps(result))


def _job(python: str, kind: str, files: list[Path]) -> dict[str, Any]:
    argv = [python, __file__, "--worker", kind, *map(str, files)]
    done = subprocess.run(argv, capture_output=True, text=True, check=False, timeout=1800)
    if done.returncode != 0:
        raise SystemExit(f"{kind} worker failed on {files}:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def _repeated(python: str, kind: str, path: Path, repeat: int) -> dict[str, Any]:
    runs = [_job(python, kind, [path]) for _ in range(repeat)]
    times = [r["analysis_s"] for r in runs]
    return {
        **runs[0],
        "import_s": statistics.median(r["import_s"] for r in runs),
        "median_s": statistics.median(times),
        "min_s": min(times),
        "peak_rss_mb": statistics.median(r["peak_rss_mb"] for r in runs),
    }


def _largest_gap(ours: list[float | None], hta: list[float | None]) -> float | None:
    """The largest difference in percentage points; None where one side has a figure the other lacks."""
    gaps = []
    for a, b in zip(ours, hta, strict=True):
        if (a is None) != (b is None):
            return None
        if a is not None and b is not None:
            gaps.append(abs(a - b))
    return max(gaps, default=0.0)


def _pct(x: float | None) -> str:
    return "—" if x is None else f"{x:.2f}"


def _gap(x: float | None) -> str:
    return "differs" if x is None else f"{x:.2f}"


def _traces(folders: list[Path]) -> list[tuple[str, Path, str]]:
    known = {**SHARED_TRACES, **OWN_TRACES, **{name: what for name, (_, what) in HTA_TRACES.items()}}
    found = []
    for folder in folders:
        for path in sorted(folder.glob("*.json.gz")):
            name = path.name.removesuffix(".json.gz")
            found.append((name, path, known.get(name, "")))
    return found


def collect(source: Path, out: Path) -> int:
    """Copy HTA_TRACES out of a clone of HTA (work tree, or a bare git directory at HTA_TAG)."""
    out.mkdir(parents=True, exist_ok=True)
    for name, (inside, _) in HTA_TRACES.items():
        target = out / f"{name}.json.gz"
        if (source / inside).is_file():
            shutil.copyfile(source / inside, target)
        else:
            blob = subprocess.run(
                ["git", f"--git-dir={source}", "show", f"{HTA_TAG}:{inside}"],
                capture_output=True,
                check=False,
            )
            if blob.returncode != 0:
                print(f"{name}: not in {source} ({inside})", file=sys.stderr)
                return 2
            target.write_bytes(blob.stdout)
        print(f"{target}  <- {inside}")
    return 0


def _speed_table(
    args: argparse.Namespace, traces: list[tuple[str, Path, str]]
) -> tuple[dict[str, Any], bool]:
    print(
        "| trace | what | timed events | perfcheck s (median / min) | HTA s (median / min) "
        "| speed-up (median / min) | perfcheck MB | HTA MB | memory share | max Δ pp "
        "| max Δ pp (--hta-rounding) |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    results: dict[str, Any] = {}
    met = True
    for name, path, what in traces:
        ours = _repeated(args.python, "ours", path, args.repeat)
        hta = _repeated(args.hta_python, "hta", path, args.repeat)
        rounded = _job(args.python, "ours-rounded", [path])
        speed = (hta["median_s"] / ours["median_s"], hta["min_s"] / ours["min_s"])
        share = ours["peak_rss_mb"] / hta["peak_rss_mb"]
        met &= min(speed) >= SPEED_TARGET and share <= MEMORY_TARGET
        results[name] = {"ours": ours, "hta": hta, "rounded": rounded}
        print(
            f"| {name} | {what} | {ours['events']:,} | {ours['median_s']:.3f} / {ours['min_s']:.3f} "
            f"| {hta['median_s']:.3f} / {hta['min_s']:.3f} | {speed[0]:.1f}× / {speed[1]:.1f}× "
            f"| {ours['peak_rss_mb']:.0f} | {hta['peak_rss_mb']:.0f} | {share:.2f} "
            f"| {_gap(_largest_gap(ours['figures'], hta['figures']))} "
            f"| {_gap(_largest_gap(rounded['figures'], hta['figures']))} |",
            flush=True,
        )
    imports = (
        [r["ours"]["import_s"] for r in results.values()],
        [r["hta"]["import_s"] for r in results.values()],
    )
    print(
        "\nimports, outside the times above (median per process): "
        f"perfcheck {statistics.median(imports[0]):.2f} s, HTA {statistics.median(imports[1]):.2f} s"
    )
    return results, met


def _figures_table(results: dict[str, Any]) -> None:
    print("\nfigures, perfcheck (exact times) / perfcheck --hta-rounding / HTA, percent")
    print("| trace | overlap | idle | compute | non-compute |")
    print("|---|---|---|---|---|")
    for name, r in results.items():
        cells = (
            " / ".join(_pct(side["figures"][i]) for side in (r["ours"], r["rounded"], r["hta"]))
            for i in range(len(FIGURES))
        )
        print(f"| {name} | " + " | ".join(cells) + " |")


def _diff_rows(args: argparse.Namespace, paths: dict[str, Path]) -> None:
    print("\ndiff rows, GPU, first ProfilerStep of each side (HTA's default): perfcheck vs HTA's TraceDiff")
    print("| base → head | naming | rows (perfcheck / HTA) | same names | same counts | max Δ total us |")
    print("|---|---|---|---|---|---|")
    for base, head in DIFF_PAIRS:
        if base not in paths or head not in paths:
            continue
        files = [paths[base], paths[head]]
        ours, hta = _job(args.python, "ours-diff", files), _job(args.hta_python, "hta-diff", files)
        for naming in ("full", "hta-short"):
            a, b = ours[naming], hta[naming]
            both = a.keys() & b.keys()
            counts = sum(1 for k in both if a[k][:2] == b[k][:2])
            gap = max((abs(a[k][i] - b[k][i]) for k in both for i in (2, 3)), default=0.0)
            print(
                f"| {base} → {head} | {naming} | {len(a)} / {len(b)} | {len(both)} | {counts} | {gap:.1f} |",
                flush=True,
            )


def _whole_processes(args: argparse.Namespace, traces: list[tuple[str, Path, str]]) -> bool:
    """``perfcheck trace summary FILE`` against HTA_SCRIPT, whole processes under /usr/bin/time;
    whether every trace of HTA's test data is at least SPEED_TARGET times faster, median and min."""
    from startup import environment, load, summary, timed

    env = environment(args.bytecode)
    perfcheck = str(Path(args.python).parent / "perfcheck")
    hta_traces = {*HTA_TRACES, *SHARED_TRACES}
    print(f"PYTHONDONTWRITEBYTECODE={env.get('PYTHONDONTWRITEBYTECODE', '(unset)')}; before: {load()}\n")
    print(
        "| trace | what | perfcheck s (median / min) | HTA s (median / min) | speed-up (median / min) "
        "| perfcheck MiB | HTA MiB |"
    )
    print("|---|---|---|---|---|---|---|")
    met = True
    for name, path, what in traces:
        folder = _trace_folder(path)
        ours_argv = [perfcheck, "trace", "summary", str(path.resolve())]
        hta_argv = [args.hta_python, "-c", HTA_SCRIPT, folder]
        if args.bytecode:  # an unmeasured run of each, which leaves the bytecode
            timed(ours_argv, env)
            timed(hta_argv, env)
        runs: tuple[list[tuple[float, float]], list[tuple[float, float]]] = ([], [])
        for _ in range(args.repeat):  # taking turns, so that a busy minute slows both sides alike
            runs[0].append(timed(ours_argv, env))
            runs[1].append(timed(hta_argv, env))
        shutil.rmtree(folder)
        ours, hta = summary(runs[0]), summary(runs[1])
        speed = (hta[0] / ours[0], hta[1] / ours[1])
        if name in hta_traces:
            met &= min(speed) >= SPEED_TARGET
        print(
            f"| {name} | {what} | {ours[0]:.2f} / {ours[1]:.2f} | {hta[0]:.2f} / {hta[1]:.2f} "
            f"| {speed[0]:.1f}× / {speed[1]:.1f}× | {ours[2]:.0f} | {hta[2]:.0f} |",
            flush=True,
        )
    print(f"\nafter: {load()}")
    return met


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--hta-python", help="python of a venv with HolisticTraceAnalysis (required)")
    parser.add_argument("--python", default=sys.executable, help="python with perfcheck (default: this one)")
    parser.add_argument(
        "--traces",
        type=Path,
        action="append",
        help="a folder of *.json.gz traces, repeatable (default ../shared/traces /tmp/hta-traces tests/data)",
    )
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument(
        "--collect-hta", type=Path, metavar="HTA_CLONE", help="copy HTA's test traces and stop"
    )
    parser.add_argument(
        "--out", type=Path, default=Path("/tmp/hta-traces"), help="where --collect-hta puts them"
    )
    parser.add_argument(
        "--whole-process",
        action="store_true",
        help="time `perfcheck trace summary` and HTA as whole processes, start-up included",
    )
    parser.add_argument(
        "--bytecode", action="store_true", help="with --whole-process: from compiled bytecode (startup.py)"
    )
    parser.add_argument("--worker", choices=(*TRACE_WORKERS, *DIFF_WORKERS), help=argparse.SUPPRESS)
    parser.add_argument("files", nargs="*", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args.worker, args.files)
        return 0
    if args.collect_hta:
        return collect(args.collect_hta, args.out)
    if not args.hta_python:
        parser.error("--hta-python is required")
    defaults = (REPO.parent / "shared" / "traces", Path("/tmp/hta-traces"), REPO / "tests" / "data")
    folders = args.traces or [p for p in defaults if p.is_dir()]
    traces = _traces(folders)
    if not traces:
        parser.error(f"no .json.gz traces in {', '.join(map(str, folders))}")

    if args.whole_process:
        met = _whole_processes(args, traces)
        verdict = "met on every trace of HTA's" if met else "NOT met on every trace of HTA's (see the table)"
        print(f"target ≥ {SPEED_TARGET:.0f}× faster as whole processes (median and min): {verdict}")
        return 0
    results, met = _speed_table(args, traces)
    _figures_table(results)
    _diff_rows(args, {name: path for name, path, _ in traces})
    verdict = "met on every trace" if met else "NOT met on every trace (see the table)"
    print(f"\ntarget ≥ {SPEED_TARGET:.0f}× faster (median and min) at ≤ 1/3 of HTA's peak RSS: {verdict}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
