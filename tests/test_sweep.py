"""`perfcheck sweep`: the Pareto front, the plan of points, the renderings, and real sweeps on a CPU."""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from xml.etree import ElementTree

import pytest
from conftest import model_tree, write_tree

from perfcheck.cli.sweep_command import (
    EXIT_BAD_INPUT,
    EXIT_OK,
    EXIT_SOME_FAILED,
    SweepUsageError,
    add_sweep_parser,
    by_step_time,
    exit_code,
    pick_workload,
    render_table,
)
from perfcheck.config import Config, parse_config
from perfcheck.core.charts import svg_sweep
from perfcheck.core.pareto import dominates, pareto_front
from perfcheck.runner.sweep import SweepJob, plan_points, run_point, run_sweep, skip_reason
from perfcheck.settings import SweepConfig, WorkloadConfig
from perfcheck.sweep_schema import PointResult, PointSpec, PointStatus, SweepPoint, SweepReport

SVG = "{http://www.w3.org/2000/svg}"

# --- the Pareto front, on hand-made points (step ms, peak MB, compile s) ---


def test_a_point_beaten_everywhere_is_off_the_front() -> None:
    assert pareto_front([(1, 100, 5), (2, 200, 6), (3, 50, 1)]) == [0, 2]


def test_trade_offs_all_stay_on_the_front() -> None:
    points = [(1, 300, 9), (2, 200, 5), (3, 100, 1)]
    assert pareto_front(points) == [0, 1, 2]


def test_equal_points_do_not_dominate_each_other() -> None:
    assert pareto_front([(1, 100, 5), (1, 100, 5), (1, 100, 6)]) == [0, 1]


def test_better_in_one_objective_and_equal_elsewhere_dominates() -> None:
    assert dominates((1, 100, 5), (1, 100, 6))
    assert not dominates((1, 100, 5), (1, 100, 5))
    assert pareto_front([(1, 100, 6), (1, 100, 5)]) == [1]


def test_empty_and_single() -> None:
    assert pareto_front([]) == []
    assert pareto_front([(4, 4, 4)]) == [0]


def test_points_of_different_dimension_are_refused() -> None:
    with pytest.raises(ValueError, match="different dimension"):
        dominates((1, 2), (1, 2, 3))


# --- the plan of points ---


def test_every_combination_is_one_point_and_default_means_no_mode() -> None:
    sweep = SweepConfig(modes=["default", "max-autotune"], dynamic=[False, True], options=[{"a": 1}])
    points = plan_points(sweep)
    assert len(points) == 2 * 2 * 2
    assert points[0] == SweepPoint(mode=None, dynamic=False, options=None)
    assert points[1] == SweepPoint(mode=None, dynamic=False, options={"a": 1})
    assert points[-1] == SweepPoint(mode="max-autotune", dynamic=True, options={"a": 1})


def test_modes_apply_to_inductor_only() -> None:
    moded = SweepPoint(mode="reduce-overhead", dynamic=False)
    assert skip_reason(moded, "inductor") is None
    assert "inductor backend only" in (skip_reason(moded, "aot_eager") or "")
    assert skip_reason(SweepPoint(dynamic=True), "aot_eager") is None


def test_a_mode_with_options_becomes_the_modes_options_under_them() -> None:
    from perfcheck.runner.sweep_worker import compile_kwargs

    point = SweepPoint(mode="max-autotune-no-cudagraphs", dynamic=False, options={"max_autotune": False})
    kwargs = compile_kwargs("inductor", point)
    assert "mode" not in kwargs  # torch.compile refuses a mode and options together
    assert kwargs["options"] == {"max_autotune": False, "coordinate_descent_tuning": True}
    assert compile_kwargs("inductor", SweepPoint(mode="reduce-overhead"))["mode"] == "reduce-overhead"


# --- rendering, from a hand-made report ---


