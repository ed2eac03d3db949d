"""The layout's contracts, read from the source so that a lazy import inside a function counts too:
the torch-free review core (core/) imports neither torch nor the GitHub side; the GitHub side
(bot/) imports neither torch nor the runner; the runner imports nothing of the GitHub side."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

# folder -> import prefixes its modules may not use
CONTRACTS = {
    "core": ("torch", "perfcheck.bot", "perfcheck.runner", "perfcheck.cli", "github"),
    "bot": ("torch", "perfcheck.runner"),
    "runner": ("perfcheck.bot", "github"),
}
# The shared contracts at the package root: every side imports them, so they import no side.
SHARED = ("schema.py", "config.py", "spec.py", "sweep_schema.py", "argtypes.py")


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
    files = sorted((ROOT / folder).rglob("*.py"))
    assert files, f"{folder}/ holds no modules"
    assert violations(files, CONTRACTS[folder]) == []


def test_the_shared_contracts_import_no_side_and_no_torch() -> None:
    files = [ROOT / "perfcheck" / name for name in SHARED]
    banned = ("torch", "perfcheck.bot", "perfcheck.runner", "perfcheck.cli", "github")
    assert violations(files, banned) == []


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


def test_subpackages_are_the_top_level_folders_under_the_name_they_import_as() -> None:
    # perfcheck/bot etc. are links, so Python, mypy and an editor all find one file per module.
    for name in ("bot", "core", "runner", "templates"):
        link = ROOT / "perfcheck" / name
        assert link.is_symlink() and link.resolve() == (ROOT / name).resolve(), name


def test_every_dependency_is_pinned_by_the_one_constraints_file() -> None:
    """The action, the images and CI install what was tested: each requirement of pyproject.toml
    (runtime and dev) has an exact pin in constraints.txt that satisfies it."""
    import tomllib
    from packaging.requirements import Requirement

    root = Path(__file__).resolve().parent.parent
    project = tomllib.loads((root / "pyproject.toml").read_text())["project"]
    pins = {}
    for line in (root / "constraints.txt").read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            name, _, version = line.partition("==")
            pins[name.strip().lower().replace("_", "-")] = version.strip()
    for text in [*project["dependencies"], *project["optional-dependencies"]["dev"]]:
        req = Requirement(text)
        name = req.name.lower().replace("_", "-")
        assert name in pins, f"{req.name} is not pinned in constraints.txt"
        assert req.specifier.contains(pins[name], prereleases=True), f"{req.name}=={pins[name]} breaks {text}"
    assert "torch" in pins  # the CPU venv's torch: Makefile and .ci/check-install read it from here
