"""The per-side sandbox (perfcheck/runner/process/sandbox.py) on a real machine, as whole reviews: whether the
machine can make one, a hostile head's attacks (tests/hostile_head.py) against a review on ``--device``,
and what the sandbox costs a review (the demo, sandboxed and not, each timed).

    python bench/sandbox.py --device cuda --out /tmp/out/sandbox

Prints one JSON document; the reviews' own output is kept under ``--out``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))

from hostile_head import ATTACKS, BASE, HOSTILE, attacks_in  # noqa: E402

CONFIG = "workloads:\n  - {name: net, entry: model.py:build, timeout_s: 600}\n"


def review(args: list[str], out: Path, env: dict[str, str]) -> dict[str, object]:
    start = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "perfcheck", "review", *args, "--out", str(out)],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    (out.parent / f"{out.name}-progress.log").write_text(done.stderr)
    result = out / "result.json"
    findings = []
    if result.exists():
        findings = sorted({f["category"] for f in json.loads(result.read_text())["findings"]})
    return {"exit": done.returncode, "wall_s": round(time.monotonic() - start, 1), "findings": findings}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--no-demo", action="store_true", help="skip the demo's cost comparison")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    env = {k: v for k, v in os.environ.items() if k != "PERFCHECK_COMPILE_CACHE"}
    check = subprocess.run(
        [sys.executable, "-m", "perfcheck.runner.process.sandbox", "--check"],
        capture_output=True,
        text=True,
        check=False,
    )
    report: dict[str, object] = {"check": check.returncode, "check_says": check.stderr.strip()[-500:]}

    trees = args.out / "trees"
    base, head = trees / "base", trees / "head"
    for tree in (base, head):
        tree.mkdir(parents=True, exist_ok=True)
        (tree / "perfcheck.yml").write_text(CONFIG)
    (base / "model.py").write_text(BASE)
    (head / "model.py").write_text(
        HOSTILE.format(base_model=str(base / "model.py"), orchestrator=os.getpid())
    )
    attack = review(
        ["--base", str(base), "--head", str(head), "--device", args.device, "--probes", "compile,export"],
        args.out / "attack",
        env,
    )
    outcomes = attacks_in(args.out / "attack")
    attack["attacks"] = outcomes
    attack["held"] = all(outcomes.get(a, "").startswith("held") for a in ATTACKS)
    attack["base_unchanged"] = (base / "model.py").read_text() == BASE
    report["attack"] = attack

    if not args.no_demo:
        demo = ["--base", "examples/demo/base", "--head", "examples/demo/head", "--device", args.device]
        for mode in ("1", "0", "1", "0"):
            key = f"demo-sandbox-{mode}"
            runs = report.setdefault(key, [])
            assert isinstance(runs, list)
            runs.append(review(demo, args.out / f"{key}-{len(runs)}", {**env, "PERFCHECK_SANDBOX": mode}))
    print(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