def _point(
    mode: str | None,
    step: float | None,
    mb: float | None,
    comp: float | None,
    *,
    status: PointStatus = "ok",
    dynamic: bool = False,
    options: dict[str, object] | None = None,
    pareto: bool = False,
    message: str | None = None,
) -> PointResult:
    return PointResult(
        point=SweepPoint(mode=mode, dynamic=dynamic, options=options),
        status=status,
        message=message,
        step_ms=step,
        peak_mb=mb,
        memory_kind="peak_rss" if mb is not None else None,
        compile_s=comp,
        pareto=pareto,
    )


HAND_MADE = SweepReport(
    workload="net",
    backend="inductor",
    device="cpu",
    steps=20,
    points=[
        _point(None, 2.0, 400, 3.0, pareto=True),
        _point("max-autotune", 1.5, 420, 30.0, pareto=True),
        _point(None, 2.5, 410, 4.0, dynamic=True),
        _point(
            None,
            None,
            None,
            None,
            options={"<b>": "@x|y"},
            status="crashed",
            message="E: @bob `|` <i>\nmore",
        ),
    ],
)

TABLE = """\
**perfcheck sweep** · `net` · backend `inductor` on cpu · median of 20 steps

| | point | status | step time | peak RSS | cold compile |
|---|---|---|---:|---:|---:|
| ★ | max-autotune · dynamic=False | ok | 1.500 ms | 420 MB | 30.00 s |
| ★ | default · dynamic=False | ok | 2.000 ms | 400 MB | 3.00 s |
|  | default · dynamic=True | ok | 2.500 ms | 410 MB | 4.00 s |
|  | default · dynamic=False · {"&lt;b&gt;":"@<!-- -->x\\|y"} | crashed | — | — | — |

★ Pareto front: no other point is as good in step time, memory and compile latency and better in one.

Not measured:
- default · dynamic=False · {"&lt;b&gt;":"@<!-- -->x\\|y"}: crashed, E: @<!-- -->bob \\`\\|\\` &lt;i&gt;
"""


def test_the_table_is_sorted_by_step_time_marks_the_front_and_escapes() -> None:
    assert render_table(HAND_MADE) == TABLE


def test_unmeasured_points_sort_last_in_plan_order() -> None:
    ordered = by_step_time(HAND_MADE.points)
    assert [p.step_ms for p in ordered] == [1.5, 2.0, 2.5, None]


def test_the_svg_is_valid_escaped_and_connects_the_front() -> None:
    svg = svg_sweep(HAND_MADE)
    root = ElementTree.fromstring(svg)  # well-formed, so every piece of text was escaped
    assert len(root.findall(f"{SVG}circle")) == 3
    (front,) = root.findall(f"{SVG}polyline")
    assert len(front.get("points", "").split()) == 2
    texts = [t.text or "" for t in root.iter(f"{SVG}text")]
    assert "1 point(s) not plotted (crashed, timed out or skipped); see the table" in texts
    assert "<b>" not in svg and "&lt;b&gt;" not in svg  # the crashed point is not drawn at all
    # Hostile text in a drawn label stays text.
    hostile = HAND_MADE.model_copy(
        update={"points": [_point(None, 1.0, 10, 1.0, options={"</text><script>": "&"}, pareto=True)]}
    )
    root = ElementTree.fromstring(svg_sweep(hostile))
    assert not root.findall(f".//{SVG}script")
    assert any("</text><script>" in (t.text or "") for t in root.iter(f"{SVG}text"))


def test_an_svg_with_nothing_measured_says_so() -> None:
    empty = HAND_MADE.model_copy(update={"points": HAND_MADE.points[3:]})
    assert "no point was measured" in svg_sweep(empty)


def test_exit_codes_follow_failed_points_not_skipped_ones() -> None:
    assert exit_code(HAND_MADE) == EXIT_SOME_FAILED
    skipped = _point("reduce-overhead", None, None, None, status="skipped", message="inductor only")
    assert exit_code(HAND_MADE.model_copy(update={"points": [*HAND_MADE.points[:3], skipped]})) == EXIT_OK


