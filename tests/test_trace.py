"""Trace analytics on small traces written here, with every expected figure worked out by hand.

Provenance: the traces below are synthetic, laid out as Kineto writes them (complete "X" events
with args.stream / args.correlation on GPU activity, cuda_runtime launches carrying the same
correlation id, ProfilerStep user annotations, flow and metadata events beside them). The tests of
HTA's short names also read two real traces recorded on the lent H200 and HTA 0.5.0's rows for
them (tests/data/h200-mlp-*; h200-mlp-hta-diff.json says how each was made).
"""

from __future__ import annotations

import argparse
import gzip
import json
import tracemalloc
from pathlib import Path
from typing import Any

import pytest
from conftest import perfcheck_cli

from perfcheck.cli import trace_commands as trace_cli
from perfcheck.cli.trace_commands import add_trace_parser
from perfcheck.core.trace import (
    HTA_SHORT,
    OpTotal,
    TraceError,
    by_hta_short_name,
    diff_times,
    hta_short_name,
    iter_events,
    kernel_kind,
    regroup,
    short_name,
    structural,
    summarize,
    summarize_events,
)
from perfcheck.trace_schema import TraceDiffDoc

GEMM = "void gemm_kernel<float, 128>(float const*, float*, int)"
ELEMENTWISE = "void elementwise_kernel<{lambda(float)#1}, 4>(int, {lambda(float)#1})"
NCCL = "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevComm*, unsigned long, ncclWork*)"
MEMCPY = "Memcpy DtoD (Device -> Device)"


def op(name: str, cat: str, ts: float, dur: float, tid: int = 1, **args: Any) -> dict[str, Any]:
    return {"ph": "X", "cat": cat, "name": name, "pid": 100, "tid": tid, "ts": ts, "dur": dur, "args": args}


def step(n: int, ts: float) -> dict[str, Any]:
    return op(f"ProfilerStep#{n}", "user_annotation", ts, 100)


def launch(ts: float, corr: int) -> dict[str, Any]:
    return op("cudaLaunchKernel", "cuda_runtime", ts, 1, correlation=corr)


def kernel(
    name: str, ts: float, dur: float, corr: int, stream: int = 7, cat: str = "kernel"
) -> dict[str, Any]:
    event = op(name, cat, ts, dur, stream=stream, correlation=corr, device=0)
    return {**event, "pid": 0, "tid": stream}


# Bookkeeping events an analysis must ignore: flows, metadata, instants, python stacks, the
# whole-trace span.
NOISE = [
    {"ph": "M", "name": "process_name", "pid": 0, "tid": 0, "ts": 0, "args": {"name": "python"}},
    {"ph": "s", "id": 1, "pid": 100, "tid": 1, "ts": 5, "cat": "ac2g", "name": "ac2g"},
    {"ph": "f", "id": 1, "pid": 0, "tid": 7, "ts": 10, "cat": "ac2g", "name": "ac2g", "bp": "e"},
    {"ph": "i", "s": "t", "name": "Iteration Start: PyTorch Profiler", "pid": 100, "tid": 1, "ts": 0},
    op("train.py(12): forward", "python_function", 0, 300),
    op("PyTorch Profiler (0)", "Trace", 0, 300),
]

# Three steps of 100 us. Kernels launched in the last step (corr 6) are dropped, as HTA does.
#   compute  gemm [10,40]  elementwise [50,70]  gemm [130,150]   (gemm [210,260] dropped)
#   comm     nccl [30,60] on stream 20
#   memory   memcpy [110,120]
# span 10..150 = 140; busy [10,70]+[110,120]+[130,150] = 90, idle 50; compute 30+20+20 = 70;
# non-compute 140-70-50 = 20; comm 30, of which [30,40]+[50,60] = 20 under compute.
GPU_EVENTS = [
    step(1, 0),
    step(2, 100),
    step(3, 200),
    launch(5, 1),
    launch(15, 2),
    launch(25, 3),
    launch(105, 4),
    launch(125, 5),
    launch(205, 6),
    kernel(GEMM, 10, 30, corr=1),
    kernel(ELEMENTWISE, 50, 20, corr=2),
    kernel(NCCL, 30, 30, corr=3, stream=20),
    kernel(MEMCPY, 110, 10, corr=4, cat="gpu_memcpy"),
    kernel(GEMM, 130, 20, corr=5),
    kernel(GEMM, 210, 50, corr=6),
    *NOISE,
]

# CPU only. Thread 1: linear [10,60] around addmm [15,55]; relu [70,80]; step 2 linear [110,160]
# around addmm [115,150]; relu [170,175]. Thread 2: add [20,30] (overlaps thread 1, nests in
# nothing). Step 3 is dropped. Self times: addmm 40+35, linear 10+15, relu 10+5, add 10.
CPU_EVENTS = [
    step(1, 0),
    step(2, 100),
    step(3, 200),
    op("aten::linear", "cpu_op", 10, 50),
    op("aten::addmm", "cpu_op", 15, 40),
    op("aten::relu", "cpu_op", 70, 10),
    op("aten::add", "cpu_op", 20, 10, tid=2),
    op("aten::linear", "cpu_op", 110, 50),
    op("aten::addmm", "cpu_op", 115, 35),
    op("aten::relu", "cpu_op", 170, 5),
    op("aten::linear", "cpu_op", 210, 50),
    op("aten::addmm", "cpu_op", 215, 40),
    *NOISE,
]


