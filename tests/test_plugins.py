"""A probe added from outside: tests/toyplugin holds a descriptor and a run function the way a
third-party package would, and nothing else in perfcheck names it. Named under `plugins:` in the
config, it runs in its own worker like the built-in probes, and its metrics, finding, table row
and matrix entry reach result.json and the comment."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import write_tree

from perfcheck.config import ConfigError, parse_config

TESTS = Path(__file__).resolve().parent

MODEL = """\
import torch
from torch import nn


def build(device):
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(16, {width}), nn.ReLU(), nn.Linear({width}, 4)).to(device), (
        torch.randn(8, 16).to(device),
    )
"""

CONFIG = """\
plugins: [toyplugin.probe]
workloads:
  - name: net
    entry: model.py:build
    timeout_s: 300
toy:
  max_growth_pct: {limit}
"""


def _perfcheck(*args: str, cwd: Path, **extra_env: str) -> subprocess.CompletedProcess[str]:
    # As a user runs it: a fresh process, the plugin installed where perfcheck runs (PYTHONPATH
    # here), the probe's worker finding it the same way.
    env = {**os.environ, "PYTHONPATH": str(TESTS), **extra_env}
    return subprocess.run(
        [sys.executable, "-m", "perfcheck", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )


def _trees(tmp_path: Path, base_width: int, head_width: int, limit: float) -> tuple[Path, Path]:
    config = CONFIG.format(limit=limit)
    base = write_tree(
        tmp_path / "base", {"model.py": MODEL.format(width=base_width), "perfcheck.yml": config}
    )
    head = write_tree(
        tmp_path / "head", {"model.py": MODEL.format(width=head_width), "perfcheck.yml": config}
    )
    return base, head


@pytest.mark.e2e
def test_a_plugin_probe_runs_compares_and_renders_like_a_built_in_one(tmp_path: Path) -> None:
    base, head = _trees(tmp_path, 32, 48, limit=10)
    out = tmp_path / "out"
    summary = tmp_path / "step-summary.md"  # the Actions job summary, as a runner's step writes it
    done = _perfcheck(
        "review", "--base", str(base), "--head", str(head), "--probes", "toy", "--out", str(out),
        cwd=tmp_path, GITHUB_STEP_SUMMARY=str(summary),
    )  # fmt: skip
    assert done.returncode == 1, done.stderr  # fail: the head grew beyond the allowed 10 %
    job = summary.read_text()
    assert "| parameters (toy) | 676 | 1,012 | +336 |" in job and "Parameter count grew" in job

    result = json.loads((out / "result.json").read_text())
    (wl,) = result["workloads"]
    by_side = {side: {r["probe"]: r for r in wl[side]} for side in ("base", "head")}
    # 16*32+32 + 32*4+4 = 676 parameters on base; 16*48+48 + 48*4+4 = 1012 on head
    assert by_side["base"]["toy"]["metrics"] == {"parameters": 676, "tensors": 4}
    assert by_side["head"]["toy"]["metrics"] == {"parameters": 1012, "tensors": 4}
    (finding,) = result["findings"]
    assert finding["category"] == "toy_parameters_grew"
    assert finding["message"] == "parameters grew +49.7 % (676 → 1012)"

    comment = (out / "comment.md").read_text()
    assert "| parameters (toy) | 676 | 1,012 | +336 |" in comment
    assert "Parameter count grew" in comment  # the plugin's own title, from its matrix entry
    # its matrix entry: the likely cause and a command that verifies it, as printed
    assert "Likely cause: a layer was widened or added" in comment
    # (perfcheck as this test started it, with the PYTHONPATH it found the plugin by, the review's
    # own output folder)
    assert (
        f"`PYTHONPATH={shlex.quote(str(TESTS))} python -m perfcheck review --out {out}/verify "
        "--no-compile-latency --base BASE --head HEAD --workloads net --probes toy`"
    ) in comment
    assert "Allowed growth" in comment and "10 %" in comment  # its detail field

    # The commands that read a result.json know the plugin from the config they read.
    config = str(base / "perfcheck.yml")
    rendered = _perfcheck("render", str(out / "result.json"), "--config", config, cwd=tmp_path)
    assert rendered.returncode == 0, rendered.stderr
    assert rendered.stdout.strip() == comment.strip()
    html = _perfcheck("html", str(out / "result.json"), "--config", config, cwd=tmp_path)
    assert html.returncode == 0 and "Parameter count grew" in html.stdout, html.stderr
    # its column in the overview, beside no built-in probe's (none of them ran)
    assert "<th>workload</th><th>parameters</th><th>findings</th>" in html.stdout
    assert '<td class="num">676 → 1,012</td>' in html.stdout
    unknown = _perfcheck("render", str(out / "result.json"), cwd=tmp_path)
    assert unknown.returncode == 2 and "toy_parameters_grew" in unknown.stderr
    assert "plugins:" in unknown.stderr and "Traceback" not in unknown.stderr


@pytest.mark.e2e
def test_a_plugin_probes_settings_decide_and_the_review_passes_within_them(tmp_path: Path) -> None:
    base, head = _trees(tmp_path, 32, 48, limit=60)
    out = tmp_path / "out"
    done = _perfcheck(
        "review", "--base", str(base), "--head", str(head), "--probes", "toy", "--out", str(out), cwd=tmp_path
    )
    assert done.returncode == 0, done.stderr
    assert json.loads((out / "result.json").read_text())["findings"] == []


# -- a probe in the built-in shape: its own files and one registry line --------------------------

# The line a built-in probe adds to perfcheck/core/probes/__init__.py's registry, run as the
# registry runs it in every perfcheck process of the test (the review, its fork servers, each
# probe's worker): the toy probe's files are a built-in's files, and nothing else names it.
REGISTRY_LINE = """\
import toyplugin.probe
from perfcheck.core import probes

