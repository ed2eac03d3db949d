"""The custom_ops probe and custom_op_check_failed: real torch.library ops, real opcheck.

Every tree registers its ops under its own namespace: registrations are process-wide, and the
in-process tests below share the pytest process.
"""

from __future__ import annotations

from pathlib import Path

from conftest import ReviewFn, write_tree

from perfcheck.config import Config, parse_config
from perfcheck.core.probes.custom_ops import CustomOpCheck, CustomOpMetrics, custom_op_findings
from perfcheck.core.render import render_comment
from perfcheck.runner.probes.base import ProbeOutput, Workload
from perfcheck.runner.probes.custom_op_probe import summarize
from perfcheck.runner.probes.lookup import get_probe
from perfcheck.runner.process.loader import load_build
from perfcheck.schema import Finding, ProbeResult
from perfcheck.settings import WorkloadConfig
from perfcheck.spec import ProbeSpec

MODEL = """\
import torch
from torch import nn


@torch.library.custom_op("{ns}::scale_rows", mutates_args=())
def scale_rows(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return x * w


{fake}


@torch.library.custom_op("{ns}::unused", mutates_args=())
def unused(x: torch.Tensor) -> torch.Tensor:
    return x.clone()


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(16, 32)
        self.w = nn.Parameter(torch.ones(32))

    def forward(self, x):
        return scale_rows(torch.relu(self.fc(x)), self.w)


def build(device):
    gen = torch.Generator().manual_seed(0)
    return Net().to(device), (torch.randn(8, 16, generator=gen).to(device),)
"""

RIGHT_FAKE = """\
@scale_rows.register_fake
def _(x, w):
    return torch.empty_like(x)"""

# The PR's bug: the fake kernel forgets the broadcast over w and drops a dimension's size.
WRONG_FAKE = """\
@scale_rows.register_fake
def _(x, w):
    return x.new_empty(x.shape[0], 1)"""

CONFIG = """
workloads:
  - name: net
    entry: model.py:build
compile:
  backend: aot_eager
"""


def tree(root: Path, ns: str, fake: str) -> Path:
    return write_tree(root, {"model.py": MODEL.replace("{ns}", ns).replace("{fake}", fake)})


def test_a_fake_kernel_with_the_wrong_shape_fails_opcheck(review: ReviewFn, tmp_path: Path) -> None:
    # Base and head run in their own processes, so they may share the namespace, as a PR would.
    base = tree(tmp_path / "base", "perfcheck_demo", RIGHT_FAKE)
    head = tree(tmp_path / "head", "perfcheck_demo", WRONG_FAKE)
    result = review(base, head, config=parse_config(CONFIG, "test.yml"), probes=("custom_ops",))
    [finding] = [f for f in result.findings if f.category == "custom_op_check_failed"]
    assert finding.severity == "error"
    assert (finding.evidence["op"], finding.evidence["check"]) == (
        "perfcheck_demo::scale_rows",
        "test_faketensor",
    )
    assert "torch.Size([8, 32])" in finding.evidence["message"]
    assert result.verdict == "fail"
    [base_run] = result.workloads[0].base
    assert base_run.metrics_as(CustomOpMetrics) == CustomOpMetrics(
        ops=[CustomOpCheck(op="perfcheck_demo::scale_rows", ok=True)]
    )
    rendered = render_comment(result)
    assert "Custom op fails opcheck" in rendered
    assert "opcheck's message" in rendered


def run_in_process(root: Path, *, train: bool = False, namespaces: tuple[str, ...] = ()) -> ProbeOutput:
    spec = ProbeSpec(
        probe="custom_ops",
        side="head",
        tree=str(root),
        workload=WorkloadConfig(name="net", entry="model.py:build", train=train),
        settings={"custom_ops": {"namespaces": list(namespaces)}},
    )
    build = load_build(spec.workload.entry, root)

    def built() -> Workload:
        model, inputs = build("cpu")
        return Workload(name="net", model=model, inputs=inputs)

    return get_probe("custom_ops").run(spec, built)  # the run function its descriptor names


def test_a_missing_fake_kernel_and_a_missing_autograd_formula(tmp_path: Path) -> None:
    root = tree(tmp_path / "t", "perfcheck_nofake", "")
    out = run_in_process(root, train=True, namespaces=("perfcheck_nofake",))
    assert out.status == "ok" and isinstance(out.metrics, CustomOpMetrics)
    [check] = out.metrics.ops
    assert (check.op, check.ok, check.failed_check) == (
        "perfcheck_nofake::scale_rows",
        False,
        "test_faketensor",
    )
    assert "no fake impl" in (check.message or "")
    assert "also fails: test_aot_dispatch_dynamic" in (check.message or "")
    # Training cannot backward through an op without register_autograd; opcheck still ran.
    assert "no autograd formula" in out.details["step_error"]
    assert out.details["not_exercised"] == ["perfcheck_nofake::unused"]


def test_inference_does_not_ask_for_a_backward(tmp_path: Path) -> None:
    out = run_in_process(tree(tmp_path / "t", "perfcheck_infer", RIGHT_FAKE))
    assert isinstance(out.metrics, CustomOpMetrics)
    assert out.metrics.ops == [CustomOpCheck(op="perfcheck_infer::scale_rows", ok=True)]


# The comparator and the summary, on hand-made results.


def ops_result(side: str, *checks: CustomOpCheck) -> ProbeResult:
    return ProbeResult(
        probe="custom_ops",
        workload="net",
        side=side,  # type: ignore[arg-type]
        status="ok",
        duration_s=1.0,
        metrics=CustomOpMetrics(ops=list(checks)).model_dump(mode="json"),
    )


OK = CustomOpCheck(op="lib::f", ok=True)
FAKE = CustomOpCheck(op="lib::f", ok=False, failed_check="test_faketensor", message="Shapes differ")
SCHEMA = CustomOpCheck(op="lib::f", ok=False, failed_check="test_schema", message="mutates its input")


def compare(base: list[CustomOpCheck], head: list[CustomOpCheck]) -> list[Finding]:
    return custom_op_findings("net", ops_result("base", *base), ops_result("head", *head), Config())


def test_a_check_that_starts_failing_is_an_error() -> None:
    [f] = compare([OK], [FAKE])
    assert (f.severity, f.evidence["check"], f.evidence["message"]) == (
        "error",
        "test_faketensor",
        "Shapes differ",
    )


def test_a_check_failing_on_both_sides_is_a_warning() -> None:
    [f] = compare([FAKE], [FAKE])
    assert f.severity == "warning" and "still failing" in f.message


def test_a_different_failing_check_is_new() -> None:
    [f] = compare([FAKE], [SCHEMA])
    assert (f.severity, f.evidence["check"]) == ("error", "test_schema")


def test_a_fixed_op_and_a_new_op() -> None:
    assert compare([FAKE], [OK]) == []
    refused = CustomOpCheck(op="lib::g", ok=False, message="opcheck could not run: ValueError: x")
    [f] = compare([], [refused])
    assert (f.severity, f.evidence["check"]) == ("error", "opcheck")


def test_summary_names_the_first_failing_check() -> None:
    err = RuntimeError("fake impl missing")
    check = summarize(
        "lib::f", {"test_schema": "SUCCESS", "test_faketensor": err, "test_aot_dispatch_dynamic": err}
    )
    assert check.failed_check == "test_faketensor"
    assert check.message == "RuntimeError: fake impl missing\n(also fails: test_aot_dispatch_dynamic)"
    assert summarize("lib::f", {"test_schema": "SUCCESS"}) == CustomOpCheck(op="lib::f", ok=True)