def write_trace(path: Path, events: list[dict[str, Any]], **meta: Any) -> Path:
    doc = {"schemaVersion": 1, "deviceProperties": [{"id": 0, "name": "Test GPU"}], **meta}
    text = json.dumps({**doc, "traceEvents": events, "displayTimeUnit": "ms"}, indent=1)
    if path.suffix == ".gz":
        path.write_bytes(gzip.compress(text.encode()))
    else:
        path.write_text(text)
    return path


def names_and_totals(ops: tuple[Any, ...]) -> list[tuple[str, str, int, float]]:
    return [(o.name, o.kind, o.count, round(o.total_us, 6)) for o in ops]


@pytest.mark.parametrize("suffix", [".json", ".json.gz"])
def test_gpu_breakdown_overlap_and_kernels(tmp_path: Path, suffix: str) -> None:
    s = summarize(write_trace(tmp_path / f"gpu{suffix}", GPU_EVENTS))
    assert s.on_gpu and s.last_step_dropped and s.steps == 2
    b = s.breakdown
    assert b is not None
    assert (b.span_us, b.idle_us, b.compute_us, b.non_compute_us) == (140, 50, 70, 20)
    assert b.idle_pct == pytest.approx(100 * 50 / 140)
    assert b.compute_pct == pytest.approx(50.0)
    assert b.non_compute_pct == pytest.approx(100 * 20 / 140)
    assert s.comm_overlap_pct == pytest.approx(100 * 20 / 30)
    assert names_and_totals(s.kernels) == [
        (GEMM, "compute", 2, 50.0),
        (NCCL, "communication", 1, 30.0),
        (ELEMENTWISE, "compute", 1, 20.0),
        (MEMCPY, "memory", 1, 10.0),
    ]
    assert s.per_step()[GEMM] == 25.0


def test_cpu_only_trace_lists_ops_by_self_time(tmp_path: Path) -> None:
    s = summarize(write_trace(tmp_path / "cpu.json", CPU_EVENTS))
    assert not s.on_gpu and s.breakdown is None and s.comm_overlap_pct is None
    assert s.steps == 2
    assert names_and_totals(s.ops) == [
        ("aten::addmm", "cpu_op", 2, 75.0),
        ("aten::linear", "cpu_op", 2, 25.0),
        ("aten::relu", "cpu_op", 2, 15.0),
        ("aten::add", "cpu_op", 1, 10.0),
    ]
    assert s.per_step() == {"aten::addmm": 37.5, "aten::linear": 12.5, "aten::relu": 7.5, "aten::add": 5.0}


def test_a_single_step_is_analysed_whole(tmp_path: Path) -> None:
    # HTA drops a step only when there are at least two: with one, the last kernel counts too.
    events = [e for e in GPU_EVENTS if not e["name"].startswith("ProfilerStep")] + [step(1, 0)]
    s = summarize(write_trace(tmp_path / "one.json", events))
    assert not s.last_step_dropped and s.steps == 1
    first = s.kernels[0]
    assert (first.name, first.count, first.total_us) == (GEMM, 3, 100.0)
    assert s.breakdown is not None and s.breakdown.span_us == 250  # 10 .. 260


def test_hta_rounding_snaps_timestamps_inwards(tmp_path: Path) -> None:
    events = [
        step(1, 0),
        step(2, 100),
        launch(1, 1),
        launch(2, 2),
        kernel(GEMM, 10.4, 9.2, corr=1),  # exact [10.4, 19.6]; HTA [11, 19]
        kernel(GEMM, 30.0, 10.0, corr=2),
    ]
    path = write_trace(tmp_path / "ns.json", events)
    exact, rounded = summarize(path), summarize(path, hta_rounding=True)
    assert exact.kernels[0].total_us == pytest.approx(19.2)
    assert rounded.kernels[0].total_us == pytest.approx(18.0)
    assert rounded.breakdown is not None and rounded.breakdown.span_us == 29  # 11 .. 40


@pytest.mark.parametrize(
    ("name", "cat", "kind"),
    [
        (NCCL, "kernel", "communication"),
        ("ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t(ncclWorkElem)", "kernel", "communication"),
        (MEMCPY, "gpu_memcpy", "memory"),
        ("Memset (Device)", "gpu_memset", "memory"),
        ("copy engine transfer", "gpu_memcpy", "memory"),
        ("Event Sync", "cuda_sync", "other"),
        ("void at::native::vectorized_elementwise_kernel<4>(int)", "kernel", "compute"),
        ("triton_poi_fused_relu_0", "kernel", "compute"),
        ("nccl_helper_without_the_word", "kernel", "compute"),  # HTA: ^nccl.*Kernel
    ],
)
def test_kernel_kinds_follow_hta(name: str, cat: str, kind: str) -> None:
    assert kernel_kind(name, cat) == kind


