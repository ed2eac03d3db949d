"""The comparison rules, over hand-made probe results: pure functions, no torch."""

from __future__ import annotations

from perfcheck.config import Config, parse_config
from perfcheck.core.compare import compare
from perfcheck.core.probes.compile_recompiles import normalize_guard
from perfcheck.core.probes.export import ExportMetrics
from perfcheck.measures import CompileMetrics, GraphBreak, Recompile, SourceLocation
from perfcheck.schema import ProbeResult, WorkloadReview


def compile_result(
    side: str,
    breaks: list[GraphBreak] = (),
    recompiles: list[Recompile] = (),  # type: ignore[assignment]
    status: str = "ok",
) -> ProbeResult:
    metrics = CompileMetrics(
        backend="eager",
        graph_count=len(breaks) + 1,
        graph_break_count=len(breaks),
        graph_breaks=list(breaks),
        recompile_count=len(recompiles),
        recompiles=list(recompiles),
        cold_compile_s=1.0,
    )
    return ProbeResult(
        probe="compile",
        workload="w",
        side=side,
        status=status,
        duration_s=1.0,  # type: ignore[arg-type]
        metrics=metrics.model_dump(mode="json") if status == "ok" else {},
        message=None if status == "ok" else "boom",
    )


def brk(line: int, code: str = "x.item()", kind: str = "Unsupported Tensor.item() call") -> GraphBreak:
    return GraphBreak(
        break_type=kind, reason=kind, location=SourceLocation(path="m.py", line=line, code=code)
    )


def review(base: ProbeResult, head: ProbeResult, config: Config | None = None):
    return compare([WorkloadReview(name="w", base=[base], head=[head])], config or Config())


def test_identical_results_pass_with_no_findings() -> None:
    result = review(compile_result("base", [brk(3)]), compile_result("head", [brk(3)]))
    assert result.findings == [] and result.verdict == "pass"


def test_a_break_that_moved_lines_is_the_same_break() -> None:
    result = review(compile_result("base", [brk(3)]), compile_result("head", [brk(9)]))
    assert result.findings == []


def test_a_second_break_of_the_same_kind_elsewhere_is_new() -> None:
    result = review(compile_result("base", [brk(3)]), compile_result("head", [brk(3), brk(9, "y.item()")]))
    [f] = result.findings
    assert f.category == "graph_break_added" and f.location is not None and f.location.line == 9
    assert result.verdict == "fail"


def test_the_budget_turns_new_breaks_into_warnings() -> None:
    config = parse_config("budgets: {max_new_graph_breaks: 2}", "c.yml")
    result = review(compile_result("base"), compile_result("head", [brk(3), brk(4, "z.item()")]), config)
    assert {f.severity for f in result.findings} == {"warning"} and result.verdict == "pass"
    config = parse_config("budgets: {max_new_graph_breaks: 1}", "c.yml")
    result = review(compile_result("base"), compile_result("head", [brk(3), brk(4, "z.item()")]), config)
    assert {f.severity for f in result.findings} == {"error"}


def test_removed_breaks_are_good_news() -> None:
    result = review(compile_result("base", [brk(3)]), compile_result("head"))
    [f] = result.findings
    assert (f.category, f.severity, result.verdict) == ("graph_break_removed", "info", "pass")


def test_recompile_reasons_compare_by_cause_not_by_value() -> None:
    size = "tensor 'x' size mismatch at index 0. expected 32, actual 16"
    resumed = Recompile(
        function="torch_dynamo_resume_in_forward_at_17",
        reason="tensor 'h' size mismatch at index 0. expected 32, actual 16",
    )
    result = review(
        compile_result("base", recompiles=[Recompile(function="forward", reason=size)]),
        compile_result("head", recompiles=[Recompile(function="forward", reason=size), resumed]),
    )
    assert result.findings == []
    counter = Recompile(function="forward", reason="self.calls == 1  # self.calls += 1  # m.py:9 in forward")
    result = review(compile_result("base"), compile_result("head", recompiles=[counter]))
    [f] = result.findings
    assert f.category == "recompile" and "self.calls" in f.message