def test_a_workload_comes_from_the_config_or_the_built_ins() -> None:
    config = parse_config("workloads:\n  - name: net\n    entry: model.py:build\n", "t.yml")
    assert pick_workload(config, "net").entry == "model.py:build"
    assert pick_workload(config, "mlp-tiny") == WorkloadConfig(name="mlp-tiny", entry="mlp-tiny")
    with pytest.raises(SweepUsageError, match=r"unknown workload 'nope'.*net"):
        pick_workload(config, "nope")


# --- real sweeps: real processes, real torch ---

SWEEP_CONFIG = """
workloads:
  - name: net
    entry: model.py:build
compile:
  backend: {backend}
sweep:
  modes: {modes}
  dynamic: {dynamic}
  options: {options}
  steps: 5
  timeout_s: 300
"""


def sweep_config(backend: str, modes: str, dynamic: str, options: str = "[]") -> str:
    return SWEEP_CONFIG.format(backend=backend, modes=modes, dynamic=dynamic, options=options)


@dataclass(frozen=True)
class Ran:
    code: int
    stdout: str
    stderr: str
    out: Path


def sweep_cli(args: Sequence[str], out: Path) -> Ran:
    parser = argparse.ArgumentParser(prog="perfcheck")
    add_sweep_parser(parser.add_subparsers(dest="command", required=True))
    parsed = parser.parse_args(["sweep", *args, "--out", str(out)])
    stdout, stderr = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
        code = parsed.func(parsed)
    return Ran(code, stdout.getvalue(), stderr.getvalue(), out)


@pytest.fixture(scope="module")
def aot_sweep(tmp_path_factory: pytest.TempPathFactory) -> Ran:
    root = tmp_path_factory.mktemp("sweep")
    tree = model_tree(root / "tree")
    write_tree(
        tree, {"perfcheck.yml": sweep_config("aot_eager", "[default, reduce-overhead]", "[false, true]")}
    )
    return sweep_cli(["net", "--tree", str(tree)], root / "out")


def test_a_sweep_measures_each_point_and_skips_modes_off_inductor(aot_sweep: Ran) -> None:
    assert aot_sweep.code == EXIT_OK, aot_sweep.stderr
    report = SweepReport.model_validate_json((aot_sweep.out / "sweep.json").read_text())
    assert (report.workload, report.backend, report.device) == ("net", "aot_eager", "cpu")
    ran = [p for p in report.points if p.status == "ok"]
    assert [p.point.dynamic for p in ran] == [False, True]
    for p in ran:
        assert p.step_ms and p.step_ms > 0 and p.compile_s and p.compile_s > 0
        assert p.peak_mb and p.peak_mb > 50 and p.memory_kind == "peak_rss"  # a process with torch in it
    skipped = [p for p in report.points if p.status == "skipped"]
    assert [p.point.mode for p in skipped] == ["reduce-overhead", "reduce-overhead"]
    assert all("inductor backend only" in (p.message or "") for p in skipped)
    assert any(p.pareto for p in ran) and not any(p.pareto for p in skipped)
    assert report.environment is not None and report.environment.torch


def test_a_sweep_writes_the_table_and_the_chart(aot_sweep: Ran) -> None:
    report = SweepReport.model_validate_json((aot_sweep.out / "sweep.json").read_text())
    table = (aot_sweep.out / "sweep.md").read_text(encoding="utf-8")
    assert table == render_table(report) and table in aot_sweep.stdout
    rows = [ln for ln in table.splitlines() if ln.startswith("| ") and " ok " in ln]
    times = [float(ln.split("|")[4].split()[0]) for ln in rows]
    assert len(rows) == 2 and times == sorted(times)
    svg = ElementTree.fromstring((aot_sweep.out / "sweep.svg").read_text(encoding="utf-8"))
    assert len(svg.findall(f"{SVG}circle")) == 2


def test_a_sweep_reports_progress_per_point(aot_sweep: Ran) -> None:
    lines = [ln for ln in aot_sweep.stderr.splitlines() if ln.startswith("[")]
    assert [ln.split("]")[0] for ln in lines] == ["[1/4", "[2/4", "[3/4", "[4/4"]
    assert "default · dynamic=False: ok," in lines[0]
    assert "reduce-overhead · dynamic=True: skipped: mode 'reduce-overhead'" in lines[3]
    assert "2 ok, 2 skipped" in aot_sweep.stderr


