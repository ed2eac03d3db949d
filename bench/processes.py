"""Trust figures for the timing gate, where the worker process is the unit: false alarms on
identical code, detection of planted slowdowns, and a real attention switch, on third-party models.

``run`` times pairs of worker processes with the gate's own code (``runner.timing.run_pairs``)
and records every process. In each pair, one after another: identical code (A/A), then the head
planted with a GPU sleep kernel of 1 % and of 2 % of its device time, then host busy work of a
share of its host issue time; both sides launch the (empty) sleep kernel throughout, so only time
tells them apart. ``report`` replays the recorded processes through the gate's own sequential rule
(``bot.timing_gate.sequential``, the defaults a user gets): consecutive pairs form one trial, as
many pairs as the rule asks for, and the next trial starts after them.

    python bench/processes.py run --device cuda --models llama --pairs 30 --out trust.json
    python bench/processes.py run --device cuda --models llama --switch 6 --out switch.json
    python bench/processes.py report trust.json switch.json
"""

from __future__ import annotations

import argparse
import json
import math
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from perfcheck.core.stats import ProcessEstimate, process_ratio
from perfcheck.core.timing_gate import decide, metric, sequential
from perfcheck.measures import MetricChange, Plant, TimingChange, TimingProcess
from perfcheck.runner.process.sides import pair_caches, side_caches
from perfcheck.runner.review_run import SideSetup
from perfcheck.runner.timing.pairs import SIDES, Condition, run_pairs, shared_cpu
from perfcheck.runner.timing.worker_process import SideRecord
from perfcheck.settings import BudgetsConfig, CompileConfig, TimingConfig, WorkloadConfig
from perfcheck.spec import ProbeSpec

HERE = Path(__file__).resolve().parent
GATE = TimingConfig()  # the defaults a user gets
BUDGETS = BudgetsConfig()
# bf16 training steps, as a model repository's PR check would time them.
MODELS = {
    name: WorkloadConfig(name=name, entry=f"models.py:{name}", train=True, amp="bf16", timeout_s=900)
    for name in ("llama", "llama_tiny", "vit", "resnet")
}
PLANT_ROUNDS = 6  # wall-clock rounds under a plant: the plants are judged on device and host time


def _tree(root: Path, attention: str = "sdpa") -> Path:
    root.mkdir(parents=True, exist_ok=True)
    text = (HERE / "models.py").read_text().replace('ATTENTION = "sdpa"', f'ATTENTION = "{attention}"')
    (root / "models.py").write_text(text)
    return root


def _conditions(host_pct: float) -> list[tuple[str, Condition]]:
    return [
        ("A/A", Condition(Plant())),
        ("device +1 %", Condition(Plant(device_pct=1.0), rounds=PLANT_ROUNDS)),
        ("device +2 %", Condition(Plant(device_pct=2.0), rounds=PLANT_ROUNDS)),
        (f"host +{host_pct:g} %", Condition(Plant(host_pct=host_pct), rounds=PLANT_ROUNDS)),
    ]


def _record(pair: dict[str, SideRecord], conditions: int) -> dict[str, Any]:
    out: dict[str, Any] = {"conditions": []}
    for c in range(conditions):
        entry: dict[str, Any] = {}
        for side in SIDES:
            r = pair[side]
            m = r.conditions[c]
            entry[side] = r.process(c).model_dump()
            entry[f"{side}_extra"] = {"device_pass_s": (m.device or {}).get("pass_s")}
        out["conditions"].append(entry)
    out["ready_s"] = {side: round(pair[side].ready_s, 2) for side in SIDES}
    out["environment"] = pair["base"].setup.get("environment")
    out["first_step_s"] = {side: pair[side].setup.get("first_step_s") for side in SIDES}
    return out


def autotune_choices(work: Path, model: str) -> dict[str, int]:
    """How the two sides' cold compiles of identical code chose: the autotuned kernels (a
    ``.best_config`` beside the kernel in Inductor's cache) each side has, and how many of those
    both have with a different choice. The timing pairs after the first share one merged cache."""
    own = side_caches(work, model)
    found = {
        side: {
            p.relative_to(own[side]): p.read_text(errors="replace") for p in own[side].rglob("*.best_config")
        }
        for side in SIDES
    }
    both = found["base"].keys() & found["head"].keys()
    return {
        "base": len(found["base"]),
        "head": len(found["head"]),
        "both": len(both),
        "different": sum(_config(found["base"][k]) != _config(found["head"][k]) for k in both),
    }


