"""perfcheck.yml: defaults, lookup, and errors that name the file, the key and the expectation."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import perfcheck_cli

from perfcheck.config import Config, ConfigError, load_config, parse_config
from perfcheck.core.probes.export import ExportSettings


def test_defaults_run_the_builtin_tiny_mlp() -> None:
    config = Config()
    assert [(w.name, w.entry) for w in config.workloads] == [("mlp-tiny", "mlp-tiny")]
    assert config.budgets.max_new_graph_breaks == 0
    assert config.budgets.max_throughput_regression_pct == 2.3
    assert config.budgets.max_peak_memory_growth_mb == 112
    assert config.compile.backend == "inductor"


def test_full_config_parses() -> None:
    config = parse_config(
        """
workloads:
  - {name: resnet, entry: models/resnet.py:build, train: true, amp: bf16, probes: [compile]}
  - {name: llama, entry: mypkg.models:llama}
export: {allow_ops: [aten.addmm.default], deny_ops: [aten.native_dropout.default]}
budgets: {max_new_graph_breaks: 1, compile_latency_s: {resnet: 60}}
paths: ["torch/_dynamo/**", "models/**/*.py"]
""",
        "perfcheck.yml",
    )
    assert config.workloads[0].amp == "bf16" and config.workloads[0].train
    assert config.budgets.compile_latency_s == {"resnet": 60}
    assert config.section(ExportSettings).deny_ops == ["aten.native_dropout.default"]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            "workloads:\n  - {name: a, entry: m.py:build, train: maybe}",
            "workloads[0].train: expected true or false, without quotes",
        ),
        ("workloads:\n  - {name: a, entry: m.py:build, amp: fp8}", "workloads[0].amp: expected"),
        ("workloads:\n  - {name: a}", "workloads[0].entry: expected"),
        (
            "workloads:\n  - {name: a, entry: m.py:build, probes: [speed]}",
            "workloads[0].probes: expected probe names",
        ),
        ("workloads:\n  - {name: a, entry: 'm.py:'}", "workloads[0].entry: expected"),
        ("workloads: []", "workloads: expected at least one workload"),
        ("export: {deny_ops: [native dropout]}", "export.deny_ops: expected op names like"),
        # a probe's section, read through its descriptor's settings model, as the config's own are
        ("ddp: {wrld_size: 2}", "ddp.wrld_size: unknown key (did you mean `world_size`?)"),
        ("ddp: {world_size: '2'}", "ddp.world_size: expected a whole number, without quotes (got '2')"),
        ("ddp: 3", "ddp: expected a mapping of settings (indented `key: value` lines) (got 3)"),
        ("dpp: {}", "dpp: unknown key (did you mean `ddp`?)"),
        ("custom_ops: {namespace: [a]}", "custom_ops.namespace: unknown key (did you mean `namespaces`?)"),
        ("custom_ops: {auto: yes please}", "custom_ops.auto: expected true or false, without quotes"),
        ("profile: {stepz: 2}", "profile.stepz: unknown key (did you mean `steps`?)"),
        ("profile: 3", "profile: expected a mapping of settings (indented `key: value` lines) (got 3)"),
        ("budgets: {max_new_graph_breaks: -1}", "budgets.max_new_graph_breaks: expected"),
        ("budget: {}", "budget: unknown key"),
        ("matrix: {recompiles: {severity: warning}}", "'recompiles' is not one (did you mean `recompile`?)"),
        ("acks: [{category: graph_brek_added, reason: x}]", "is not one (did you mean `graph_break_added`?)"),
        (
            "matrix: {recompile: {severity: fatal}}",
            "matrix.recompile.severity: expected 'error', 'warning' or",
        ),
        # paths: gitignore patterns, each compiled by pathspec; one it refuses or reads as nothing
        ("paths: ['*.py', '!']", "paths[1]: expected a gitignore pattern; `!` leaves out the files"),
        (
            "paths: ['models\\']",
            "paths[0]: expected a gitignore pattern; it ends in a backslash that escapes nothing",
        ),
        (
            "paths: ['#models']",
            "paths[0]: expected a gitignore pattern that can match a file; gitignore reads",
        ),
        ("paths: ['']", "paths[0]: expected a gitignore pattern that can match a file; this one is blank"),
        (
            "paths: ['a/[bc']",
            "paths[0]: expected a gitignore pattern that can match a file; gitignore discards",
        ),
        ("paths: [3]", "paths[0]: expected text (got 3)"),
        ("paths: '*.py'", "paths: expected a list"),
        ("- just\n- a list", "(top level): expected a mapping"),
        ("workloads: [unclosed", "not valid YAML"),
    ],
)
def test_errors_name_file_key_and_expectation(text: str, expected: str) -> None:
    with pytest.raises(ConfigError) as err:
        parse_config(text, "repo/perfcheck.yml")
    message = str(err.value)
    assert message.startswith("repo/perfcheck.yml:")
    assert expected in message


def test_paths_take_gitignore_lines_with_negation_classes_and_folders() -> None:
    paths = ["torch/_inductor/", "*.py", "!**/test_*.py", "models/[ab]*.py", "**/conf/**", "\\#notes.md"]
    assert parse_config(f"paths: {json.dumps(paths)}", "perfcheck.yml").paths == paths


@pytest.mark.e2e
def test_a_bad_pattern_in_paths_exits_2_naming_file_key_and_expectation(tmp_path: Path) -> None:
    """Through the real command: `plan` reads the config before it decides anything."""
    (tmp_path / "perfcheck.yml").write_text("paths:\n  - torch/\n  - '!'\n")
    event = tmp_path / "event.json"
    webhooks = Path(__file__).parent / "data" / "webhooks" / "pull_request.json"
    event.write_text(json.dumps(json.loads(webhooks.read_text())[0]))
    done = perfcheck_cli("plan", "--event-name", "pull_request", "--event-path", str(event), cwd=tmp_path)
    assert done.returncode == 2, done.stderr
    assert f"{tmp_path / 'perfcheck.yml'}: paths[1]: expected a gitignore pattern" in done.stderr
    assert "(got '!')" in done.stderr and "Traceback" not in done.stderr


def test_duplicate_workload_names_are_rejected() -> None:
    with pytest.raises(ConfigError, match="'a' appears twice"):
        parse_config("workloads:\n  - {name: a, entry: x.py:b}\n  - {name: a, entry: y.py:b}", "f.yml")


def test_lookup_prefers_repo_root_then_dot_github(tmp_path: Path) -> None:
    (tmp_path / ".github").mkdir()
    (tmp_path / ".github" / "perfcheck.yml").write_text("workloads:\n  - {name: gh, entry: mlp}\n")
    assert load_config(None, tmp_path).workloads[0].name == "gh"
    (tmp_path / "perfcheck.yml").write_text("workloads:\n  - {name: root, entry: mlp}\n")
    assert load_config(None, tmp_path).workloads[0].name == "root"
    assert load_config(None, tmp_path).source == str(tmp_path / "perfcheck.yml")


def test_missing_explicit_config_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read config"):
        load_config(tmp_path / "nope.yml", None)


def test_an_empty_file_is_an_error_that_names_it(tmp_path: Path) -> None:
    (tmp_path / "perfcheck.yml").write_text("# nothing yet\n")
    with pytest.raises(ConfigError, match=r"perfcheck.yml: the file is empty; name your workloads"):
        load_config(None, tmp_path)


def test_no_file_anywhere_means_the_built_in_workload_and_says_where_settings_came_from(
    tmp_path: Path,
) -> None:
    from perfcheck.config import review_config

    base, head = tmp_path / "base", tmp_path / "head"
    base.mkdir()
    head.mkdir()
    config, origin = review_config(None, base, head)
    assert origin == "built-in" and config.workloads[0].name == "mlp-tiny"
    (head / "perfcheck.yml").write_text("workloads: [{name: a, entry: mlp}]\n")
    assert review_config(None, base, head)[1] == "head"
    (base / "perfcheck.yml").write_text("workloads: [{name: b, entry: mlp}]\n")
    config, origin = review_config(None, base, head)
    assert origin == "base" and config.workloads[0].name == "b"  # base is the gate once it has one


def test_hostile_yaml_is_a_config_error_not_code() -> None:
    from perfcheck.config import ConfigError, parse_config

    with pytest.raises(ConfigError):
        parse_config("workloads: !!python/object/apply:os.system ['touch /tmp/pwned']", "perfcheck.yml")
    # Billion laughs: each alias quadruples the one before; safe_load shares them, and the keys
    # are no settings.
    laughs = "a: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
        f"{chr(98 + i)}: &{chr(98 + i)} [*{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}]\n"
        for i in range(8)
    )
    with pytest.raises(ConfigError):
        parse_config(laughs, "perfcheck.yml")


def test_a_bare_off_is_off_where_yaml_would_read_false() -> None:
    assert parse_config("compile: {measure: off}\n", "perfcheck.yml").compile.measure == "off"
    with pytest.raises(ConfigError, match=r"compile\.measure: expected 'auto'"):
        parse_config("compile: {measure: true}\n", "perfcheck.yml")


def test_a_first_adoptions_config_is_the_head_commits_and_a_tree_that_differs_is_refused(
    tmp_path: Path,
) -> None:
    from conftest import git, git_commit

    from perfcheck.config import ConfigError, read_settings

    base, head = tmp_path / "base", tmp_path / "head"
    base.mkdir()
    head.mkdir()
    git(head, "init", "-q")
    committed = "workloads: [{name: a, entry: mlp-tiny}]\n"
    git_commit(head, "adopt", {"perfcheck.yml": committed})
    found = read_settings(None, base, head)
    assert (found.origin, found.head_text) == ("head", committed)
    assert found.config.source.endswith("perfcheck.yml (as committed)")
    (head / "perfcheck.yml").write_text("workloads: [{name: b, entry: mlp-tiny}]\n")
    with pytest.raises(ConfigError, match=r"perfcheck.yml: differs from the head commit's perfcheck.yml"):
        read_settings(None, base, head)
    # Outside Actions (the command line's choice) the config being written is the one tried.
    tried = read_settings(None, base, head, committed_only=False)
    assert tried.config.workloads[0].name == "b" and tried.origin == "head"
    git(head, "rm", "-q", "--cached", "perfcheck.yml")
    git(head, "commit", "-q", "-m", "untrack")
    with pytest.raises(ConfigError, match="not in the head commit"):
        read_settings(None, base, head)


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ("plugins: [os]", "plugins: not read from a pull request's own perfcheck.yml"),
        ("history: {path: ../x.sqlite}", "history: not read from"),
        ("acks: [{category: graph_break_added, reason: x}]", "acks: not read from"),
        ("budgets: {max_peak_memory_growth_mb: 113}", "budgets.max_peak_memory_growth_mb: expected at most"),
        ("profile: {min_change_pct: 50}", "profile.min_change_pct: expected at most 5"),
        ("timing: {confidence: 0.9}", "timing.confidence: expected at least 0.95"),
        ("matrix: {recompile: {severity: warning}}", "matrix.recompile.severity: expected error or stricter"),
        (
            "matrix: {export_ir_changed: {severity: info}}",
            "matrix.export_ir_changed.severity: expected warning",
        ),
    ],
)
def test_a_first_adoption_may_not_set_what_widens_the_gate(extra: str, message: str) -> None:
    from perfcheck.config import ConfigError, first_adoption_config

    with pytest.raises(ConfigError, match=f"^PR.yml: {message}"):
        first_adoption_config(f"workloads: [{{name: a, entry: mlp-tiny}}]\n{extra}\n", "PR.yml")


def test_a_first_adoption_may_be_stricter_than_the_defaults() -> None:
    from perfcheck.config import first_adoption_config

    text = "budgets: {max_throughput_regression_pct: 1}\ntiming: {confidence: 0.99}\n"
    text += "matrix: {export_ir_changed: {severity: error}, recompile: {causes: [our cache]}}\n"
    config = first_adoption_config(text, "PR.yml")
    assert config.budgets.max_throughput_regression_pct == 1 and config.timing.confidence == 0.99
    assert config.matrix["export_ir_changed"].severity == "error"  # stricter: applied


def test_what_a_workload_gets_beside_the_defaults_is_said_by_the_probes_descriptors() -> None:
    """amp where the workload runs under autocast (its descriptor's `asked_by`); custom_ops once
    the exported graph calls a custom op (its `follow_up`), only where the probes were left to
    the defaults and `custom_ops.auto` is on."""
    from perfcheck.config import follow_up_probes, planned_probes
    from perfcheck.core import probes
    from perfcheck.schema import ProbeResult

    config = parse_config(
        "workloads:\n  - {name: mixed, entry: m.py:build, amp: bf16}\n  - {name: plain, entry: m.py:build}\n",
        "p.yml",
    )
    mixed, plain = config.workloads
    planned = planned_probes(config.workloads, ())
    assert [p for w, p in planned if w is mixed] == ["timing", "compile", "export", "amp"]
    assert [p for w, p in planned if w is plain] == ["timing", "compile", "export"]
    assert follow_up_probes(config, plain, {"timing", "compile", "export"}, ()) == ("custom_ops",)
    assert follow_up_probes(config, plain, {"compile"}, ()) == ()  # no export to say
    assert follow_up_probes(config, plain, {"export"}, ("export",)) == ()  # --probes decides
    off = parse_config("workloads: [{name: plain, entry: m.py:build}]\ncustom_ops: {auto: false}\n", "p.yml")
    assert follow_up_probes(off, off.workloads[0], {"export"}, ()) == ()

    follow = probes.get("custom_ops").follow_up  # type: ignore[union-attr]
    assert follow is not None

    def exported(ops: dict[str, int], status: str = "ok") -> ProbeResult:
        return ProbeResult(
            probe="export", workload="plain", side="head", status=status, duration_s=1.0,  # type: ignore[arg-type]
            metrics={"graph_sha256": "ab", "op_counts": ops},
        )  # fmt: skip

    assert follow.called_for(config, [exported({"aten.addmm.default": 2, "mylib.scale.default": 1})])
    assert not follow.called_for(config, [exported({"aten.addmm.default": 2})])
    assert follow.called_for(config, [exported({}, status="failed")])  # a fake kernel may be why