probes.register(toyplugin.probe.PROBE, built_in=True)
"""

BUILT_IN_CONFIG = CONFIG.removeprefix("plugins: [toyplugin.probe]\n")  # no plugins: a built-in's


@pytest.mark.e2e
def test_a_probe_in_the_built_in_shape_is_its_own_files_and_one_registry_line(tmp_path: Path) -> None:
    trees = {}
    for side, width in (("base", 32), ("head", 48)):
        files = {
            "model.py": MODEL.format(width=width),
            "perfcheck.yml": BUILT_IN_CONFIG.format(limit=10),
            # each side's processes see their own tree only, where a sandbox hides the other's
            "registry/sitecustomize.py": REGISTRY_LINE,
        }
        trees[side] = write_tree(tmp_path / side, files)
    path = os.pathsep.join([str(TESTS), *(str(t / "registry") for t in trees.values())])
    out = tmp_path / "out"
    job = tmp_path / "step-summary.md"  # the Actions job summary, as a runner's step writes it
    done = _perfcheck(
        "review", "--base", str(trees["base"]), "--head", str(trees["head"]), "--probes", "toy",
        "--out", str(out), cwd=tmp_path, PYTHONPATH=path, GITHUB_STEP_SUMMARY=str(job),
    )  # fmt: skip
    # no `plugins:`: the config's toy: section is a built-in probe's, read by its settings model
    assert done.returncode == 1, done.stderr
    summary = job.read_text()
    assert "| parameters (toy) | 676 | 1,012 | +336 |" in summary and "Parameter count grew" in summary
    result = json.loads((out / "result.json").read_text())
    (wl,) = result["workloads"]
    assert [r["metrics"] for r in wl["head"]] == [{"parameters": 1012, "tensors": 4}]
    assert [f["category"] for f in result["findings"]] == ["toy_parameters_grew"]
    comment = (out / "comment.md").read_text()
    assert "| parameters (toy) | 676 | 1,012 | +336 |" in comment and "Parameter count grew" in comment
    # read back with no config naming it, as result.json of a built-in probe is
    rendered = _perfcheck("render", str(out / "result.json"), cwd=tmp_path, PYTHONPATH=path)
    assert rendered.returncode == 0 and rendered.stdout.strip() == comment.strip(), rendered.stderr
    html = _perfcheck("html", str(out / "result.json"), cwd=tmp_path, PYTHONPATH=path)
    assert html.returncode == 0 and '<td class="num">676 → 1,012</td>' in html.stdout, html.stderr
    schema = json.loads(_perfcheck("schema", "result", cwd=tmp_path, PYTHONPATH=path).stdout)
    said = [
        c["then"]
        for c in schema["$defs"]["ProbeResult"]["allOf"]
        if c["if"]["properties"]["probe"] == {"const": "toy"}
    ]
    assert said == [{"properties": {"metrics": {"$ref": "#/$defs/ToyMetrics"}}}]
    # its section is checked as perfcheck's own are: file, key, what was expected; exit 2
    (trees["base"] / "perfcheck.yml").write_text(BUILT_IN_CONFIG.format(limit=10) + "  max_grwth_pct: 1\n")
    refused = _perfcheck(
        "review", "--base", str(trees["base"]), "--head", str(trees["head"]), "--probes", "toy",
        "--out", str(out), cwd=tmp_path, PYTHONPATH=path,
    )  # fmt: skip
    assert refused.returncode == 2
    assert "toy.max_grwth_pct: unknown key (did you mean `max_growth_pct`?)" in refused.stderr


@pytest.mark.e2e
def test_a_probe_in_the_built_in_shape_is_bisected_to_the_commit_that_raised_its_finding(
    tmp_path: Path,
) -> None:
    """`perfcheck bisect` reads what the probe's category is (structural: exact at any commit) from
    its descriptor, runs that probe alone at the commits between, and names the widening commit."""
    from conftest import git, git_commit

    from perfcheck.bisect_schema import BisectDoc

    registry = write_tree(tmp_path / "registry", {"sitecustomize.py": REGISTRY_LINE})
    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    config = BUILT_IN_CONFIG.format(limit=10)
    good = git_commit(repo, "a small net", {"model.py": MODEL.format(width=32), "perfcheck.yml": config})
    git_commit(repo, "docs", {"README.md": "python model.py\n"})
    wide = git_commit(repo, "widen the hidden layer", {"model.py": MODEL.format(width=48)})
    git_commit(repo, "docs: more", {"README.md": "python model.py --help\n"})
    out = tmp_path / "out"
    done = _perfcheck(
        "bisect", "--repo", str(repo), "--good", good, "--bad", "main", "--probes", "toy", "--out", str(out),
        cwd=tmp_path, PYTHONPATH=os.pathsep.join([str(TESTS), str(registry)]),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    doc = BisectDoc.model_validate_json((out / "bisect.json").read_text())
    [found] = doc.findings
    assert found.category == "toy_parameters_grew"
    assert found.first_bad is not None and found.first_bad.sha == wide
    assert "widen the hidden layer" in (out / "bisect.md").read_text()


@pytest.mark.e2e
def test_a_probe_in_the_built_in_shape_explains_a_slower_step_in_the_same_review(tmp_path: Path) -> None:
    """explain reads the probe's category as a cause (its entry's `role` and `because`): the
    timing gate's slower step on a model 64 times as wide names the parameter growth."""
    config = (
        "workloads:\n  - {name: net, entry: model.py:build, timeout_s: 300}\n"
        "compile: {backend: aot_eager, measure: 'off'}\ntoy: {max_growth_pct: 10}\n"
    )
    trees = {
        side: write_tree(tmp_path / side, {"model.py": MODEL.format(width=width), "perfcheck.yml": config})
        for side, width in (("base", 32), ("head", 2048))
    }
    registry = write_tree(tmp_path / "registry", {"sitecustomize.py": REGISTRY_LINE})
    out = tmp_path / "out"
    done = _perfcheck(
        "review", "--base", str(trees["base"]), "--head", str(trees["head"]), "--probes", "toy,timing",
        "--out", str(out), cwd=tmp_path, PYTHONPATH=os.pathsep.join([str(TESTS), str(registry)]),
    )  # fmt: skip
    assert done.returncode == 1, done.stderr[-3000:]
    found = {f["category"]: f for f in json.loads((out / "result.json").read_text())["findings"]}
    slower = found["throughput_regression"]
    assert slower["message"].endswith("; likely from the parameter growth (676 → 43012)"), slower["message"]
    assert slower["evidence"]["explained_by"] == "the parameter growth (676 → 43012)"