def _config(text: str) -> Any:
    """A best_config's choice, without the fields that name when or where it was found."""
    try:
        data = json.loads(text)
    except ValueError:
        return text
    return {
        k: v for k, v in data.items() if k not in ("time_taken_ms", "triton_cache_hash", "found_by_coordesc")
    }


def run(args: argparse.Namespace) -> int:
    results: list[dict[str, Any]] = []
    cpu = shared_cpu()
    for name in args.models:
        with tempfile.TemporaryDirectory(prefix="perfcheck-trust-") as tmp:
            root = Path(tmp)
            base_tree = _tree(root / "base")
            head_tree = _tree(root / "head", "eager") if args.switch else base_tree
            armed = None if args.switch else Plant()
            timing = GATE.model_copy(update={"compiled": True})
            specs = {
                side: ProbeSpec(
                    probe="timing",
                    side=side,  # type: ignore[arg-type]
                    tree=str(base_tree if side == "base" else head_tree),
                    device=args.device,
                    workload=MODELS[name],
                    compile=CompileConfig(backend=args.backend),
                    timing=timing,
                    plant=armed,
                )
                for side in SIDES
            }
            sides = {side: SideSetup(side, Path(specs[side].tree), sys.executable) for side in SIDES}  # type: ignore[arg-type]
            work = root / "work"
            work.mkdir()
            named = [("A/B", Condition())] if args.switch else _conditions(args.host_pct)
            conditions = [c for _, c in named]
            record: dict[str, Any] = {
                "model": name,
                "kind": "switch" if args.switch else "plants",
                "device": args.device,
                "conditions": [label for label, _ in named],
                "pairs": [],
            }
            results.append(record)
            started = time.monotonic()
            total = args.switch or args.pairs
            done = 0
            try:
                while done < total and time.monotonic() - started < args.seconds:
                    batch = [done] if done == 0 else list(range(done, min(total, done + args.batch)))
                    t0 = time.monotonic()
                    caches = pair_caches(work, name, first=done == 0)
                    for pair in run_pairs(specs, sides, work, batch, cpu, caches, conditions):
                        record["pairs"].append(_record(pair, len(conditions)))
                    if done == 0:
                        record["autotune_choices"] = autotune_choices(work, name)
                    done += len(batch)
                    record["wall_s"] = round(time.monotonic() - started, 1)
                    print(
                        f"processes: {name} pairs {done}/{total} ({time.monotonic() - t0:.0f} s for "
                        f"{len(batch)})",
                        file=sys.stderr,
                        flush=True,
                    )
                    args.out.write_text(json.dumps(results, indent=1))
            except Exception as err:  # one failing model must not lose the others' figures
                record["error"] = str(err)[:4000]
                print(f"processes: {name} failed: {str(err)[:2000]}", file=sys.stderr, flush=True)
            args.out.write_text(json.dumps(results, indent=1))
            shutil.rmtree(work, ignore_errors=True)
    print(report(results))
    return 0


# ---------------------------------------------------------------- the replay


@dataclass
class Trials:
    letters: str = ""  # one per trial: p pass, i inconclusive, F fail
    alarms: int = 0
    pairs_used: int = 0


def _processes(run: dict[str, Any], condition: int, side: str) -> list[TimingProcess]:
    return [TimingProcess.model_validate(p["conditions"][condition][side]) for p in run["pairs"]]


def _alarm(change: TimingChange, metric_name: str | None) -> bool:
    """What the gate would report: a fail, a significant slowdown within budget, or more kernels."""
    names = [metric_name] if metric_name else [m.metric for m in change.metrics if m.decides]
    for name in names:
        m = metric(change, name)
        if m is not None and (m.verdict == "fail" or (m.p_value < GATE.alpha and m.ratio > 1.0)):
            return True
    if metric_name is None and change.kernels and change.kernels_exact:
        return change.kernels[1] > change.kernels[0]
    return False


def trials(base: list[TimingProcess], head: list[TimingProcess], metric_name: str | None) -> Trials:
    out = Trials()
    i = 0
    while i < len(base):
        for n in range(1, len(base) - i + 1):
            decided = sequential(base[i : i + n], head[i : i + n], BUDGETS, GATE)
            if decided is not None:
                break
        else:
            return out  # the record ran out before the rule decided
        out.letters += {"pass": "p", "inconclusive": "i", "fail": "F"}[decided.verdict]
        out.alarms += _alarm(decided, metric_name)
        out.pairs_used += n
        i += n
    return out


