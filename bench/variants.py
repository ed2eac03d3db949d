"""What each probe of a review measured, variant by variant, and whether it ran sandboxed:

    python bench/variants.py OUT    # OUT: a review's output folder (result.json, probes/*.spec.json)

One line per side and probe: its status, whether its spec carried walls (the sandbox), and each
variant that raised with its error, else "every variant ran"; then the verdict and the findings.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def main(argv: list[str]) -> int:
    out = Path(argv[1])
    review = json.loads((out / "result.json").read_text())
    for wl in review["workloads"]:
        for side in ("base", "head"):
            for result in wl[side]:
                spec = out / "probes" / f"{side}-{wl['name']}-{result['probe']}.spec.json"
                walls = json.loads(spec.read_text()).get("walls") is not None if spec.exists() else None
                variants = result.get("metrics", {}).get("variants", [])
                errors = {v["variant"]: (v.get("error") or "")[:300] for v in variants if v.get("error")}
                ran = errors or (f"every variant ran ({', '.join(v['variant'] for v in variants)})")
                print(
                    f"{wl['name']} {side} {result['probe']}: {result['status']} · sandboxed {walls} · {ran}"
                )
    print(f"verdict {review['verdict']}; findings: {[f['category'] for f in review['findings']]}")
    print(f"inconclusive: {review['inconclusive']}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