def test_short_names() -> None:
    assert short_name(GEMM) == "gemm_kernel"
    assert short_name(ELEMENTWISE) == "elementwise_kernel"
    assert (
        short_name("void at::native::(anonymous namespace)::f<int>(int)")
        == "at::native::(anonymous namespace)::f"
    )
    assert short_name(MEMCPY) == MEMCPY
    assert short_name("aten::addmm") == "aten::addmm"
    assert short_name("x" * 30, 10) == "x" * 9 + "…"


def test_diff_added_removed_changed_largest_first() -> None:
    base = {"gemm": 50.0, "relu": 10.0, "gone": 1.0, "same": 3.0}
    head = {"gemm": 42.0, "relu": 10.5, "new": 20.0, "same": 3.0}
    changes = diff_times(base, head)
    assert [(c.name, c.status, c.delta_us) for c in changes] == [
        ("new", "added", 20.0),
        ("gemm", "changed", -8.0),
        ("gone", "removed", -1.0),
        ("relu", "changed", 0.5),
        ("same", "same", 0.0),
    ]
    assert [c.name for c in structural(changes)] == ["new", "gone"]


WEIRD = [
    op('quote " and backslash \\ and }, {"brace": 1}', "cpu_op", 1, 2),
    {
        **op("unicode µs ✓ \u2028", "cpu_op", 3, 4),
        "args": {"Input Dims": [[1, 2], []], "nested": {"a": [{"b": 1}, {"c": 2}]}},
    },
    op("big numbers", "cpu_op", 1234567890123.456789, 1e-3),
    *GPU_EVENTS,
]


@pytest.mark.parametrize("chunk", [3, 17, 64, 4096])
def test_streaming_is_exact_whatever_the_chunk(tmp_path: Path, chunk: int) -> None:
    path = write_trace(tmp_path / "weird.json.gz", WEIRD, distributedInfo={"rank": 0})
    whole = json.loads(gzip.decompress(path.read_bytes()))["traceEvents"]
    streamed = list(iter_events(path, chunk_bytes=chunk))
    assert [(e.name, e.ts, e.dur, e.stream, e.correlation) for e in streamed] == [
        (
            e["name"],
            e.get("ts"),
            e.get("dur"),
            e.get("args", {}).get("stream"),
            e.get("args", {}).get("correlation"),
        )
        for e in whole
    ]


def test_a_bare_event_array_and_metadata_after_the_events(tmp_path: Path) -> None:
    bare = tmp_path / "bare.json"
    bare.write_text(json.dumps(GPU_EVENTS))
    assert summarize(bare).comm_overlap_pct == pytest.approx(100 * 20 / 30)


@pytest.mark.parametrize(
    ("content", "complaint"),
    [
        (b"<html>", "the file is not JSON (it begins with '<')"),
        (b'{"traceName": "x"}', "the object has no traceEvents array"),
        (b'{"traceEvents": 5}', "its traceEvents is a number, not an array"),
        (b'{"traceEvents": [{"ph": "X"}, {"ph": ', "invalid JSON"),
        (b'{"traceEvents": [{"ph": "X"} {"ph": "X"}]}', "expected ','"),
        (gzip.compress(b'{"traceEvents": [{"ph": "X"}]}', mtime=0)[:-12], "not a readable Kineto trace"),
        (b"\xff\xfe\x00", "the file is not JSON (it begins with the byte 0xff)"),
    ],
)
def test_unreadable_traces_name_the_file(tmp_path: Path, content: bytes, complaint: str) -> None:
    path = tmp_path / "bad.json"
    path.write_bytes(content)
    with pytest.raises(TraceError) as err:
        summarize(path)
    assert str(path) in str(err.value) and complaint in str(err.value)


def test_a_missing_file(tmp_path: Path) -> None:
    with pytest.raises(TraceError, match=r"nope\.json: cannot read it"):
        summarize(tmp_path / "nope.json")


def write_big_trace(path: Path, ops: int) -> Path:
    with path.open("w") as f:
        f.write('{"schemaVersion": 1, "traceEvents": [\n')
        for i in range(ops):
            args = {"External id": i, "Input Dims": [[64, 1024], [1024, 1024]], "Ev Idx": i}
            flow = {"ph": "f", "id": i, "pid": 1, "tid": 1, "ts": i * 10.0, "cat": "ac2g"}
            event = {**op(f"aten::op_{i % 50}", "cpu_op", i * 10.0, 5.0), "args": args}
            f.write(json.dumps(event) + ",\n")
            f.write(json.dumps(flow) + ",\n")
        f.write(json.dumps(step(1, 0)) + "\n]}\n")
    return path


def peak_while_reading(path: Path) -> tuple[int, int]:
    tracemalloc.start()
    try:
        events = sum(1 for _ in iter_events(path))
        return events, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_memory_stays_bounded_whatever_the_file_size(tmp_path: Path) -> None:
    small = write_big_trace(tmp_path / "small.json", 8_000)
    big = write_big_trace(tmp_path / "big.json", 40_000)
    small_events, small_peak = peak_while_reading(small)
    big_events, big_peak = peak_while_reading(big)
    assert (small_events, big_events) == (16_001, 80_001)
    size = big.stat().st_size
    assert size > 8_000_000
    assert big_peak < size / 10, f"peak {big_peak:,} bytes for a {size:,}-byte trace"
    # Five times the events, about the same memory: it is a window, not the file.
    assert big_peak < 1.5 * small_peak + 100_000


