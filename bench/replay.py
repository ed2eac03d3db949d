"""Re-judge recorded trust rounds with the gate's current rule, without a GPU.

    python bench/replay.py docs/data/h200/trust-*.json [--assume-host-bound mlp:compiled,...]

Prints, per workload and mode, the trials of each condition as one letter each: p pass,
i inconclusive, F fail, and the alarm counts the README's figures use. Host-boundness comes
from the record where it was measured (host issue time per round); --assume-host-bound applies
the host-bound rule to records that predate that measurement.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from trust import replay

from perfcheck.bot.stats import is_host_bound


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("records", nargs="+", type=Path)
    parser.add_argument("--assume-host-bound", default="", help="workload:mode pairs, comma-separated")
    args = parser.parse_args()
    assumed = {tuple(x.split(":")) for x in args.assume_host_bound.split(",") if x}
    print("| workload | mode | steps/round | host-bound | A/A | 1 % | 2 % | 5 % | 2× |")
    print("|---|---|---|---|---|---|---|---|---|")
    for path in args.records:
        for r in json.loads(path.read_text()):
            aa = r["conditions"]["0.0"]["rounds"]
            measured = is_host_bound(r.get("aa_host_issue_ms", []), aa["base"])
            bound = measured or (r["workload"], r["mode"]) in assumed
            cells = []
            for key in ("0.0", "1.0", "2.0", "5.0", "100.0"):
                c = r["conditions"].get(key)
                if c is None:
                    cells.append("—")
                    continue
                t = replay(c["rounds"]["base"], c["rounds"]["head"], bound)
                cells.append(f"{t.alarms}/{t.trials} `{t.letters}`")
            how = "measured" if measured else ("assumed" if bound else "no")
            print(
                f"| {r['workload']} | {r['mode']} | {r['steps_per_round']} | {how} | "
                + " | ".join(cells)
                + " |"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
