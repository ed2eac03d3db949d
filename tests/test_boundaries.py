"""The layout's contracts, read from the source so that a lazy import inside a function counts too:
the torch-free review core (perfcheck/core/) imports neither torch nor the GitHub side; the GitHub side
(perfcheck/bot/) imports neither torch nor the runner; the runner imports nothing of the GitHub side."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

# The command line: perfcheck/cli/, its entry point and a module per command family.
COMMAND_LINE = ("perfcheck.cli",)
# folder -> import prefixes its modules may not use
CONTRACTS = {
    "core": ("torch", "perfcheck.bot", "perfcheck.runner", *COMMAND_LINE, "github"),
    "bot": ("torch", "perfcheck.runner"),
    "runner": ("perfcheck.bot", "github"),
}
# The shared contracts at the package root: every side imports them, so they import no side.
SHARED = (
    "schema.py",
    "measures.py",
    "vocabulary.py",
    "config.py",
    "settings.py",
    "spec.py",
    "sweep_schema.py",
)


def imported_modules(path: Path) -> list[tuple[int, str]]:
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    out: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.append((node.lineno, node.module))
            # `from perfcheck import bot` names a subpackage the way `import perfcheck.bot` does
            out += [(node.lineno, f"{node.module}.{a.name}") for a in node.names]
    return out


def violations(files: list[Path], banned: tuple[str, ...]) -> list[str]:
    bad = []
    for path in files:
        for line, module in imported_modules(path):
            if any(module == b or module.startswith(b + ".") for b in banned):
                where = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path.name
                bad.append(f"{where}:{line} imports {module}")
    return bad


@pytest.mark.parametrize("folder", sorted(CONTRACTS))
def test_each_side_imports_only_what_its_contract_allows(folder: str) -> None:
    files = sorted((ROOT / "perfcheck" / folder).rglob("*.py"))
    assert files, f"{folder}/ holds no modules"
    assert violations(files, CONTRACTS[folder]) == []


def test_the_shared_contracts_import_no_side_and_no_torch() -> None:
    files = [ROOT / "perfcheck" / name for name in SHARED]
    banned = ("torch", "perfcheck.bot", "perfcheck.runner", *COMMAND_LINE, "github")
    assert violations(files, banned) == []


def test_the_vocabulary_imports_nothing_of_perfcheck() -> None:
    # The contract checks documents against it and the probe registry fills it: it lies below
    # both, so that neither has to import the other to reach it (tests/test_import_loops.py).
    assert violations([ROOT / "perfcheck" / "vocabulary.py"], ("perfcheck",)) == []


def test_the_config_and_the_plugins_do_not_import_each_other() -> None:
    # The config loads the plugins it names (passing the names a probe may not take); the plugin
    # loader reads nothing of the config.
    assert violations([ROOT / "perfcheck" / "plugins.py"], ("perfcheck.config",)) == []


def test_the_contract_check_sees_a_lazy_import(tmp_path: Path) -> None:
    sneaky = tmp_path / "sneaky.py"
    sneaky.write_text("def f():\n    from perfcheck.bot import publish\n    import torch.nn\n")
    assert violations([sneaky], CONTRACTS["core"]) == [
        "sneaky.py:2 imports perfcheck.bot",
        "sneaky.py:2 imports perfcheck.bot.publish",
        "sneaky.py:3 imports torch.nn",
    ]


def test_every_module_has_one_path() -> None:
    # The files lie where their import names say: no link under perfcheck/ (a reader or a grep
    # that does not follow links would see folders with no arrows between their files), and no
    # Python module at the top-level entry-point folders.
    package = ROOT / "perfcheck"
    assert not [p for p in package.rglob("*") if p.is_symlink()]
    for name in ("bot", "runner", "templates"):
        assert (package / name).is_dir() and not (package / name).is_symlink(), name
        assert not list((ROOT / name).rglob("*.py")), name


@pytest.mark.e2e
def test_every_torch_free_module_imports_on_its_own() -> None:
    # A tool, a plugin or a test may import any module first: no import cycle may depend on which
    # module the process happened to import before. Each child is forked from an interpreter that
    # has imported nothing of perfcheck, so it imports its module as a fresh process would; the
    # parent has imported the third-party libraries, whose order cannot matter to perfcheck's,
    # so that each child does not pay for them again.
    package = ROOT / "perfcheck"
    modules = sorted(
        ".".join(p.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")
        for p in package.rglob("*.py")
        if "runner" not in p.relative_to(package).parts and p.name != "__main__.py"
    )
    script = (
        "import importlib, os, sys, traceback\n"
        "import github, jinja2, jinja2.sandbox, pydantic, requests, yaml\n"
        "failed = []\n"
        "for name in sys.argv[1:]:\n"
        "    pid = os.fork()\n"
        "    if pid == 0:\n"
        "        try:\n"
        "            importlib.import_module(name)\n"
        "        except BaseException:\n"
        "            print(name, traceback.format_exc().splitlines()[-1], flush=True)\n"
        "            os._exit(1)\n"
        "        os._exit(0)\n"
        "    os.waitpid(pid, 0)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script, *modules], capture_output=True, text=True, cwd=ROOT, timeout=600
    )
    assert len(modules) > 50
    assert done.returncode == 0 and done.stdout == "", done.stdout + done.stderr