@pytest.mark.usefixtures("registries")
def test_plugin_mistakes_are_config_errors_that_name_the_key() -> None:
    cases = {
        "plugins: [no_such_plugin_module]": "perfcheck.yml: plugins[0]: cannot import no_such_plugin_module",
        "plugins: [../evil.py]": "perfcheck.yml: plugins[0]: expected the name of an installed module",
        "plugins: toyplugin.probe": "perfcheck.yml: plugins: expected a list of module names",
        "plugins: [toyplugin]": "perfcheck.yml: plugins[0]: toyplugin has no PROBE",
        "plugins: [toyplugin.probe]\ntoy: {max_growth_pct: -1}": "perfcheck.yml: toy.max_growth_pct: exp",
        "plugins: [toyplugin.probe]\ntoy: {limit: 3}": "perfcheck.yml: toy.limit: unknown key",
        "toy: {max_growth_pct: 3}": "perfcheck.yml: toy: unknown key",
    }
    for text, expected in cases.items():
        with pytest.raises(ConfigError) as err:
            parse_config(text, "perfcheck.yml")
        assert str(err.value).startswith(expected), (text, str(err.value))


@pytest.mark.usefixtures("registries")
def test_a_plugin_cannot_take_a_built_in_name_or_category() -> None:
    from dataclasses import replace

    from toyplugin.probe import PROBE

    from perfcheck.core import probes

    with pytest.raises(ValueError, match="a probe named 'timing' is registered already"):
        probes.register(replace(PROBE, name="timing"))
    with pytest.raises(ValueError, match="categories graph_break_added exist already"):
        probes.register(replace(PROBE, name="toy2", categories={"graph_break_added": {}}))
    with pytest.raises(ValueError, match=r"probe toy3: toy3_x\.causes: Field required"):
        probes.register(
            replace(
                PROBE,
                name="toy3",
                categories={
                    "toy3_x": {
                        "title": "t",
                        "nature": "structural",
                        "role": "neither",
                        "severity": "error",
                        "symptom": "s",
                    }
                },
            )
        )
    # What bisect and explain read of a category is the plugin's to say, as for every built-in one.
    with pytest.raises(ValueError, match=r"probe toy4: toy4_x\.nature: Field required"):
        entry = {
            "title": "t",
            "role": "neither",
            "severity": "error",
            "symptom": "s",
            "causes": ["c"],
            "verify": ["v"],
        }
        probes.register(replace(PROBE, name="toy4", categories={"toy4_x": entry}))
    assert not {"toy2", "toy3", "toy4"} & set(probes.names())


