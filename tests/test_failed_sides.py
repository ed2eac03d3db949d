"""A side that did not finish shows its status, never a figure (issue 30, item 5): where torch
rejects the head's code (or a probe crashed, timed out or was skipped), that side's cells and
every Δ of the probe's rows say so, instead of `-100 %` or `-1` computed against a side that
measured nothing. Reproduced from real torch code: a custom op whose fake kernel gives the wrong
shape, which torch.compile and torch.export both raise on; the same review shows that failure
traced to the op (opcheck's finding at its `register_fake`, the compile and export failures
folded under it)."""

from __future__ import annotations

import re
from pathlib import Path

from conftest import ReviewFn, write_tree

from perfcheck.core.probes.kind import Row
from perfcheck.core.render import render_comment, workload_rows
from perfcheck.measures import ProbeStatus
from perfcheck.schema import WorkloadReview

ROWNORM = """\
import torch
from torch import nn


@torch.library.custom_op("perfcheck_failed_sides::rownorm", mutates_args=())
def rownorm(x: torch.Tensor) -> torch.Tensor:
    return x / x.norm(dim=-1, keepdim=True)


@rownorm.register_fake
def _(x):
    {fake}


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(16, 128)
        self.norm = nn.LayerNorm(128)
        self.out = nn.Linear(128, 4)

    def forward(self, x):
        h = self.fc(x)
        h = rownorm(h)
        h = self.norm(h)
        return self.out(h)


def build(device):
    torch.manual_seed(0)
    return Net().to(device), (torch.randn(8, 16).to(device),)
"""

STATUSES: tuple[ProbeStatus, ...] = ("failed", "crashed", "timeout", "skipped")


def table(comment: str) -> list[Row]:
    """The workload table's rows as the comment renders them (markdown escapes undone)."""
    rows = []
    for line in comment.splitlines():
        if line.startswith("| ") and not line.startswith("| | base"):
            cells = [c.strip().replace("\\", "") for c in line.strip().strip("|").split(" | ")]
            rows.append(Row(*cells))
    return rows


def assert_settled(rows: list[Row], side: str, status: str, other: dict[str, str]) -> None:
    """Every row shows ``status`` in ``side``'s cell and the statuses in its Δ, no figure;
    ``other`` gives each row's other side's status by metric ("ok" where it finished)."""
    assert rows
    for row in rows:
        cell = row.head if side == "head" else row.base
        assert cell == status, row
        theirs = other[row.metric]
        pair = (theirs, status) if side == "head" else (status, theirs)
        expected = f"{side} {status}" if theirs == "ok" else status if theirs == status else " / ".join(pair)
        assert row.delta == expected, row
        assert not re.search(r"\d", row.delta), row


