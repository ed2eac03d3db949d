"""Trust figures for the timing gate: noise, false alarms and detection rates, measured.

For each workload and mode, one long-lived worker per side (the gate's own TimingWorker) is set
up once; then paired rounds are recorded for A/A (identical code) and for planted slowdowns of
known size (busy work of 1 %, 2 %, 5 %, 100 % of the settled step time, added to head's steps),
interleaved in chunks so drift spreads over every condition. Afterwards the recorded rounds are
replayed, in independent consecutive stretches, through the gate's own sequential rule
(perfcheck.bot.stats.sequential_decision): each stretch is one trial of the gate.

    python bench/trust.py --device cuda --workloads mlp,resnet50 --modes eager,compiled \\
        --seconds 60 --out trust.json

A trial "alarms" when the gate would report a throughput_regression: the signed-rank test rejects
at alpha = 0.01 with a slowdown estimate, or the whole interval is beyond the budget.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from perfcheck.bot.stats import alarm, is_host_bound, sequential_decision
from perfcheck.config import CompileConfig, TimingConfig, WorkloadConfig
from perfcheck.runner.timing import TimingWorker
from perfcheck.spec import ProbeSpec

# The realistic sizes the issue names: ResNet-50 bf16 training, ViT-B/16 training, the 7B-shaped
# decoder layers in inference, the seed's MLP; tiny ones for a CPU smoke run.
SUITE = {
    "mlp": WorkloadConfig(name="mlp", entry="mlp", train=True),
    "resnet50": WorkloadConfig(name="resnet50", entry="resnet50", train=True, amp="bf16"),
    "vit-b16": WorkloadConfig(name="vit-b16", entry="vit-b16", train=True, amp="bf16"),
    "llama-7b-layers": WorkloadConfig(name="llama-7b-layers", entry="llama-7b-layers", amp="bf16"),
    "mlp-tiny": WorkloadConfig(name="mlp-tiny", entry="mlp-tiny", train=True),
    "resnet-tiny": WorkloadConfig(name="resnet-tiny", entry="resnet-tiny", train=True),
}
GATE = TimingConfig()  # the defaults a user gets
BUDGET_PCT = 2.3


def wilson(k: int, n: int, z: float = 1.96) -> tuple[float, float]:
    if n == 0:
        return (0.0, 1.0)
    p = k / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return (max(0.0, centre - half), min(1.0, centre + half))


@dataclass
class Trials:
    trials: int = 0
    alarms: int = 0
    fails: int = 0
    rounds_used: int = 0
    letters: str = ""  # one per trial: p pass, i inconclusive, F fail


def replay(base: list[float], head: list[float], host_bound: bool = False) -> Trials:
    """Cut the record into consecutive stretches, each as long as the gate asks for, and judge each."""
    out = Trials()
    i = 0
    while True:
        decision = sequential_decision(
            base[i:],
            head[i:],
            BUDGET_PCT,
            GATE.min_rounds,
            GATE.extra_rounds,
            GATE.max_rounds,
            GATE.confidence,
            host_bound,
        )
        if decision is None:
            return out
        out.trials += 1
        out.rounds_used += decision.rounds
        out.fails += decision.verdict == "fail"
        out.letters += {"pass": "p", "inconclusive": "i", "fail": "F"}[decision.verdict]
        out.alarms += alarm(decision.verdict, decision.estimate, GATE.alpha, host_bound)
        i += decision.rounds


def spread(xs: list[float]) -> dict[str, float]:
    """Relative spread of step times: coefficient of variation and (max - min) / median, in %."""
    med = statistics.median(xs)
    return {
        "median_ms": round(med, 4),
        "cv_pct": round(statistics.pstdev(xs) / statistics.mean(xs) * 100, 3),
        "range_pct": round((max(xs) - min(xs)) / med * 100, 3),
    }


def run_one(
    name: str,
    compiled: bool,
    device: str,
    seconds: float,
    conditions: list[float],
    round_ms: float,
    workdir: Path,
    backend: str,
) -> dict[str, Any]:
    timing = GATE.model_copy(update={"compiled": compiled})
    # The built-ins import from perfcheck itself; a scratch folder as the tree keeps any checkout
    # off the workers' sys.path.
    specs = {
        side: ProbeSpec(
            probe="timing",
            side=side,
            tree=str(Path.cwd()),
            device=device,  # type: ignore[arg-type]
            workload=SUITE[name].model_copy(update={"timeout_s": 900}),
            timing=timing,
            compile=CompileConfig(backend=backend),
        )
        for side in ("base", "head")
    }
    started = time.monotonic()
    workers = {side: TimingWorker(spec, sys.executable, workdir) for side, spec in specs.items()}
    try:
        for w in workers.values():
            w.send("setup")
        setups = {side: w.receive(900) for side, w in workers.items()}
        for side, w in workers.items():  # one at a time, as the gate does
            setups[side] |= w.ask("warmup", 900)
        setup_s = time.monotonic() - started
        step_ms = setups["base"]["warmup_block_medians_ms"][-1]
        # The gate's own round length unless asked otherwise (the first H200 runs used --round-ms 20).
        steps = max(1, min(50, round(round_ms / max(step_ms, 1e-3)))) if round_ms else GATE.steps_per_round
        round_s = 2 * steps * step_ms / 1000 + 0.002
        chunk = 6
        per_condition = max(GATE.max_rounds, int(seconds / max(round_s, 1e-4) / len(conditions)))
        per_condition = chunk * math.ceil(per_condition / chunk)
        record: dict[float, dict[str, list[float]]] = {c: {"base": [], "head": []} for c in conditions}
        host: list[float] = []  # host time to issue a step, base side, A/A rounds (GPU only)
        timed_start = time.monotonic()
        for _ in range(per_condition // chunk):
            for c in conditions:  # interleaved, so slow drift touches every condition alike
                workers["head"].ask("plant", 60, pct=c)
                for _ in range(chunk):
                    n = len(record[c]["head"])
                    for side in ("base", "head") if n % 2 == 0 else ("head", "base"):
                        answer = workers[side].ask("round", 900, steps=steps)
                        record[c][side].append(answer["median_ms"])
                        if side == "base" and c == conditions[0] and answer.get("host_median_ms"):
                            host.append(answer["host_median_ms"])
        timed_s = time.monotonic() - timed_start
        finish = {side: w.ask("finish", 60) for side, w in workers.items()}
    finally:
        for w in workers.values():
            w.close()

    trace = setups["base"]["warmup_trace"]
    warm_steps = [t for block in trace for t in block["steps_ms"]]
    aa = record[conditions[0]]
    log_ratios = [math.log(h / b) for b, h in zip(aa["base"], aa["head"], strict=True)]
    result: dict[str, Any] = {
        "workload": name,
        "mode": "compiled" if compiled else "eager",
        "device": device,
        "environment": setups["base"]["environment"],
        "setup_s": round(setup_s, 1),
        "timed_s": round(timed_s, 1),
        "steps_per_round": steps,
        "rounds_per_condition": per_condition,
        "first_step_ms": setups["base"]["first_step_ms"],
        "cold_compile_s": setups["base"]["cold_compile_s"],
        "warmup_steps": setups["base"]["warmup_steps"],
        "warmup_converged": setups["base"]["warmup_converged"],
        "warmup_blocks_compiling": [i for i, b in enumerate(trace) if b["compiled"]],
        # what a naive loop sees: every step after the first (compiling) one, warm-up included
        "naive_after_first_step": spread(warm_steps) if len(warm_steps) > 1 else None,
        "naive_first_20_steps": spread(warm_steps[:20]) if len(warm_steps) >= 20 else None,
        "warmup_trace": trace,
        "after_warmup_rounds_base": spread(aa["base"]),
        "aa_round_log_ratio_sd_pct": round(statistics.pstdev(log_ratios) * 100, 3),
        "aa_host_issue_ms": [round(h, 3) for h in host],
        "peak_memory_mb": finish["base"]["peak_memory_mb"],
        "recompiles_during_timing": finish["base"]["recompiles_during_timing"],
        "conditions": {},
    }
    bound = is_host_bound(host, aa["base"])
    result["host_bound"] = bound
    for c in conditions:
        t = replay(record[c]["base"], record[c]["head"], bound)
        lo, hi = wilson(t.alarms, t.trials)
        result["conditions"][str(c)] = {
            "planted_pct": c,
            "trials": t.trials,
            "alarms": t.alarms,
            "alarm_rate": t.alarms / max(t.trials, 1),
            "alarm_rate_ci95": [round(lo, 3), round(hi, 3)],
            "fails": t.fails,
            "mean_rounds_per_trial": round(t.rounds_used / max(t.trials, 1), 1),
            "rounds": record[c],
        }
    result["wall_s"] = round(time.monotonic() - started, 1)
    return result


def table(results: list[dict[str, Any]]) -> str:
    lines = [
        "| workload | mode | step (ms) | naive spread (range / CV) | after warm-up (CV) | A/A round sd | "
        "A/A alarms | 1 % | 2 % | 5 % | 2× | wall |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        cond = r["conditions"]

        def rate(key: str, cond: dict = cond) -> str:
            c = cond.get(key)
            return f"{c['alarms']}/{c['trials']}" if c else "—"

        naive = r["naive_after_first_step"] or {}
        lines.append(
            f"| {r['workload']} | {r['mode']} | {r['after_warmup_rounds_base']['median_ms']:.3f} | "
            f"{naive.get('range_pct', 0):.1f} % / {naive.get('cv_pct', 0):.1f} % | "
            f"{r['after_warmup_rounds_base']['cv_pct']:.2f} % | {r['aa_round_log_ratio_sd_pct']:.2f} % | "
            + " | ".join(rate(k) for k in ("0.0", "1.0", "2.0", "5.0", "100.0"))
            + f" | {r['wall_s']:.0f} s |"
        )
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    parser.add_argument("--workloads", default="mlp-tiny", help=f"comma-separated, from {', '.join(SUITE)}")
    parser.add_argument("--modes", default="eager,compiled")
    parser.add_argument("--seconds", type=float, default=20, help="timed seconds per workload and mode")
    parser.add_argument(
        "--round-ms",
        type=float,
        default=0,
        help="aim for rounds of about this long (default: the gate's steps)",
    )
    parser.add_argument(
        "--conditions", default="0,1,2,5,100", help="planted slowdowns in %%; the first is A/A"
    )
    parser.add_argument("--backend", default="inductor", help="torch.compile backend for the compiled mode")
    parser.add_argument("--out", type=Path, default=Path("trust.json"))
    args = parser.parse_args()
    conditions = [float(c) for c in args.conditions.split(",")]
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.workloads.split(","):
            for mode in args.modes.split(","):
                print(f"trust: {name} {mode} …", file=sys.stderr, flush=True)
                try:
                    r = run_one(
                        name,
                        mode == "compiled",
                        args.device,
                        args.seconds,
                        conditions,
                        args.round_ms,
                        Path(tmp),
                        args.backend,
                    )
                except Exception as err:  # one failing workload must not lose the others' figures
                    print(f"trust: {name} {mode} failed: {err}", file=sys.stderr, flush=True)
                    continue
                results.append(r)
                args.out.write_text(json.dumps(results, indent=1))
                print(table([r]).splitlines()[-1], file=sys.stderr, flush=True)
    print(table(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