def test_guards_from_different_trees_and_lines_are_the_same_cause() -> None:
    guard = (
        "___stack2 == {v}  # print('scale', h.item())  # tmp/{tree}/model.py:{n} in resume_in_forward_at_{n}"
    )
    base = guard.format(v=1.58, tree="base", n=14)
    head = guard.format(v=1.61, tree="head", n=15)
    assert normalize_guard(base) == normalize_guard(head)


def test_normalize_guard_blanks_values() -> None:
    assert (
        normalize_guard("tensor 'x' size mismatch at index 0. expected 32, actual 16")
        == "tensor '…' size mismatch at index N. expected N, actual N"
    )


def test_head_crash_fails_and_base_crash_is_inconclusive() -> None:
    result = review(compile_result("base"), compile_result("head", status="crashed"))
    assert [(f.category, f.severity) for f in result.findings] == [("probe_crashed", "error")]
    assert result.verdict == "fail"
    result = review(compile_result("base", status="timeout"), compile_result("head"))
    assert [(f.category, f.severity) for f in result.findings] == [("probe_timeout", "warning")]
    assert result.verdict == "inconclusive"
    result = review(compile_result("base", status="crashed"), compile_result("head", status="crashed"))
    assert [(f.category, f.severity) for f in result.findings] == [("probe_crashed", "warning")]
    assert result.verdict == "inconclusive"  # nothing was compared, so nothing may pass


def export_result(
    side: str,
    text: str | None,
    ops: dict[str, int],
    denied: list[str] = (),  # type: ignore[assignment]
    error: str | None = None,
) -> ProbeResult:
    metrics = ExportMetrics(
        graph_sha256=None if text is None else str(hash(text)),
        graph_text=text,
        op_counts=ops,
        denied_ops=list(denied),
        error_type=error,
    )
    return ProbeResult(
        probe="export",
        workload="w",
        side=side,
        status="failed" if error else "ok",  # type: ignore[arg-type]
        duration_s=1.0,
        metrics=metrics.model_dump(mode="json"),
    )


def test_ir_change_carries_the_op_diff_and_a_unified_diff() -> None:
    base = export_result("base", "a\nrelu\nb\n", {"aten.relu.default": 1})
    head = export_result("head", "a\ngelu\nb\n", {"aten.gelu.default": 1})
    [f] = review(base, head).findings
    assert f.category == "export_ir_changed"
    assert f.evidence["op_diff"] == {"aten.gelu.default": [0, 1], "aten.relu.default": [1, 0]}
    assert "-relu" in f.evidence["diff"] and "+gelu" in f.evidence["diff"]


def test_denied_ops_already_on_base_only_warn() -> None:
    base = export_result("base", "g", {"aten.x.default": 1}, denied=["aten.x.default"])
    head = export_result("head", "g", {"aten.x.default": 1}, denied=["aten.x.default"])
    [f] = review(base, head).findings
    assert (f.category, f.severity) == ("export_op_denied", "warning")


def test_export_failing_on_both_sides_is_a_warning_on_head_only_an_error() -> None:
    ok = export_result("base", "g", {})
    fails = export_result("head", None, {}, error="UserError")
    assert [(f.category, f.severity) for f in review(ok, fails).findings] == [("export_failed", "error")]
    base_fails = export_result("base", None, {}, error="UserError")
    assert [(f.category, f.severity) for f in review(base_fails, fails).findings] == [
        ("export_failed", "warning")
    ]