def test_a_head_that_torch_compile_rejects_shows_failed_in_every_delta(
    review: ReviewFn, tmp_path: Path
) -> None:
    base = write_tree(
        tmp_path / "base", {"model.py": ROWNORM.replace("{fake}", "return torch.empty_like(x)")}
    )
    # The fake kernel says (N, 1) where the op returns (N, 128): torch.compile and torch.export
    # both raise inside torch at the LayerNorm that follows.
    broken = "return x.new_empty((x.shape[0], 1))"
    head = write_tree(tmp_path / "head", {"model.py": ROWNORM.replace("{fake}", broken)})
    result = review(base, head)  # the default probes (compile, export, timing) and what they call for
    [wl] = result.workloads
    status = {(r.side, r.probe): r.status for r in [*wl.base, *wl.head]}
    assert status["head", "compile"] == status["head", "export"] == "failed"
    assert status["head", "timing"] == "failed" and status["base", "timing"] == "skipped"
    assert status["base", "compile"] == status["base", "export"] == "ok"

    # The failure is traced to its custom op (item 5): opcheck ran because torch rejected a side,
    # and its one finding names the op, the check and the fake kernel's registration; the compile
    # and export failures a line later are folded under it, not counted again.
    [finding] = [f for f in result.findings if f.severity == "error"]
    assert finding.category == "custom_op_check_failed"
    assert finding.evidence["op"] == "perfcheck_failed_sides::rownorm"
    assert finding.evidence["check"] == "test_faketensor"
    assert finding.location is not None and finding.location.path == "model.py"
    assert finding.location.code == "@rownorm.register_fake"
    line = ROWNORM.splitlines().index("        h = self.norm(h)") + 1
    assert f"torch.compile fails at model.py:{line}" in finding.message
    assert f"torch.export fails at model.py:{line}" in finding.message
    assert not [f for f in result.findings if f.category in ("compile_failed", "export_failed")]
    comment = render_comment(result)
    assert "1 regression" in comment and "--probes custom_ops" in comment

    rows = {row.metric: (row.base, row.head, row.delta) for row in table(comment)}
    # The rows the issue saw with a number against the failed head, and the others of its probes.
    assert rows["graphs / breaks"] == ("1 / 0", "failed", "head failed")
    assert rows["recompiles"] == ("1", "failed", "head failed")
    [cold] = [cells for metric, cells in rows.items() if metric.startswith("cold compile")]
    assert cold[0].endswith(" s") and cold[1:] == ("failed", "head failed")
    assert rows["export IR"][0].endswith(" ops)") and rows["export IR"][1:] == ("failed", "head failed")
    assert rows["step time"] == ("skipped", "failed", "skipped / failed")
    for b, h, delta in rows.values():
        if h == "failed" or b == "skipped":
            assert delta in ("head failed", "skipped / failed"), (b, h, delta)
        assert "%" not in delta, (b, h, delta)

    # Whatever a side's status, every row of its probe says it: each side in turn, each status,
    # over the results this review recorded (the metrics they carry stay, the status decides).
    for side in ("head", "base"):
        for new in STATUSES:
            changed = wl.model_copy(
                update={side: [r.model_copy(update={"status": new}) for r in getattr(wl, side)]}
            )
            other = "base" if side == "head" else "head"
            theirs = {r.probe: r.status for r in getattr(changed, other)}
            for r in getattr(changed, side):
                one = changed.model_copy(
                    update={side: [r], other: [x for x in getattr(changed, other) if x.probe == r.probe]}
                )
                probe_rows = workload_rows(one)
                assert_settled(
                    probe_rows, side, new, {row.metric: theirs.get(r.probe, "ok") for row in probe_rows}
                )


def test_every_probe_shows_a_side_that_did_not_finish_in_its_cells_and_deltas() -> None:
    """Each built-in probe's rows, with figures on both sides (DDP's only where it has a variant)
    and then one side's status changed: its cells and every Δ say the status."""
    from perfcheck.core import probes
    from perfcheck.core.probes.ddp import DdpMetrics, DdpVariantMetrics
    from perfcheck.schema import ProbeResult

    ddp = DdpMetrics(backend="gloo", world_size=2, variants=[DdpVariantMetrics(variant="eager", step_ms=1.0)])
    kinds = [k for k in probes.kinds() if k.rows is not None]
    assert {"compile", "export", "timing", "ddp", "fsdp", "amp", "custom_ops"} <= {k.name for k in kinds}
    for kind in kinds:
        metrics = ddp.model_dump(mode="json") if kind.name == "ddp" else {}
        base = ProbeResult(
            probe=kind.name, workload="w", side="base", status="ok", duration_s=1.0, metrics=metrics
        )
        for new in STATUSES:
            head = base.model_copy(update={"side": "head", "status": new})
            rows = workload_rows(WorkloadReview(name="w", base=[base], head=[head]))
            assert_settled(rows, "head", new, {row.metric: "ok" for row in rows})
            base_side = head.model_copy(update={"side": "base"})
            head_side = base.model_copy(update={"side": "head"})
            rows = workload_rows(WorkloadReview(name="w", base=[base_side], head=[head_side]))
            assert_settled(rows, "base", new, {row.metric: "ok" for row in rows})


def test_a_probe_logs_tail_is_read_from_its_end_only(tmp_path: Path) -> None:
    # Issue 45: a 400 MB probe log, read whole for its last lines, took the orchestrator to 1.09 GB.
    from perfcheck.runner.process.probe_process import LOG_TAIL_BYTES, log_tail

    log = tmp_path / "probe.log"
    with log.open("w") as f:
        for i in range(40_000):
            f.write(f"noise line {i} " + "x" * 60 + "\n")
        f.write("RuntimeError: the end\n")
    assert log.stat().st_size > 8 * LOG_TAIL_BYTES
    tail = log_tail(log)
    assert tail.splitlines()[-1] == "RuntimeError: the end" and len(tail.splitlines()) == 12
    assert all(line.startswith(("noise line", "RuntimeError")) for line in tail.splitlines())