def run_cli(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="perfcheck")
    add_trace_parser(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    return int(args.func(args))


def test_cli_summary(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write_trace(tmp_path / "gpu.json.gz", GPU_EVENTS)
    assert run_cli(["trace", "summary", str(path)]) == 0
    out = capsys.readouterr().out
    assert "2 profiler steps analysed (1, 2; the last of 3 dropped, as HTA does) · GPU kernels" in out
    assert "idle 35.71 · compute 50.00 · non-compute 14.29" in out
    assert "communication hidden behind compute: 66.67 %" in out
    rows = [line.split() for line in out.splitlines() if line.startswith(("gemm_kernel", "ncclDev"))]
    assert rows == [
        ["gemm_kernel", "compute", "2", "50.0", "25.0", "45.5"],
        ["ncclDevKernel_AllReduce_Sum_f32_RING_LL", "communication", "1", "30.0", "15.0", "27.3"],
    ]


def test_cli_diff(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    base = write_trace(tmp_path / "base.json", CPU_EVENTS)
    changed = [e for e in CPU_EVENTS if e["name"] != "aten::add"]
    changed += [op("aten::sigmoid", "cpu_op", 82, 4), op("aten::sigmoid", "cpu_op", 180, 4)]
    head = write_trace(tmp_path / "head.json", changed)
    assert run_cli(["trace", "diff", str(base), str(head), "--top", "3"]) == 0
    out = capsys.readouterr().out
    assert "1 added · 1 removed · 0 changed in time" in out
    rows = [line.split() for line in out.splitlines() if line.startswith(("added", "removed"))]
    assert rows == [
        ["removed", "aten::add", "5.0", "—", "-5.0"],
        ["added", "aten::sigmoid", "—", "4.0", "+4.0"],
    ]
    assert "GPU time" not in out  # no breakdown for CPU-only traces


def test_cli_bad_input_exits_2_naming_the_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text("not json")
    good = write_trace(tmp_path / "good.json", CPU_EVENTS)
    assert run_cli(["trace", "diff", str(good), str(bad)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"perfcheck trace: {bad}: ")


# Valid JSON that no profiler writes, and what the refusal says it is (issue 30). A trace is an
# object whose traceEvents array holds events (objects with a "ph"), or the bare array of them.
NOT_TRACES = [
    ("[1,2,3]", "the array holds no trace event"),
    ("[]", "the array holds no trace event"),
    ('[{"foo":1}]', "the array holds no trace event"),
    ('{"traceEvents":[1,"a",null]}', "its traceEvents array holds no trace event"),
    ('{"traceEvents":[]}', "its traceEvents array holds no trace event"),
    ('{"traceEvents":[{"ph":5,"name":"x","ts":1,"dur":2}]}', "its traceEvents array holds no trace event"),
    ('{"traceEvents":{"ph":"X"}}', "its traceEvents is an object, not an array"),
    ("{}", "the object has no traceEvents array"),
    ('{"schema":"1.0.1","nodes":[{"name":"x","id":2}]}', "the object has no traceEvents array"),
    ('"trace"', "the file is a string"),
    ("null", "the file is null"),
    ("nothing", "the file is not JSON (it begins with 'n')"),
    ('{"traceEvents": nope}', "its traceEvents is not JSON (it begins with 'n'), not an array"),
]


@pytest.mark.e2e
@pytest.mark.parametrize(("content", "complaint"), NOT_TRACES)
def test_json_that_is_not_a_trace_is_refused_saying_what_a_trace_is(
    tmp_path: Path, content: str, complaint: str
) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text(content)
    good = write_trace(tmp_path / "good.json", CPU_EVENTS)
    for argv in (
        ["summary", str(bad)],
        ["diff", str(good), str(bad)],
        ["diff", str(bad), str(good), "--json"],
    ):
        done = perfcheck_cli("trace", *argv)  # the real command: no traceback, no table, exit 2
        assert (done.returncode, done.stdout) == (2, ""), done.stderr
        assert done.stderr == (
            f"perfcheck trace: {bad}: not a Kineto trace: {complaint}; expected a PyTorch profiler "
            '(Kineto) trace: a JSON object whose "traceEvents" array holds trace events (objects '
            'with a "ph" field)\n'
        )


@pytest.mark.e2e
@pytest.mark.parametrize(
    ("events", "complaint"),
    [
        ('[{"ph":"X","cat":"cpu_op","name":"a","ts":1,"dur":1e400}]', "a time out of range"),
        (
            "["
            + "".join(f'{{"ph":"X","cat":"cpu_op","name":"a","ts":1,"dur":1e308,"tid":{t}}},' for t in (1, 2))
            + "{}]",
            "a time out of range",  # each finite, their sum not
        ),
        ('[{"ph":"X"},' + "[" * 100_000 + "]" * 100_000 + "]", "values nested too deeply"),
    ],
)
def test_values_no_measurement_has_are_bad_input_not_a_traceback(
    tmp_path: Path, events: str, complaint: str
) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text(f'{{"traceEvents": {events}}}')
    for json_flag in ([], ["--json"]):
        done = perfcheck_cli("trace", "summary", str(bad), *json_flag)
        assert done.returncode == 2 and complaint in done.stderr and "Traceback" not in done.stderr


def test_a_step_number_that_is_a_digit_but_no_decimal_is_no_step_number(tmp_path: Path) -> None:
    # "²" is a digit to str.isdigit and no number to int(): the step is numbered by its order.
    path = write_trace(
        tmp_path / "steps.json", [op("ProfilerStep#²", "user_annotation", 0, 100), step(7, 100)]
    )
    assert summarize(path, steps="all").analysed == (0, 7)


@pytest.mark.e2e
def test_the_smallest_traces_torch_writes_are_read(tmp_path: Path) -> None:
    """What torch's profiler writes for nothing at all, for CPU ops without steps, and torch's
    EventList export (a bare array of events): traces, each read."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    x = torch.randn(4, 4)
    with profile(activities=[ProfilerActivity.CPU]) as empty:
        pass
    empty.export_chrome_trace(str(tmp_path / "empty.json"))
    with profile(activities=[ProfilerActivity.CPU]) as ops:
        (x @ x).relu()
    ops.export_chrome_trace(str(tmp_path / "ops.json"))
    ops.events().export_chrome_trace(str(tmp_path / "eventlist.json"))
    assert (tmp_path / "eventlist.json").read_text().startswith("[{")
    assert summarize(tmp_path / "empty.json").ops == ()
    assert "aten::mm" in {o.name for o in summarize(tmp_path / "ops.json").cpu_ops}
    assert summarize(tmp_path / "eventlist.json").events > 0
    for name in ("empty.json", "ops.json", "eventlist.json"):
        assert perfcheck_cli("trace", "summary", str(tmp_path / name)).returncode == 0


@pytest.mark.parametrize("command", [[], ["summary"], ["diff"]])
def test_cli_help(command: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as done:
        run_cli(["trace", *command, "--help"])
    assert done.value.code == 0
    assert "HolisticTraceAnalysis" in capsys.readouterr().out


# -- issue 19: steps a diff can choose, and documents a script can read --------------------------


def _profiled_steps(path: Path, planted_step: int) -> Path:
    """A real torch.profiler trace of ProfilerStep#1..#3 of a small model; step ``planted_step``
    also runs a sigmoid, the change a diff of two steps must find."""
    import torch
    from torch.profiler import ProfilerActivity, profile, schedule

    model = torch.nn.Sequential(torch.nn.Linear(16, 16), torch.nn.ReLU())
    x = torch.randn(8, 16)
    # Step 0 warms up; ProfilerStep#1..#3 are recorded.
    with profile(
        activities=[ProfilerActivity.CPU], schedule=schedule(wait=0, warmup=1, active=3, repeat=1)
    ) as prof:
        for step in range(5):
            y = model(x)
            if step == planted_step:
                y = torch.sigmoid(y)
            prof.step()
    prof.export_chrome_trace(str(path))
    return path


def test_a_diff_of_two_steps_of_one_trace_finds_the_change_planted_in_one(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    trace = _profiled_steps(tmp_path / "steps.json", planted_step=2)
    ids = summarize(trace, steps="all").analysed
    assert len(ids) == 3
    first, planted = ids[0], ids[1]
    # By default the last step is dropped and both sides are the same file: nothing differs.
    assert run_cli(["trace", "diff", str(trace), str(trace), "--json"]) == 0
    same = TraceDiffDoc.model_validate_json(capsys.readouterr().out)
    assert same.changes == [] and same.base.steps == [first, planted]
    code = run_cli(
        [
            "trace",
            "diff",
            str(trace),
            str(trace),
            "--base-steps",
            str(first),
            "--head-steps",
            str(planted),
            "--json",
        ]
    )
    assert code == 0
    doc = TraceDiffDoc.model_validate_json(capsys.readouterr().out)
    assert doc.base.steps == [first] and doc.head.steps == [planted] and doc.head.steps_chosen
    added = [c.name for c in doc.changes if c.status == "added"]
    assert "aten::sigmoid" in added
    # The table says which steps it analysed.
    assert (
        run_cli(
            [
                "trace",
                "diff",
                str(trace),
                str(trace),
                "--base-steps",
                str(first),
                "--head-steps",
                str(planted),
            ]
        )
        == 0
    )
    text = capsys.readouterr().out
    assert f"profiler step {planted} analysed (--steps)" in text and "aten::sigmoid" in text


def test_trace_json_documents_validate_against_the_printed_schema(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import jsonschema

    from perfcheck.cli.main import main

    trace = _profiled_steps(tmp_path / "steps.json", planted_step=2)
    for argv, document in (
        (["trace", "summary", str(trace), "--json"], "trace-summary"),
        (["trace", "diff", str(trace), str(trace), "--steps", "all", "--json"], "trace-diff"),
        (["trace", "diff", str(FP32), str(BF16), "--short-names", "--json"], "trace-diff"),
    ):
        assert main(argv) == 0
        data = json.loads(capsys.readouterr().out)
        assert main(["schema", document]) == 0
        jsonschema.validate(data, json.loads(capsys.readouterr().out))
        assert data["kind"] == document


def test_a_step_the_trace_does_not_have_is_bad_input(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    trace = _profiled_steps(tmp_path / "steps.json", planted_step=2)
    assert run_cli(["trace", "summary", str(trace), "--steps", "99"]) == 2
    assert "no such ProfilerStep; the trace has" in capsys.readouterr().err
    assert run_cli(["trace", "summary", str(trace), "--steps", "two"]) == 2


# -- issue 19: rows keyed by HTA's short name, and the fast reader's other paths -----------------

DATA = Path(__file__).parent / "data"
# Real torch.profiler traces of one small training step on the lent H200, float32 and bfloat16,
# and HTA 0.5.0's TraceDiff rows for them: h200-mlp-hta-diff.json says how each was made.
FP32, BF16 = DATA / "h200-mlp-fp32.pt.trace.json.gz", DATA / "h200-mlp-bf16.pt.trace.json.gz"
HTA_ROWS = json.loads((DATA / "h200-mlp-hta-diff.json").read_text())["rows"]
GELU_FLOAT = (
    "void at::native::vectorized_elementwise_kernel<4, at::native::GeluCUDAKernelImpl("
    "at::TensorIteratorBase&, at::native::GeluType)::{lambda()#1}::operator()() const::{lambda()#2}"
    "::operator()() const::{lambda(float)#1}, std::array<char*, 2ul> >(int, "
    "at::native::GeluCUDAKernelImpl(at::TensorIteratorBase&, at::native::GeluType)::{lambda()#1}"
    "::operator()() const::{lambda()#2}::operator()() const::{lambda(float)#1}, std::array<char*, 2ul>)"
)


# Expected values: HolisticTraceAnalysis 0.5.0's hta.utils.utils.shorten_name on each name, run
# in a venv of its own (pip install HolisticTraceAnalysis==0.5.0) on 2026-12-01.
@pytest.mark.parametrize(
    ("name", "hta"),
    [
        (GEMM, "gemm_kernel"),
        (GELU_FLOAT, "at::native::vectorized_elementwise_kernel"),
        (NCCL, "ncclDevKernel_AllReduce_Sum_f32_RING_LL"),
        (
            "void at::native::(anonymous namespace)::multi_tensor_apply_kernel<at::native::(anonymous "
            "namespace)::TensorListMetadata<3>, std::plus<float>, float>(at::native::(anonymous "
            "namespace)::TensorListMetadata<3>, std::plus<float>, float)",
            "at::native::::multi_tensor_apply_kernel",
        ),
        (MEMCPY, MEMCPY),
        ("Memset (Device)", "Memset (Device)"),
        ("dma copy<x>(y)", "dma copy<x>(y)"),
        ("triton_poi_fused_relu_0", "triton_poi_fused_relu_0"),
        (
            "autograd::engine::evaluate_function: AddmmBackward0",
            "autograd::engine::evaluate_function: AddmmBackward0",
        ),
        # HTA's quirks, kept so that rows stay HTA's: '->' deleted, a closer deletes back to the
        # nearest opener of its kind whatever lies between, text after the last space only.
        ("a->b<c>(d)", "ab"),
        ("op<a>->b", "opb"),
        ("f>x", "f>x"),
        ("x<a(b>c)d", "d"),
        ("foo (bar)", ""),
        ("<<>", "<"),
        ("a b c(", "c("),
    ],
)
def test_hta_short_names_are_htas(name: str, hta: str) -> None:
    assert hta_short_name(name) == hta


def gpu_rows(path: Path, naming: str) -> dict[str, list[float]]:
    # HTA's TraceDiff takes the first ProfilerStep by default and HTA 0.5's rounded times.
    s = summarize(path, hta_rounding=True, steps=str(min(summarize(path, steps="all").analysed)))
    if naming == "hta-short":
        s = by_hta_short_name(s)
    return {op.name: [op.count, op.total_us] for op in s.kernels}


@pytest.mark.parametrize("naming", ["full", "hta-short"])
def test_rows_are_htas_trace_diff_rows(naming: str) -> None:
    base, head = gpu_rows(FP32, naming), gpu_rows(BF16, naming)
    ours = {
        name: [
            base.get(name, [0, 0.0])[0],
            head.get(name, [0, 0.0])[0],
            base.get(name, [0, 0.0])[1],
            head.get(name, [0, 0.0])[1],
        ]
        for name in base.keys() | head.keys()
    }
    assert ours.keys() == HTA_ROWS[naming].keys()
    for name, row in HTA_ROWS[naming].items():
        assert ours[name][:2] == row[:2], name  # counts, exactly
        assert ours[name][2:] == pytest.approx(row[2:]), name  # total microseconds


def test_diff_by_short_names_turns_a_retyped_kernel_into_a_change(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert run_cli(["trace", "diff", str(FP32), str(BF16), "--json"]) == 0
    full = TraceDiffDoc.model_validate_json(capsys.readouterr().out)
    assert run_cli(["trace", "diff", str(FP32), str(BF16), "--json", "--short-names"]) == 0
    short = TraceDiffDoc.model_validate_json(capsys.readouterr().out)
    assert (full.naming, full.base.naming) == ("full", "full")
    assert (short.naming, short.base.naming, short.head.naming) == ("hta-short", "hta-short", "hta-short")
    # The GELU kernel is one template instantiation per dtype: by full name float's is removed
    # and BFloat16's added; by HTA's short name they are one row, changed in time.
    gelu = {c.status: c.name for c in full.changes if "GeluCUDAKernelImpl" in c.name}
    assert "lambda(float)#1" in gelu["removed"] and "lambda(c10::BFloat16)#1" in gelu["added"]
    statuses = {c.name: c.status for c in short.changes}
    assert statuses["at::native::vectorized_elementwise_kernel"] == "changed"
    assert not any("(" in name or "<" in name for name in statuses if not name.startswith("Memcpy"))
    row = next(o for o in short.head.ops if o.name == "at::native::vectorized_elementwise_kernel")
    variants = [o for o in full.head.ops if hta_short_name(o.name) == row.name]
    assert row.variants == len(variants) > 1
    assert row.count == sum(o.count for o in variants)
    assert row.total_us == pytest.approx(sum(o.total_us for o in variants))
    assert all(o.variants == 1 for o in full.head.ops)


def test_tables_say_the_rows_are_short_names(capsys: pytest.CaptureFixture[str]) -> None:
    assert run_cli(["trace", "summary", str(BF16), "--short-names"]) == 0
    out = capsys.readouterr().out
    assert "GPU kernels by HTA's short name (--short-names)" in out and "full names" in out
    row = next(line.split() for line in out.splitlines() if line.startswith("at::native::vectorized"))
    assert row[0] == "at::native::vectorized_elementwise_kernel" and int(row[-1]) > 1
    assert run_cli(["trace", "diff", str(FP32), str(BF16), "--short-names"]) == 0
    assert "by HTA's short name (--short-names)" in capsys.readouterr().out


def test_short_names_in_help(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        run_cli(["trace", "diff", "--help"])
    out = " ".join(capsys.readouterr().out.split())
    assert "--short-names" in out and "use_short_name=True" in out


def test_regroup_adds_up_rows_and_keeps_the_largest_members_kind() -> None:
    ops = [
        OpTotal("void k<float>(float*)", "compute", 3, 30.0),
        OpTotal("void k<half>(half*)", "memory", 2, 10.0),
        OpTotal("other", "compute", 1, 35.0),
    ]
    assert regroup(ops, hta_short_name) == (
        OpTotal("k", "compute", 5, 40.0, variants=2),
        OpTotal("other", "compute", 1, 35.0),
    )
    s = summarize_events([])
    assert by_hta_short_name(by_hta_short_name(s)).naming == "hta-short"
    assert trace_cli.HTA_SHORT == HTA_SHORT


def test_gpu_side_step_marks_are_the_same_steps() -> None:
    # Newer Kineto marks each ProfilerStep on the GPU timeline too (gpu_user_annotation): the
    # same step again, not another one.
    s = summarize(FP32)
    assert (s.analysed, s.steps, s.last_step_dropped) == ((1, 2), 2, True)
    assert summarize(FP32, steps="all").analysed == (1, 2, 3)
    assert summarize(FP32, steps="2").analysed == (2,)


def test_events_of_other_types_are_read_as_the_generic_decoder_reads_them(tmp_path: Path) -> None:
    odd = [
        step(1, 0),
        step(2, 100),
        launch(5, 1),
        {**kernel(GEMM, 10, 30, corr=1), "args": {"stream": "7", "correlation": 1.0}},
        {**op("aten::mm", "cpu_op", 20, 5), "name": 17},
        {**op("aten::ts_text", "cpu_op", 30, 5), "ts": "30"},
        {**op("aten::args_list", "cpu_op", 40, 5), "args": [1, 2]},
        {**op("aten::odd_ids", "cpu_op", 50, 5), "pid": [1], "tid": True},
        7,
        launch(105, 2),
        kernel(GEMM, 110, 10, corr=2),
    ]
    path = write_trace(tmp_path / "odd.json", odd)
    events = list(iter_events(path))
    # The number is no event; everything else is, each field converted as HTA would take it.
    assert len(events) == len(odd) - 1
    retyped = events[3]
    assert (retyped.stream, retyped.correlation) == (7, 1)
    assert events[4].name == "17" and events[5].ts is None and events[6].args is None
    assert (events[7].pid, events[7].tid) == ("[1]", "True")
    s = summarize(path)
    assert names_and_totals(s.kernels) == [(GEMM, "compute", 1, 30.0)]  # corr 2 is in the last step


def test_a_recorded_trace_reads_as_the_generic_decoder_reads_it() -> None:
    whole = json.loads(gzip.decompress(BF16.read_bytes()))["traceEvents"]
    streamed = [(e.name, e.cat, e.ts, e.dur, e.stream, e.correlation) for e in iter_events(BF16)]
    assert streamed == [
        (
            e["name"],
            e.get("cat"),
            e.get("ts"),
            e.get("dur"),
            e.get("args", {}).get("stream"),
            e.get("args", {}).get("correlation"),
        )
        for e in whole
    ]


@pytest.mark.parametrize("correlation", [2**63, 2**70])
def test_an_id_out_of_range_is_bad_input(tmp_path: Path, correlation: int) -> None:
    path = write_trace(tmp_path / "ids.json", [step(1, 0), kernel(GEMM, 10, 30, corr=correlation)])
    with pytest.raises(TraceError, match="correlation id out of range"):
        summarize(path)


def test_a_value_bigger_than_the_window_and_metadata_before_the_events(tmp_path: Path) -> None:
    big = {**op("aten::big", "cpu_op", 1, 2), "args": {"blob": "x" * 300_000, "µ": "✓" * 1000}}
    path = write_trace(tmp_path / "big.json", [big, *GPU_EVENTS], huge={"list": list(range(50_000))})
    events = list(iter_events(path, chunk_bytes=1024))
    assert events[0].name == "aten::big" and len(events) == 1 + len(GPU_EVENTS)
    assert summarize(path).comm_overlap_pct == pytest.approx(100 * 20 / 30)


@pytest.mark.e2e
def test_core_trace_imports_no_torch() -> None:
    import subprocess
    import sys

    code = (
        "import sys; sys.modules['torch'] = None\n"
        "import perfcheck.core.trace, perfcheck.cli.trace_commands\n"
        "assert 'torch' not in {m.split('.')[0] for m in sys.modules if sys.modules[m] is not None}"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


# Issue 29: names a trace gives (a kernel's, an op's) are PR code's. Erase the screen, retitle the
# window, CSI in C1 form, a bell, NUL, DEL, a carriage return and a newline that would forge a row.
HOSTILE_NAME = "aten::mm\x1b[2J\x1b]0;pwned\x07\x9b31m\x9d\x00\x7f\r\nforged  cpu_op  1  999.0"


@pytest.mark.e2e
@pytest.mark.parametrize(
    "argv",
    [
        ["summary", "{hostile}"],
        ["summary", "{hostile}", "--short-names"],
        ["diff", "{plain}", "{hostile}"],
        ["diff", "{hostile}", "{plain}", "--short-names"],
    ],
)
def test_control_characters_in_names_are_shown_not_sent_to_the_terminal(
    tmp_path: Path, argv: list[str]
) -> None:
    events = [
        *CPU_EVENTS,
        op(HOSTILE_NAME, "cpu_op", 85, 4),
        op("void k<float>(float*)" + HOSTILE_NAME, "cpu_op", 90, 2),
    ]
    files = {"hostile": str(write_trace(tmp_path / "hostile.json", events))}
    files["plain"] = str(write_trace(tmp_path / "plain.json", CPU_EVENTS))
    done = perfcheck_cli("trace", *(a.format(**files) for a in argv))  # the real command
    assert done.returncode == 0, done.stderr
    controls = [c for c in done.stdout if (ord(c) < 0x20 and c != "\n") or 0x7F <= ord(c) <= 0x9F]
    assert controls == []
    assert "␛[2J␛]0;pwned␇" in done.stdout and "␍␊forged" in done.stdout
    assert not [ln for ln in done.stdout.splitlines() if ln.startswith("forged")]  # no row of its own


@pytest.mark.e2e
def test_json_output_keeps_names_exact(tmp_path: Path) -> None:
    """--json is data for scripts: the name as the trace gave it, control characters escaped by JSON."""
    path = write_trace(tmp_path / "hostile.json", [*CPU_EVENTS, op(HOSTILE_NAME, "cpu_op", 85, 4)])
    done = perfcheck_cli("trace", "summary", str(path), "--json")
    assert HOSTILE_NAME in {o["name"] for o in json.loads(done.stdout)["ops"]}
    assert "\x1b" not in done.stdout


DEEP = "[" * 100_000 + "]" * 100_000
DEEP_OBJECT = '{"a":' * 100_000 + "1" + "}" * 100_000
EVENT = '{"ph":"X","cat":"cpu_op","name":"aten::mm","pid":1,"tid":1,"ts":1,"dur":2'


@pytest.mark.e2e
@pytest.mark.parametrize(
    "content",
    [
        DEEP,  # the whole file
        f'{{"traceEvents": {DEEP}}}',
        f'{{"deviceProperties": {DEEP}, "traceEvents": [{EVENT}}}]}}',  # metadata before the events
        f'{{"traceEvents": [{EVENT}, "args": {DEEP}}}]}}',  # inside an event's args
        f'{{"traceEvents": [{EVENT}}}, {EVENT}, "args": {{"x": {DEEP_OBJECT}}}}}]}}',
    ],
    ids=["whole-file", "trace-events", "metadata", "args", "args-objects"],
)
@pytest.mark.parametrize("suffix", [".json", ".json.gz"])
def test_deeply_nested_json_is_bad_input_naming_the_file(tmp_path: Path, content: str, suffix: str) -> None:
    """Issue 29: 100,000 levels of nesting, where a recursive decoder would overflow the stack."""
    bad = tmp_path / f"deep{suffix}"
    bad.write_bytes(gzip.compress(content.encode()) if suffix.endswith(".gz") else content.encode())
    good = write_trace(tmp_path / "good.json", CPU_EVENTS)
    for argv in (["summary", str(bad)], ["diff", str(good), str(bad), "--json"]):
        done = perfcheck_cli("trace", *argv)  # the real command
        assert (done.returncode, done.stdout) == (2, ""), done.stderr
        assert (
            done.stderr == f"perfcheck trace: {bad}: not a readable Kineto trace: values nested too deeply\n"
        )
