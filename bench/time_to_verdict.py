"""Time to verdict: whole `perfcheck review` processes as a user runs them, default config, timed.

    python bench/time_to_verdict.py demo [--busy] [--repeat N]       # make demo's review (CPU)
    python bench/time_to_verdict.py aa [--busy] [--repeat N]         # A/A of a small Inductor model (CPU)
    python bench/time_to_verdict.py suite --device cuda [--jobs 4]   # bench/gpu-suite.yml, base = head
    python bench/time_to_verdict.py llama-switch --device cuda       # transformers Llama, sdpa -> eager
    python bench/time_to_verdict.py llama-aa --device cuda           # the same Llama, identical trees

Each run is one process, start-up included, with the default settings but for what the case
names (its workloads). ``--busy`` keeps a process spinning the whole time, as another job on a
shared CI machine would (one core's worth of load). The table gives the wall time, the exit code,
the verdict, and where the time went by the review's own books (result.json ``costs``); ``--out``
keeps every record as JSON (docs/data/time_to_verdict/).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import IO, Any

REPO = Path(__file__).resolve().parent.parent
# ``--budget S``: review.time_budget_s for the cases that write their config (suite, llama-*); by
# default the config says nothing of it, as a user's does.
BUDGET = (os.environ.get("TTV_BUDGET") and f"review: {{time_budget_s: {os.environ['TTV_BUDGET']}}}\n") or ""
DEMO = REPO / "examples" / "demo"


def _llama_trees(root: Path, head_attention: str) -> tuple[Path, Path, Path]:
    """Two copies of bench/models.py as a model repository would hold them; head's attention
    implementation is ``head_attention``."""
    text = (REPO / "bench" / "models.py").read_text()
    base, head = root / "base", root / "head"
    for tree, attention in ((base, "sdpa"), (head, head_attention)):
        tree.mkdir(parents=True)
        (tree / "models.py").write_text(text.replace('ATTENTION = "sdpa"', f'ATTENTION = "{attention}"'))
    config = root / "perfcheck.yml"
    config.write_text(
        "workloads:\n  - {name: llama, entry: models.py:llama, train: true, amp: bf16}\n" + BUDGET
    )
    return base, head, config


def case(name: str, root: Path) -> tuple[list[str], str]:
    """The review's arguments for a case, and what it is."""
    if name == "demo":
        return ["--base", str(DEMO / "base"), "--head", str(DEMO / "head")], "make demo's review (Inductor)"
    if name == "aa":
        base = DEMO / "base"
        return ["--base", str(base), "--head", str(base)], "the demo's base against itself (Inductor, A/A)"
    if name == "suite":
        tree = root / "tree"
        tree.mkdir()
        config = root / "gpu-suite.yml"
        config.write_text((REPO / "bench" / "gpu-suite.yml").read_text() + BUDGET)
        return ["--base", str(tree), "--head", str(tree), "--config", str(config)], "bench/gpu-suite.yml, A/A"
    if name in ("llama-switch", "llama-aa"):
        base, head, config = _llama_trees(root, "eager" if name == "llama-switch" else "sdpa")
        what = "sdpa -> eager" if name == "llama-switch" else "A/A"
        return [
            "--base",
            str(base),
            "--head",
            str(head),
            "--config",
            str(config),
        ], f"transformers Llama, {what}"
    raise SystemExit(f"unknown case {name!r}")


def _stamped(source: IO[bytes] | None, sink: IO[str], start: float) -> None:
    """Copy ``source``'s lines to ``sink``, each after ``+SECONDS`` since ``start``."""
    if source is None:
        return
    for raw in source:
        sink.write(f"+{time.monotonic() - start:.1f} {raw.decode(errors='replace')}")
        sink.flush()


def _spinner() -> subprocess.Popen[bytes]:
    """Another job's load: one process spinning, placed by the scheduler as any job on a shared
    machine is (not pinned: pinned to the core the timing workers share, it would halve their
    time, a neighbour no scheduler would leave there)."""
    return subprocess.Popen([sys.executable, "-c", "while True:\n    pass\n"])