def _sd_pct(xs: list[float]) -> float:
    logs = [math.log(x) for x in xs]
    return statistics.stdev(logs) * 100 if len(logs) > 1 else 0.0


def _pct(m: MetricChange | ProcessEstimate) -> str:
    return f"{m.change_pct:+.2f} % ({m.low_pct:+.2f} … {m.high_pct:+.2f})"


def _figures(m: MetricChange | None) -> str:
    return f"{m.base:.3f} → {m.head:.3f} ms, {_pct(m)}" if m else "—"


FIGURES: dict[str, Callable[[TimingProcess], float | None]] = {
    "step_ms": lambda p: p.step_ms,
    "device_ms": lambda p: p.device.busy_ms if p.device else None,
    "host_ms": lambda p: p.host_ms,
}


def _model_row(
    r: dict[str, Any], base: list[TimingProcess], head: list[TimingProcess], totals: list[Trials]
) -> str:
    """One run's row; its trials added into ``totals`` (one Trials per condition, the model's)."""
    change = decide(base, head, BUDGETS, GATE)
    every = base + head
    spread = {name: [v for p in every if (v := get(p)) is not None] for name, get in FIGURES.items()}
    kernels = sorted({p.device.kernels for p in every if p.device})
    cells = []
    for c, label in enumerate(r["conditions"]):
        target = None if c == 0 else ("host_ms" if label.startswith("host") else "device_ms")
        t = trials(_processes(r, c, "base"), _processes(r, c, "head"), target)
        cells.append(f"{t.alarms}/{len(t.letters)} `{t.letters}`")
        if len(totals) <= c:
            totals.append(Trials())
        totals[c].letters += t.letters
        totals[c].alarms += t.alarms
        totals[c].pairs_used += t.pairs_used
    busy = f" ({change.gpu_busy_pct:.0f} %)" if change.gpu_busy_pct is not None else ""
    medians = [f"{statistics.median(v):.3f} ms" if v else "—" for v in spread.values()]
    sds = " / ".join(f"{_sd_pct(v):.2f}" for v in spread.values())
    return (
        f"| {r['model']} | {change.bound}{busy} | {' | '.join(medians)} | "
        f"{', '.join(f'{k:g}' for k in kernels) or '—'} | {sds} % | {' | '.join(cells)} |"
    )


def _cost_row(r: dict[str, Any], every: list[TimingProcess]) -> str:
    ready = [x for p in r["pairs"][1:] for x in p["ready_s"].values()]  # past the cold first pair
    passes = [
        x
        for p in r["pairs"]
        for c in p["conditions"]
        for side in SIDES
        if (x := c[f"{side}_extra"]["device_pass_s"]) is not None
    ]
    overhead = [p.device.profiled_step_ms / p.median_step_ms - 1 for p in every if p.device]
    return (
        f"| {r['model']} | {len(r['pairs'])} | {r['pairs'][0]['first_step_s']['base']:.1f} | "
        f"{statistics.median(ready):.1f} | "
        + (f"{statistics.median(passes):.2f}" if passes else "—")
        + " | "
        + (f"{statistics.median(overhead) * 100:+.1f} %" if overhead else "—")
        + f" | {r.get('wall_s', 0):.0f} s |"
    )


def _bias_rows(r: dict[str, Any], base: list[TimingProcess], head: list[TimingProcess]) -> list[str]:
    """Does head read slower than base over every A/A pair, or the side that went first?"""
    rows = []
    for name, get in FIGURES.items():
        pairs = [(get(b), get(h), b.first) for b, h in zip(base, head, strict=True)]
        if any(b is None or h is None for b, h, _ in pairs):
            continue
        sides = process_ratio([b for b, _, _ in pairs], [h for _, h, _ in pairs])  # type: ignore[misc]
        order = process_ratio([b if f else h for b, h, f in pairs], [h if f else b for b, h, f in pairs])  # type: ignore[misc]
        rows.append(f"| {r['model']} | {name} | {len(pairs)} | {_pct(sides)} | {_pct(order)} |")
    return rows