def timing_result(
    side: str,
    steps: list[float],
    gpu: str | None = None,
    mem: float = 100.0,
    device: list[float] | None = None,
    kernels: float = 100,
) -> ProbeResult:
    """One side's timing probe: one process per figure in ``steps`` (device time only on a GPU)."""
    from perfcheck.measures import DeviceStep, Environment, TimingMetrics, TimingProcess

    processes = [
        TimingProcess(
            step_ms=s,
            median_step_ms=s,
            steps=100,
            host_ms=s * 0.5 if device else None,
            device=DeviceStep(steps=10, busy_ms=d, kernel_ms=d, kernels=kernels, profiled_step_ms=s)
            if device
            else None,
            peak_memory_mb=mem,
            first=i % 2 == 0,
            ready_s=2.0,
            warmup_steps=20,
            warmup_converged=True,
        )
        for i, (s, d) in enumerate(zip(steps, device or steps, strict=True))
    ]
    metrics = TimingMetrics(
        mode="compiled",
        backend="inductor",
        batch_size=8,
        steps_per_round=10,
        memory_kind="cuda_max_allocated" if gpu else "peak_rss",
        processes=processes,
    )
    env = Environment(python="3.12", torch="2.11", gpu_name=gpu, gpu_count=1 if gpu else 0)
    return ProbeResult(
        probe="timing",
        workload="w",
        side=side,
        status="ok",
        duration_s=1.0,  # type: ignore[arg-type]
        metrics=metrics.model_dump(mode="json"),
        environment=env,
    )


def test_timings_on_different_hardware_are_not_compared() -> None:
    result = review(
        timing_result("base", [1.0] * 3, gpu="NVIDIA H200", device=[1.0] * 3),
        timing_result("head", [3.0] * 3, gpu="NVIDIA A100", device=[3.0] * 3),
    )
    [f] = result.findings
    assert (f.category, f.severity) == ("environment_mismatch", "warning")
    assert f.evidence["differences"] == {"gpu_name": ["NVIDIA H200", "NVIDIA A100"]}
    assert result.verdict == "inconclusive"


def test_a_clear_slowdown_fails_with_its_interval_and_figures_that_agree() -> None:
    base = [10.0, 10.1, 9.9]
    result = review(timing_result("base", base), timing_result("head", [b * 1.15 for b in base]))
    [f] = result.findings
    assert (f.category, f.severity) == ("throughput_regression", "error")
    assert "+15.0 %" in f.message and "95% CI" in f.message and "3 process pairs" in f.message
    change = result.timing_changes["w"]
    assert change.verdict == "fail" and change.bound == "cpu"
    [step] = change.metrics
    assert step.head / step.base == step.ratio or abs(step.head / step.base - step.ratio) < 1e-12


def test_one_biased_process_pair_cannot_fail_a_check() -> None:
    base = [10.0, 10.0, 10.0]
    # one pair of processes reads head 15 % slow; the two fresh pairs find them equal
    result = review(timing_result("base", base), timing_result("head", [11.5, 10.0, 10.0]))
    assert result.verdict == "inconclusive"
    assert any("straddles" in why and "3 process pairs" in why for why in result.inconclusive)


def test_a_significant_slowdown_within_budget_warns() -> None:
    base = [10.0, 10.05, 9.95, 10.02]
    result = review(timing_result("base", base), timing_result("head", [b * 1.01 for b in base]))
    [f] = result.findings
    assert (f.category, f.severity) == ("throughput_regression", "warning")
    assert result.verdict == "pass"


def test_memory_growth_over_budget() -> None:
    same = [1.0] * 3
    result = review(timing_result("base", same, mem=1000), timing_result("head", same, mem=1200))
    [f] = result.findings
    assert f.category == "memory_regression" and "+200 MB" in f.message