@pytest.mark.e2e
@pytest.mark.inductor
def test_a_point_torch_compile_rejects_fails_and_the_others_still_run(tmp_path: Path) -> None:
    tree = model_tree(tmp_path / "tree")
    config = parse_config(sweep_config("inductor", "[default]", "[false]", "[{bogus_option: 1}]"), "t.yml")
    job = SweepJob(
        tree=tree, workload=config.workload("net"), backend="inductor", sweep=config.sweep, out_dir=tmp_path
    )
    report = run_sweep(job)
    ok, bad = report.points
    assert ok.status == "ok" and ok.step_ms and ok.pareto
    assert bad.status == "crashed" and not bad.pareto and bad.step_ms is None
    assert "Unexpected optimization option bogus_option" in (bad.message or "")
    assert exit_code(report) == EXIT_SOME_FAILED


@pytest.mark.e2e
def test_a_point_past_its_time_limit_is_killed_and_reported(tmp_path: Path) -> None:
    tree = model_tree(tmp_path / "tree")
    spec = PointSpec(
        tree=str(tree),
        workload=WorkloadConfig(name="net", entry="model.py:build"),
        backend="aot_eager",
        point=SweepPoint(),
        steps=5,
        warmup_steps=5,
    )
    # Importing torch alone takes longer than this.
    result, environment = run_point(spec, sys.executable, 0.2, tmp_path, "slow")
    assert result.status == "timeout" and "no result after 0.2 s" in (result.message or "")
    assert environment is None


@pytest.mark.e2e
def test_a_point_whose_process_dies_is_a_crash(tmp_path: Path) -> None:
    tree = write_tree(
        tmp_path / "tree",
        {"model.py": "import os, signal\n\ndef build(device):\n    os.kill(os.getpid(), signal.SIGKILL)\n"},
    )
    spec = PointSpec(
        tree=str(tree),
        workload=WorkloadConfig(name="net", entry="model.py:build"),
        backend="aot_eager",
        point=SweepPoint(),
        steps=5,
        warmup_steps=5,
    )
    result, _ = run_point(spec, sys.executable, 300, tmp_path, "dies")
    assert result.status == "crashed" and "died of SIGKILL" in (result.message or "")


@pytest.mark.parametrize(
    ("args", "config", "complaint"),
    [
        (["nope"], "", "unknown workload 'nope'"),
        (["net"], "sweep:\n  dynamic: []\n", "no points"),
        (["net"], "sweep:\n  steps: 0\n", "sweep.steps"),
    ],
)
def test_bad_input_exits_2_without_running_anything(
    tmp_path: Path, args: list[str], config: str, complaint: str
) -> None:
    tree = write_tree(
        tmp_path / "tree",
        {"perfcheck.yml": "workloads:\n  - name: net\n    entry: model.py:build\n" + config},
    )
    ran = sweep_cli([*args, "--tree", str(tree)], tmp_path / "out")
    assert ran.code == EXIT_BAD_INPUT and complaint in ran.stderr
    assert not (tmp_path / "out").exists()


def test_a_missing_tree_is_bad_input(tmp_path: Path) -> None:
    ran = sweep_cli(["net", "--tree", str(tmp_path / "absent")], tmp_path / "out")
    assert ran.code == EXIT_BAD_INPUT and "not a folder" in ran.stderr


def test_the_sweep_document_round_trips() -> None:
    again = SweepReport.model_validate_json(HAND_MADE.model_dump_json())
    assert again == HAND_MADE
    assert json.loads(HAND_MADE.model_dump_json())["schema_version"] == 1


def test_default_config_sweeps_inductor_modes() -> None:
    assert [p.mode for p in plan_points(Config().sweep)][::2] == [
        None,
        "reduce-overhead",
        "max-autotune-no-cudagraphs",
    ]
