"""What reusing base's structural results saves a review: a default-branch run records base's
(``--record-base``), then cold reviews and reused ones (``--reuse-base``) of the demo alternate,
each a whole ``perfcheck review`` process with the demo's default config, its wall time and its
time line printed, and the ratio reused / cold of the medians at the end. Exit codes and the
findings' categories are checked to agree.

    python bench/reuse.py --pairs 2
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BASE, HEAD = ROOT / "examples" / "demo" / "base", ROOT / "examples" / "demo" / "head"


def parts(out: Path) -> tuple[str, list[tuple[str, str]]]:
    """A review's time line (its comment's "Time:" line) and its findings' categories and severities."""
    comment = (out / "comment.md").read_text()
    line = next((x for x in comment.splitlines() if x.startswith("Time:")), "Time: ?")
    found = json.loads((out / "result.json").read_text())["findings"]
    return line, sorted((f["category"], f["severity"]) for f in found)


def review(out: Path, *extra: str, head: Path = HEAD) -> tuple[float, int]:
    """One whole review process: its wall time and exit code."""
    argv = [sys.executable, "-m", "perfcheck", "review", "--base", str(BASE), "--head", str(head)]
    start = time.monotonic()
    done = subprocess.run([*argv, "--out", str(out), *extra], capture_output=True, text=True, check=False)
    took = time.monotonic() - start
    if done.returncode not in (0, 1, 3):
        sys.exit(f"review failed ({done.returncode}):\n{done.stderr[-3000:]}")
    return took, done.returncode


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=2, help="cold/reused pairs (default %(default)s)")
    args = parser.parse_args()
    os.environ.pop("PERFCHECK_COMPILE_CACHE", None)  # each review's compiles as cold as in CI
    with tempfile.TemporaryDirectory(prefix="perfcheck-bench-reuse-") as tmp:
        store = Path(tmp) / "store"
        took, _ = review(Path(tmp) / "record", "--record-base", str(store), head=BASE)
        print(
            f"record (base vs base, --record-base): {took:.1f} s, {len(list(store.glob('*.json')))} records"
        )
        cold, reused = [], []
        for i in range(args.pairs):
            c, c_rc = review(Path(tmp) / f"cold{i}")
            r, r_rc = review(Path(tmp) / f"reused{i}", "--reuse-base", str(store))
            (c_line, c_found), (r_line, r_found) = (
                parts(Path(tmp) / f"cold{i}"),
                parts(Path(tmp) / f"reused{i}"),
            )
            if c_rc != r_rc or c_found != r_found:
                sys.exit(f"pair {i + 1}: cold exit {c_rc} {c_found}, reused exit {r_rc} {r_found}")
            cold.append(c)
            reused.append(r)
            print(f"pair {i + 1}: cold {c:.1f} s, reused {r:.1f} s (exit {c_rc} both, same findings)")
            print(f"  cold    {c_line}\n  reused  {r_line}")
    c_med, r_med = statistics.median(cold), statistics.median(reused)
    print(f"median cold {c_med:.1f} s, reused {r_med:.1f} s: ratio reused/cold {r_med / c_med:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
