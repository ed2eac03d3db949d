"""The review's time budget holds (issue 40, item 5): a per-side probe that its budget cannot pay
for is not started, one still running when the budget is spent is stopped there, and both are
said (skipped, with why; the review's cuts), never read as a pass or as a probe that hung."""

from __future__ import annotations

import re
from pathlib import Path

from conftest import MODEL, ReviewFn, fast_config, write_tree

SLOW_BUILD = MODEL.replace(
    "def build(device):\n", "def build(device):\n    import time\n\n    time.sleep(120)\n"
)


def test_a_probe_still_running_when_the_budget_is_spent_is_stopped_and_the_rest_are_not_started(
    review: ReviewFn, tmp_path: Path
) -> None:
    # The compile probe's prior on a CPU is 15 s: base's starts within a 16 s budget, and its
    # workload takes two minutes to build.
    tree = {"model.py": SLOW_BUILD.replace("{change}", "pass")}
    base, head = write_tree(tmp_path / "base", tree), write_tree(tmp_path / "head", tree)
    result = review(base, head, fast_config("review: {time_budget_s: 16}"), probes=("compile",))
    (b,), (h,) = result.workloads[0].base, result.workloads[0].head
    assert b.status == "skipped" and re.match(
        r"stopped after \d+ s, when review.time_budget_s", b.message or ""
    )
    assert b.duration_s < 120  # stopped, not run to its end
    assert h.status == "skipped" and re.match(r"not run: it is expected to take about \d+ s", h.message or "")
    assert result.verdict == "inconclusive" and len(result.inconclusive) == 1
    assert not [f for f in result.findings if f.category in ("probe_timeout", "probe_crashed")]
    (costs,) = result.costs
    assert any("when review.time_budget_s (16 s) was spent" in cut for cut in costs.cuts)
    assert any("not run" in cut for cut in costs.cuts)