def test_on_a_gpu_device_time_decides_and_a_host_bound_wall_clock_is_context() -> None:
    gpu = "NVIDIA H200"
    # Host-bound: the GPU is busy 5 of 8 ms; the wall clock wanders +-25 % per process.
    base = timing_result("base", [8.0, 10.0, 6.0], gpu=gpu, device=[5.02, 5.03, 5.025], kernels=256)
    head = timing_result("head", [10.0, 6.0, 8.0], gpu=gpu, device=[6.56, 6.575, 6.57], kernels=295)
    result = review(base, head)
    by = {f.category: f for f in result.findings}
    assert set(by) == {"throughput_regression", "host_overhead_regression"}
    assert by["throughput_regression"].evidence["metric"] == "device_ms"
    assert "device time 5.025 → 6.568 ms" in by["throughput_regression"].message
    assert "(context)" in by["throughput_regression"].message
    assert "256 → 295" in by["host_overhead_regression"].message
    assert by["host_overhead_regression"].severity == "error"
    assert result.timing_changes["w"].bound == "host"


def test_compile_latency_budget() -> None:
    config = parse_config("budgets: {compile_latency_s: {w: 1.5}}", "c.yml")
    head = compile_result("head")
    slow = head.with_metrics(head.metrics_as(CompileMetrics).model_copy(update={"cold_compile_s": 2.0}))
    [f] = review(compile_result("base"), slow, config).findings
    assert f.category == "compile_latency_regression" and "1.5 s budget" in f.message


def test_a_break_taken_only_recompiling_the_code_after_a_new_break_is_folded_under_it() -> None:
    """Head adds a print at line 18; Dynamo, recompiling the code after it for a value that crossed
    it, breaks at line 19 too. One break, the print's, with line 19 under it and out of the budget's
    count; a new break of its own (line 30) stays a finding beside it."""
    after = SourceLocation(path="m.py", line=18, code='print("hi")')
    printed = brk(18, 'print("hi")', "Failed to trace builtin operator")
    follows = GraphBreak(
        break_type="BUILD_STRING type error",
        reason="BUILD_STRING type error",
        location=SourceLocation(path="m.py", line=19, code='x = getattr(self, f"b{i}")(x)'),
        fell_back=True,
        recompiling_after=after,
    )
    config = parse_config("budgets: {max_new_graph_breaks: 1}", "c.yml")
    result = review(compile_result("base"), compile_result("head", [printed, follows]), config)
    [f] = result.findings
    assert f.location == printed.location and f.severity == "warning"  # one new break: in the budget
    assert f.message.endswith("(and 1 break that follows from it, not counted)")
    assert f.evidence["fallout_breaks"].startswith("m.py:19: BUILD_STRING type error")
    own = brk(30, "y.item()")
    result = review(compile_result("base"), compile_result("head", [printed, follows, own]), config)
    lines = [(g.location.line, g.severity) for g in result.findings if g.location]
    assert lines == [(18, "error"), (30, "error")]


def test_a_break_or_recompile_in_a_sibling_that_reads_alike_is_another_one() -> None:
    """Two sibling classes whose forward bodies read alike: what base has in one and head in the
    other is not the same break or recompile; the function's qualified name tells them apart."""

    def at(function: str) -> SourceLocation:
        return SourceLocation(path="m.py", line=12, function=function, code="print(x)")

    def printed(function: str) -> GraphBreak:
        return GraphBreak(break_type="print", reason="print", location=at(function))

    moved = review(
        compile_result("base", [printed("Spare.forward")]), compile_result("head", [printed("Used.forward")])
    )
    assert sorted(f.category for f in moved.findings) == ["graph_break_added", "graph_break_removed"]
    guard = "self.calls == 0  # self.calls += 1  # m.py:12 in forward"
    spare = Recompile(function="forward", reason=guard, location=at("Spare.forward"))
    used = Recompile(function="forward", reason=guard, location=at("Used.forward"))
    result = review(compile_result("base", recompiles=[spare]), compile_result("head", recompiles=[used]))
    [r] = result.findings
    assert r.category == "recompile" and "`Used.forward`" in r.message
    # The same class on both sides is the same recompile, wherever its line moved to.
    same = review(compile_result("base", recompiles=[used]), compile_result("head", recompiles=[used]))
    assert same.findings == []
