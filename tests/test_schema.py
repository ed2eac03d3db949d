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


def test_bot_side_imports_without_torch() -> None:
    # A None entry in sys.modules makes any `import torch` fail loudly.
    code = (
        "import sys; sys.modules['torch'] = None\n"
        "import perfcheck.schema, perfcheck.config, perfcheck.spec, perfcheck.cli\n"
        "import importlib, pkgutil, perfcheck.bot, perfcheck.core\n"
        "for pkg in (perfcheck.bot, perfcheck.core):\n"
        "    for m in pkgutil.walk_packages(pkg.__path__, pkg.__name__ + '.'):\n"
        "        importlib.import_module(m.name)\n"
        "import github, perfcheck.bot.gateway as g; g._failure(ValueError())\n"
        "import perfcheck.runner.orchestrate, perfcheck.runner.workloads, perfcheck.review\n"
        "perfcheck.cli.main(['schema'])\n"
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
