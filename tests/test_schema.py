"""The result contract: strict validation, versioning, and a bot side that never needs torch."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from perfcheck.schema import SCHEMA_VERSION, ContractError, Review, json_schema, load_review

MINIMAL = {
    "schema_version": SCHEMA_VERSION,
    "tool_version": "0",
    "verdict": "pass",
    "summary": "",
    "base": {"tree": "b"},
    "head": {"tree": "h"},
    "workloads": [],
    "findings": [],
}


def write(tmp_path: Path, doc: object) -> Path:
    path = tmp_path / "result.json"
    path.write_text(json.dumps(doc))
    return path


def test_a_valid_document_loads(tmp_path: Path) -> None:
    assert load_review(write(tmp_path, MINIMAL)).verdict == "pass"


@pytest.mark.parametrize(
    ("change", "complaint"),
    [
        ({"verdict": "maybe"}, "verdict"),
        (
            {
                "findings": [
                    {
                        "category": "made_up",
                        "severity": "error",
                        "workload": "w",
                        "probe": "p",
                        "message": "m",
                    }
                ]
            },
            "findings.0.category",
        ),
        ({"surprise": 1}, "surprise"),
        (
            {
                "workloads": [
                    {
                        "name": "w",
                        "head": [
                            {"probe": "p", "workload": "w", "side": "head", "status": "ok", "duration_s": -1}
                        ],
                    }
                ]
            },
            "duration_s",
        ),
    ],
)
def test_invalid_documents_are_rejected_whole(tmp_path: Path, change: dict, complaint: str) -> None:
    with pytest.raises(ContractError) as err:
        load_review(write(tmp_path, {**MINIMAL, **change}))
    assert complaint in str(err.value) and "not a valid perfcheck document" in str(err.value)


def test_other_schema_versions_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ContractError, match="schema_version 99 is not supported"):
        load_review(write(tmp_path, {**MINIMAL, "schema_version": 99}))


def test_non_json_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "result.json"
    path.write_text("<html>")
    with pytest.raises(ContractError, match="invalid JSON at line 1, column 1"):
        load_review(path)


def test_json_schema_covers_the_finding_vocabulary() -> None:
    schema = json_schema()
    categories = schema["$defs"]["Finding"]["properties"]["category"]["enum"]
    assert {"graph_break_added", "export_ir_changed", "probe_timeout", "ddp_overlap_drop"} <= set(categories)
    assert Review.model_validate(MINIMAL).schema_version == SCHEMA_VERSION


@pytest.mark.e2e
def test_bot_side_imports_without_torch() -> None:
    # A None entry in sys.modules makes any `import torch` fail loudly.
    code = (
        "import sys; sys.modules['torch'] = None\n"
        "import perfcheck.schema, perfcheck.config, perfcheck.spec, perfcheck.cli.main\n"
        "import importlib, pkgutil, perfcheck.bot, perfcheck.core\n"
        "for pkg in (perfcheck.bot, perfcheck.core):\n"
        "    for m in pkgutil.walk_packages(pkg.__path__, pkg.__name__ + '.'):\n"
        "        importlib.import_module(m.name)\n"
        "import github, perfcheck.bot.gateway as g; g._failure(ValueError())\n"
        "import perfcheck.runner.orchestrate, perfcheck.runner.workloads, perfcheck.review\n"
        "perfcheck.cli.main.main(['schema'])\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr


def test_hostile_results_are_refused_whole_not_a_traceback(tmp_path: Path) -> None:
    import json as _json

    base = _json.loads((Path(__file__).parent / "data" / "demo-result.json").read_text())
    timing = next(r for r in base["workloads"][0]["head"] if r["probe"] == "timing")["timing"]

    def with_step(value: object) -> dict:
        doc = _json.loads(_json.dumps(base))
        t = next(r for r in doc["workloads"][0]["head"] if r["probe"] == "timing")["timing"]
        t["processes"][0]["step_ms"] = value
        return doc

    cases = {
        "zero": with_step(0),
        "negative": with_step(-1.0),
        "empty processes": _json.loads(_json.dumps(base).replace(_json.dumps(timing["processes"]), "[]")),
        "too many processes": _json.loads(
            _json.dumps(base).replace(
                _json.dumps(timing["processes"]), _json.dumps(timing["processes"] * 400)
            )
        ),
    }
    for name, doc in cases.items():
        with pytest.raises(ContractError):
            load_review(write(tmp_path, doc))
            pytest.fail(f"a result with {name} was accepted")
    (tmp_path / "nan.json").write_text(_json.dumps(with_step(float("nan"))))  # Python writes NaN
    with pytest.raises(ContractError):
        load_review(tmp_path / "nan.json")
    (tmp_path / "deep.json").write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(ContractError, match="nested too deep"):
        load_review(tmp_path / "deep.json")


# -- version 3: every probe's metrics under `metrics`; version 2 documents still read -------------

DEMO_V2 = Path(__file__).parent / "data" / "demo-result.json"  # recorded by perfcheck 0.1, version 2


def test_a_recorded_version_2_result_reads_as_version_4_and_renders_the_same(tmp_path: Path) -> None:
    from perfcheck.core.probes.export import ExportMetrics
    from perfcheck.core.render import render_comment
    from perfcheck.measures import CompileMetrics, TimingMetrics
    from perfcheck.schema import probe_metrics

    raw = json.loads(DEMO_V2.read_text())
    assert raw["schema_version"] == 2 and "compile" in raw["workloads"][0]["base"][0]
    review = load_review(DEMO_V2)
    assert review.schema_version == SCHEMA_VERSION == 4 and review.causes is None
    models = {"compile": CompileMetrics, "export": ExportMetrics, "timing": TimingMetrics}
    for wl, recorded in zip(review.workloads, raw["workloads"], strict=True):
        for side in ("base", "head"):
            for r, before in zip(getattr(wl, side), recorded[side], strict=True):
                # each result's block is its probe's metrics now, as its model, the figures unchanged
                model = models[r.probe]
                assert probe_metrics(r, model) == model.model_validate(before[r.probe])
                assert [m for m in models.values() if m is not model and probe_metrics(r, m)] == []
    written = json.loads(review.model_dump_json())
    result = written["workloads"][0]["base"][0]
    assert written["schema_version"] == 4 and not {"compile", "export", "timing", "trace"} & set(result)
    again = load_review(write(tmp_path, written))
    assert again == review and render_comment(again) == render_comment(review)


def test_a_version_2_probe_run_reads_as_version_4(tmp_path: Path) -> None:
    from perfcheck.measures import CompileMetrics
    from perfcheck.schema import load_probe_run, probe_metrics

    raw = json.loads(DEMO_V2.read_text())
    doc = {
        "schema_version": 2,
        "kind": "probe-run",
        "tool_version": raw["tool_version"],
        "shard": {"index": 1, "count": 1},
        "workload_set": [wl["name"] for wl in raw["workloads"]],
        "base": raw["base"],
        "head": raw["head"],
        "workloads": raw["workloads"],
    }
    run = load_probe_run(write(tmp_path, doc))
    assert run.schema_version == 4
    compiled = probe_metrics(run.workloads[0].head[0], CompileMetrics)
    assert compiled is not None
    assert compiled.graph_count == raw["workloads"][0]["head"][0]["compile"]["graph_count"]


def _result(probe: str, **fields: object) -> dict[str, object]:
    return {"probe": probe, "workload": "w", "side": "head", "status": "ok", "duration_s": 1, **fields}


def test_a_version_2_result_with_two_probes_metrics_is_refused(tmp_path: Path) -> None:
    timing = json.loads(DEMO_V2.read_text())["workloads"][0]["head"][2]["timing"]
    both = _result("timing", timing=timing, compile={"backend": "inductor"})
    doc = {**MINIMAL, "schema_version": 2, "workloads": [{"name": "w", "head": [both]}]}
    with pytest.raises(
        ContractError, match=r"workloads\.0\.head\.0: metrics of several probes \(compile, timing\)"
    ):
        load_review(write(tmp_path, doc))


def test_a_probes_metrics_that_do_not_fit_its_model_refuse_the_document(tmp_path: Path) -> None:
    # Checked as strictly as version 2 checked its `timing` field: on reading, whole.
    doc = {**MINIMAL, "workloads": [{"name": "w", "head": [_result("timing", metrics={"mode": "eager"})]}]}
    with pytest.raises(
        ContractError, match=r"the timing probe's metrics: metrics\.batch_size: Field required"
    ):
        load_review(write(tmp_path, doc))
    # a probe without a registered model (a plugin not loaded here) keeps its metrics as they are
    doc["workloads"] = [{"name": "w", "head": [_result("elsewhere", metrics={"any": 1})]}]
    assert load_review(write(tmp_path, doc)).workloads[0].head[0].metrics == {"any": 1}


def test_typed_metrics_are_made_once_and_follow_a_copy_with_new_metrics() -> None:
    from perfcheck.measures import CompileMetrics
    from perfcheck.schema import ProbeResult, probe_metrics

    first = CompileMetrics(
        backend="eager", graph_count=1, graph_break_count=0, recompile_count=0, cold_compile_s=1
    )
    r = ProbeResult.model_validate(_result("compile", metrics=first.model_dump(mode="json")))
    assert probe_metrics(r, CompileMetrics) is probe_metrics(r, CompileMetrics) == first
    later = r.with_metrics(first.model_copy(update={"graph_count": 2}))
    assert probe_metrics(later, CompileMetrics).graph_count == 2  # type: ignore[union-attr]
    # a copy that replaced the metrics as plain JSON is validated anew, not served the old object
    plain = r.model_copy(update={"metrics": {**r.metrics, "graph_count": 3}})
    assert probe_metrics(plain, CompileMetrics).graph_count == 3  # type: ignore[union-attr]
    assert probe_metrics(r, CompileMetrics).graph_count == 1  # type: ignore[union-attr]


def test_the_json_schema_says_each_probes_metrics() -> None:
    import jsonschema

    schema = json_schema()
    doc = json.loads(load_review(DEMO_V2).model_dump_json())
    jsonschema.validate(doc, schema)
    # a timing result holding the compile probe's metrics is not a valid document
    compiled = doc["workloads"][0]["base"][0]["metrics"]
    doc["workloads"][0]["base"][2]["metrics"] = compiled
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(doc, schema)


@pytest.mark.e2e
def test_a_lookup_before_the_built_in_probes_are_loaded_is_refused_not_answered_short() -> None:
    # The contract reads the vocabulary the probe registry fills: a process that validates a
    # document before loading the registry would otherwise check it against the shared categories
    # alone, and leave every probe's metrics unchecked.
    script = (
        "from perfcheck.schema import Finding\n"
        "try:\n"
        "    Finding(category='probe_crashed', severity='error', workload='w', probe='p', message='m')\n"
        "except RuntimeError as err:\n"
        "    print(err)\n"
        "import perfcheck.core.probes\n"
        "Finding(category='graph_break_added', severity='error', workload='w', probe='p', message='m')\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout == "the built-in probes are not loaded: import perfcheck.core.probes first\n"