def report(results: list[dict[str, Any]]) -> str:
    models = [
        "| model | bound (GPU busy) | step | device time | host issue | kernels / step | "
        "sd between processes: step / device / host | A/A | device +1 % | device +2 % | host plant |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    costs = [
        "| model | pairs | cold first step (s) | ready, warm (s per process) | device pass (s) | "
        "profiler on the step | wall |",
        "|---|---|---|---|---|---|---|",
    ]
    bias = ["| model | metric | pairs | head vs base | second vs first |", "|---|---|---|---|---|"]
    switches = [
        "| model | pairs | verdict | device time | step time | kernels / step | trials |",
        "|---|---|---|---|---|---|---|",
    ]
    totals: dict[str, list[Trials]] = {}
    for r in results:
        if len(r.get("pairs", [])) < 2:
            continue
        base, head = _processes(r, 0, "base"), _processes(r, 0, "head")
        if r["kind"] == "switch":
            change = decide(base, head, BUDGETS, GATE)
            kernels = f"{change.kernels[0]:g} → {change.kernels[1]:g}" if change.kernels else "—"
            letters = trials(base, head, "device_ms").letters
            device, step = _figures(metric(change, "device_ms")), _figures(metric(change, "step_ms"))
            switches.append(
                f"| {r['model']} | {len(r['pairs'])} | {change.verdict} | {device} | {step} | {kernels} "
                f"| `{letters}` |"
            )
            continue
        models.append(_model_row(r, base, head, totals.setdefault(r["model"], [])))
        costs.append(_cost_row(r, base + head))
        bias += _bias_rows(r, base, head)
    choices = [
        f"- {r['model']}: base {c['base']}, head {c['head']} autotuned kernels; of the {c['both']} both "
        f"have, {c['different']} chose a different config"
        for r in results
        if (c := r.get("autotune_choices"))
    ]
    out = ["Trials replayed through the gate's rule (alarms / trials, one letter a trial):", "", *models]
    out += [
        "",
        "Every run's trials together (alarms / trials; A/A: passes / inconclusive / fails):",
        "",
        "| model | A/A | device +1 % | device +2 % | host plant |",
        "|---|---|---|---|---|",
        *(
            f"| {model} | {t[0].letters.count('p')} / {t[0].letters.count('i')} / {t[0].letters.count('F')}"
            f" ({t[0].alarms} alarms) | " + " | ".join(f"{x.alarms}/{len(x.letters)}" for x in t[1:]) + " |"
            for model, t in totals.items()
            if t
        ),
    ]
    if choices:
        out += ["", "Autotuning of the cold first pair (later pairs share one merged cache):", "", *choices]
    out += ["", "Cost:", "", *costs, "", "Side and order bias over all A/A pairs:", "", *bias]
    if len(switches) > 2:
        out += ["", "A real change (head switches attention to eager):", "", *switches]
    return "\n".join(out)


def _models(value: str) -> tuple[str, ...]:
    names = tuple(n.strip() for n in value.split(",") if n.strip())
    unknown = [n for n in names if n not in MODELS]
    if unknown or not names:
        raise argparse.ArgumentTypeError(
            f"unknown model(s) {', '.join(unknown) or value!r}; known: {', '.join(MODELS)}"
        )
    return names


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run", help="time pairs of worker processes and record every process")
    r.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    r.add_argument(
        "--models", type=_models, default=("llama_tiny",), help=f"comma-separated, from {', '.join(MODELS)}"
    )
    r.add_argument("--pairs", type=int, default=30, help="process pairs per model")
    r.add_argument("--batch", type=int, default=6, help="pairs set up at once (after the first)")
    r.add_argument(
        "--switch", type=int, default=0, help="instead: this many pairs of sdpa (base) vs eager (head)"
    )
    r.add_argument("--host-pct", type=float, default=25.0, help="the host plant, in %% of host issue time")
    r.add_argument("--seconds", type=float, default=480, help="stop starting new pairs of a model after this")
    r.add_argument("--backend", default="inductor")
    r.add_argument("--out", type=Path, default=Path("trust.json"))
    rep = sub.add_parser("report", help="replay recorded processes through the gate's rule")
    rep.add_argument("records", nargs="+", type=Path)
    rep.add_argument(
        "--warm",
        action="store_true",
        help="set each run's first pair aside: its caches were cold and each side autotuned on its "
        "own, which a default review's timing pairs do not meet (its compile probe filled both "
        "caches, merged before the first pair)",
    )
    args = parser.parse_args()
    if args.cmd == "run":
        return run(args)
    results = [r for path in args.records for r in json.loads(path.read_text())]
    if args.warm:
        results = [{**r, "pairs": r.get("pairs", [])[1:]} for r in results]
    print(report(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