def run_once(
    name: str,
    device: str,
    jobs: int | None,
    busy: bool,
    keep: Path | None = None,
    timeout: float | None = None,
) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="ttv-") as tmp:
        root = Path(tmp)
        args, what = case(name, root)
        out = root / "out"
        command = [sys.executable, "-m", "perfcheck", "review", *args, "--device", device, "--out", str(out)]
        if jobs is not None:
            command += ["--jobs", str(jobs)]
        env = {k: v for k, v in os.environ.items() if k != "PERFCHECK_COMPILE_CACHE"}
        spinner = _spinner() if busy else None
        stamp = time.strftime("%H%M%S")
        # The progress log goes to a file as it is written: a review stopped at ``timeout`` still
        # says where its time went.
        log = (keep or root) / f"{name}-{stamp}-progress.log"
        log.parent.mkdir(parents=True, exist_ok=True)
        start = time.monotonic()
        with log.open("w") as err:
            proc = subprocess.Popen(
                command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env, start_new_session=True
            )
            # Each line as it comes, with the seconds since the review started: when each step
            # ended, which the lines' own durations do not say where steps overlap.
            copier = threading.Thread(target=_stamped, args=(proc.stderr, err, start), daemon=True)
            copier.start()
            try:
                code = proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                # As a job's time limit stops it: SIGTERM, so that the review writes what it
                # measured before (which step held it, in result.json), then whatever is left.
                os.kill(proc.pid, signal.SIGTERM)
                with contextlib.suppress(subprocess.TimeoutExpired):
                    proc.wait(timeout=30)
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
                code = 124
            finally:
                copier.join(timeout=10)
                if spinner is not None:
                    spinner.kill()
                    spinner.wait()
        wall = time.monotonic() - start
        stderr = "\n".join(ln.partition(" ")[2] for ln in log.read_text(errors="replace").splitlines())
        result = json.loads((out / "result.json").read_text()) if (out / "result.json").is_file() else {}
        progress = [ln for ln in stderr.splitlines() if ln.startswith(("[", "plan:"))]
        comment = (out / "comment.md").read_text() if (out / "comment.md").is_file() else ""
        if keep is not None and result:
            shutil.copyfile(out / "result.json", keep / f"{name}-{stamp}-result.json")
        shutil.rmtree(out, ignore_errors=True)
    return {
        "case": name,
        "what": what,
        "device": device,
        "busy": busy,
        "wall_s": round(wall, 1),
        "exit": code,
        "verdict": result.get("verdict"),
        "summary": result.get("summary"),
        "costs": result.get("costs"),
        "progress": progress,
        "table": [ln for ln in comment.splitlines() if ln.startswith("|")],
        "stderr_tail": stderr.splitlines()[-5:],
    }


def _where(record: dict[str, Any]) -> str:
    steps: dict[str, list[float]] = {}
    for shard in record.get("costs") or []:
        for step in shard["steps"]:
            kind = step["step"].rsplit(" · ", 1)[-1]
            if step.get("spent_s") is not None:
                steps.setdefault(kind, []).append(step["spent_s"])
    return ", ".join(f"{k} {sum(v):.0f} s" + (f" ({len(v)})" if len(v) > 1 else "") for k, v in steps.items())


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("case", choices=["demo", "aa", "suite", "llama-switch", "llama-aa"])
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    parser.add_argument("--jobs", type=int, default=None)
    parser.add_argument("--busy", action="store_true", help="one core kept busy by a spinning process")
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--out", type=Path, default=None, help="append the records to this JSON file")
    parser.add_argument("--keep", type=Path, default=None, help="copy each run's result.json and log here")
    parser.add_argument("--timeout", type=float, default=None, help="stop a review after this many seconds")
    args = parser.parse_args()
    records = []
    for i in range(args.repeat):
        record = run_once(args.case, args.device, args.jobs, args.busy, args.keep, args.timeout)
        records.append(record)
        print(
            f"{args.case} run {i + 1}: {record['wall_s']} s, exit {record['exit']}, {record['verdict']} "
            f"({record['summary']}); {_where(record)}",
            flush=True,
        )
    if args.out is not None:
        old = json.loads(args.out.read_text()) if args.out.is_file() else []
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(old + records, indent=1))
    print("\n| case | busy core | wall | exit | verdict | where the time went |")
    print("|---|---|---|---|---|---|")
    for r in records:
        print(
            f"| {r['what']} | {'yes' if r['busy'] else 'no'} | {r['wall_s']:.0f} s | {r['exit']} | "
            f"{r['verdict']} | {_where(r)} |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