@pytest.mark.usefixtures("registries")
def test_every_category_of_every_probe_says_what_it_is_to_bisect_and_explain() -> None:
    """Bisect, explain and the charts name no category: they read each one's `nature` and `role`
    (and a cause's `because`), `identity`, `folds` and `chart`, from the built-in matrix and from
    every probe's descriptor alike."""
    from dataclasses import replace

    from toyplugin.probe import PROBE

    from perfcheck.core import bisect, explain, probes
    from perfcheck.core.matrix import because, known
    from perfcheck.measures import SourceLocation
    from perfcheck.schema import Finding
    from perfcheck.vocabulary import categories

    def finding(category: str, **evidence: object) -> Finding:
        where = SourceLocation(path="model.py", line=3)
        return Finding(
            category=category, severity="error", workload="w", probe="p", message="m", location=where,
            evidence=evidence,
        )  # fmt: skip

    entry = {"title": "t", "severity": "error", "symptom": "s", "causes": ["c"], "verify": ["v"]}
    probes.register(
        replace(
            PROBE,
            name="toy5",
            categories={
                "toy5_wider": {
                    **entry,
                    "nature": "structural",
                    "role": "cause",
                    "because": "the wider layer{{ at }}",
                },
                "toy5_slower": {**entry, "nature": "measured", "role": "effect", "chart": "kernel_deltas"},
                # A root cause whose evidence says it, and what follows from it; told apart at
                # other commits by each of its layers.
                "toy5_bad_init": {
                    **entry,
                    "nature": "structural",
                    "role": "neither",
                    "folds": {"categories": ["compile_failed"], "when": [{"check": "init"}]},
                    "identity": {"each": "layers", "named": "layer", "label": "{{ key }}: {{ value }}"},
                },
            },
        )
    )
    for category in {*categories(), *(c for k in probes.kinds() for c in k.raised())}:
        kind = known()[category]  # every category has an entry, and every entry each property
        assert kind.nature in ("structural", "measured", "process") and kind.role in (
            "effect",
            "cause",
            "neither",
        )
        assert kind.severity in ("error", "warning", "info"), category
        if kind.role == "cause":
            assert because(finding(category, break_type="print", reading="sdpa lost")), category
        # What follows from it is known; bisect can tell one apart whatever its evidence.
        assert all(c in known() for c in (kind.folds.categories if kind.folds else [])), category
        assert bisect.targets(finding(category)), category
    # The plugin's cause explains a built-in effect, and its effect is explained by a built-in cause.
    wider, slower = finding("toy5_wider"), finding("toy5_slower")
    [_, slow] = explain.explain([wider, finding("throughput_regression")])
    assert slow.message.endswith("likely from the wider layer at model.py:3")
    [_, slow] = explain.explain([finding("graph_break_added", break_type="print"), slower])
    assert "likely from the new graph break at model.py:3 (print)" in slow.message
    assert bisect.bisectable(wider) and not bisect.measured(wider)
    assert bisect.measured(slower) and not bisect.bisectable(slower)
    # What follows from a root cause is folded under it, named by its category's title.
    root = finding("toy5_bad_init", check="init_weights", layers={"fc1": 2, "fc2": 3})
    [only] = explain.explain([root, finding("compile_failed")])
    assert only.category == "toy5_bad_init" and "torch.compile fails at model.py:3" in only.message
    assert len(explain.explain([finding("toy5_bad_init", check="other"), finding("compile_failed")])) == 2
    # Bisect looks for each layer apart, labelled by the category's template.
    assert [(t.key, t.label) for t in bisect.targets(root)] == [
        ("toy5_bad_init|w|layer=fc1", "fc1: 2"),
        ("toy5_bad_init|w|layer=fc2", "fc2: 3"),
    ]
    # The charts read the category's `chart`, not a category's name.
    from perfcheck.core.matrix import of_chart

    assert of_chart("kernel_deltas") >= {"toy5_slower", "kernel_mix_changed"}
    assert of_chart("break_heatmap") == {"graph_break_added"}
    assert not bisect.bisectable(finding("probe_crashed")) and not bisect.measured(finding("probe_crashed"))


@pytest.mark.e2e
def test_the_cli_refuses_a_bad_plugin_before_any_probe_runs(tmp_path: Path) -> None:
    base = write_tree(
        tmp_path / "base", {"model.py": MODEL.format(width=8), "perfcheck.yml": "plugins: [nope_x]\n"}
    )
    done = _perfcheck(
        "review", "--base", str(base), "--head", str(base), "--out", str(tmp_path / "o"), cwd=tmp_path
    )
    assert done.returncode == 2
    assert "plugins[0]: cannot import nope_x" in done.stderr
    assert "Traceback" not in done.stderr
    assert not (tmp_path / "o" / "probes").exists()
