"""Setup checked before any probe runs: each workload's entry, file and function, the device, and
each side's interpreter. A mistake here is bad input (exit 2) named in one line, not a probe that
crashes a minute later and reads as a regression.

Static where it can be (the workload's file is read with ``ast``, never imported: importing runs
the tree's code, which is the probes' job); the interpreters are asked in a short subprocess only
when they are not this one, or when the device is CUDA. A check that only one side fails is left to
the probes: a head that deletes its workload's function is a finding, not a setup mistake.
"""

from __future__ import annotations

import ast
import importlib.machinery
import importlib.util
import json
import os
import subprocess
import sys
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from perfcheck import __version__
from perfcheck.runner.process import sandbox
from perfcheck.runner.process.loader import import_roots
from perfcheck.runner.process.sides import SHARED_CACHE_ENV
from perfcheck.runner.workloads import BUILTIN_WORKLOADS
from perfcheck.settings import WorkloadConfig

# PYTHONSAFEPATH (3.11): a fresh probe process's launcher imports nothing from its working
# directory, the PR's tree, before it enters the sandbox (issue 45).
MIN_PYTHON = (3, 11)


class SetupError(ValueError):
    """The review cannot start as set up; the message names what is wrong (the CLI exits 2)."""


def _module_level(body: list[ast.stmt]) -> Iterable[ast.stmt]:
    """Statements that run at a module's top level, those inside if/try/with/for blocks too."""
    for node in body:
        yield node
        if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            for field in ("body", "orelse", "finalbody"):
                yield from _module_level(getattr(node, field, []) or [])
            for handler in getattr(node, "handlers", []) or []:
                yield from _module_level(handler.body)


def _binds(node: ast.stmt, name: str) -> bool | None:
    if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
        return True if node.name == name else (None if node.name == "__getattr__" else False)
    if isinstance(node, ast.Import | ast.ImportFrom):
        if any(a.name == "*" for a in node.names):
            return None
        return any((a.asname or a.name.split(".")[0]) == name for a in node.names)
    targets: list[ast.expr] = []
    if isinstance(node, ast.Assign):
        targets = node.targets
    elif isinstance(node, ast.AnnAssign | ast.AugAssign):
        targets = [node.target]
    return any(isinstance(n, ast.Name) and n.id == name for t in targets for n in ast.walk(t))


def _defines(source: str, name: str) -> bool | None:
    """Whether a module's top level binds ``name``; None when that cannot be told without running
    it (a syntax error, which the probes report with its line; ``import *``; ``__getattr__``)."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return None
    unknown = False
    for node in _module_level(tree.body):
        bound = _binds(node, name)
        if bound:
            return True
        unknown = unknown or bound is None
    return None if unknown else False


def _file_entry(
    wl: WorkloadConfig, where: str, target: str, func: str, trees: dict[str, Path], same_interpreter: bool
) -> None:
    found: dict[str, Path] = {}
    for side, tree in trees.items():
        path = (tree / target).resolve()  # outside the tree (absolute, or ../): imported against each side
        if path.is_file():
            found[side] = path
    if not found:
        inside = all((tree / target).resolve().is_relative_to(tree.resolve()) for tree in trees.values())
        outside = (trees["base"] / target).resolve()
        where_looked = f"in base ({trees['base']}) or head" if inside else f"at {outside}"
        raise SetupError(f"{where}: entry {wl.entry!r}: no file {target} {where_looked}")
    answers = {
        side: _defines(path.read_text(encoding="utf-8", errors="replace"), func)
        for side, path in found.items()
    }
    if answers and all(a is False for a in answers.values()):
        sides = " and ".join(answers)
        raise SetupError(f"{where}: entry {wl.entry!r}: {target} defines no {func!r} (on {sides})")
    if same_interpreter:
        _imports_found(wl, where, target, found, trees)


def _unguarded_imports(source: str) -> list[tuple[str, int]]:
    """The top-level modules a file imports at its top level outside any ``try`` (an import a
    ``try`` guards is optional), with their lines; none where the file changes ``sys.path`` (what
    it imports may come from where it points) or does not parse."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return []
    if "sys.path" in source:
        return []
    out: list[tuple[str, int]] = []

    def walk(body: list[ast.stmt]) -> None:
        for node in body:
            if isinstance(node, ast.Import):
                out.extend((a.name.split(".")[0], node.lineno) for a in node.names)
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                out.append((node.module.split(".")[0], node.lineno))
            elif isinstance(node, ast.If | ast.With):
                walk(node.body)
                walk(getattr(node, "orelse", []) or [])

    walk(tree.body)
    return [(name, line) for name, line in out if name != "__future__"]


def _installed(name: str, roots: list[Path]) -> bool:
    """Whether top-level module ``name`` is found in ``roots`` or by this interpreter (the finders
    only: finding a top-level module runs none of its code)."""
    if name in sys.builtin_module_names or name in sys.modules:
        return True
    if importlib.machinery.PathFinder.find_spec(name, [str(r) for r in roots]) is not None:
        return True
    return importlib.util.find_spec(name) is not None


def _imports_found(
    wl: WorkloadConfig, where: str, target: str, found: dict[str, Path], trees: dict[str, Path]
) -> None:
    """A module the entry file imports at its top level that neither side can find, told before
    any probe: nothing of the workload could be measured (a missing dependency, or a misspelt
    one). On one side only, the probes run and say so (perfcheck/core/setup_faults.py)."""
    missing: dict[str, list[tuple[str, int]]] = {}
    # The probes' own import path: the tree's roots, the entry's folder and the environment's
    # PYTHONPATH (which their interpreter reads, whatever this process read at its start).
    extra = [Path(p) for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    for side, path in found.items():
        roots = [*import_roots(trees[side]), path.parent, *extra]
        imports = _unguarded_imports(path.read_text(encoding="utf-8", errors="replace"))
        missing[side] = [(name, line) for name, line in imports if not _installed(name, roots)]
    if len(found) < len(trees) or not all(missing.values()):
        return
    names = {name for name, _ in missing["base"]} & {name for name, _ in missing["head"]}
    if names:
        name, line = next((n, ln) for n, ln in missing["head"] if n in names)
        raise SetupError(
            f"{where}: entry {wl.entry!r}: {target}:{line} imports {name!r}, which is not installed for "
            f"{sys.executable} (on base and head alike): install it where the probes run"
        )


def _module_entry(wl: WorkloadConfig, where: str, target: str, trees: dict[str, Path]) -> None:
    top = target.split(".")[0]
    for tree in trees.values():
        for root in import_roots(tree):
            if (root / top).is_dir() or (root / f"{top}.py").is_file():
                return
    if importlib.util.find_spec(top) is None:  # the top package only: finding it imports nothing
        raise SetupError(
            f"{where}: entry {wl.entry!r}: no module {top!r} in base, head or this interpreter's packages"
        )


def check_workloads(
    workloads: Iterable[WorkloadConfig], source: str, base: Path, head: Path, same_interpreter: bool = True
) -> None:
    """Each workload's entry names a built-in, or a file and function one of the trees has; and,
    where the probes run under this interpreter (``same_interpreter``), no module the entry file
    imports at its top level is missing on both sides."""
    trees = {"base": base, "head": head}
    for wl in workloads:
        where = f"{source}: workload {wl.name!r}"
        if wl.entry in BUILTIN_WORKLOADS:
            continue
        target, sep, func = wl.entry.rpartition(":")
        if not sep:
            raise SetupError(
                f"{where}: entry {wl.entry!r}: expected a built-in name ({', '.join(BUILTIN_WORKLOADS)}), "
                "path/to/file.py:function or package.module:function"
            )
        if target.endswith(".py") or "/" in target:
            _file_entry(wl, where, target, func, trees, same_interpreter)
        else:
            _module_entry(wl, where, target, trees)


_ASK = (
    "import json, sys\n"
    "out = {'python': sys.version.split()[0]}\n"
    "try:\n    import perfcheck; out['perfcheck'] = perfcheck.__version__\n"
    "except Exception as e: out['perfcheck_error'] = f'{type(e).__name__}: {e}'\n"
    "try:\n    import torch; out['torch'] = torch.__version__; out['cuda'] = torch.cuda.is_available()\n"
    "except Exception as e: out['torch_error'] = f'{type(e).__name__}: {e}'\n"
    "print(json.dumps(out))\n"
)


def check_compile_measure(measure: str, source: str, device: str, have_valgrind: bool) -> None:
    """``compile.measure: callgrind`` where it cannot count: refused before anything runs, rather than
    a review that silently measures something else (``auto`` falls back and says so)."""
    if measure != "callgrind":
        return
    if not have_valgrind:
        raise SetupError(
            f"{source}: compile.measure: callgrind needs valgrind, which is not on PATH "
            "(install it, or use auto or wall)"
        )
    if device != "cpu":
        raise SetupError(
            f"{source}: compile.measure: callgrind counts CPU compiles only; "
            f"with --device {device} use auto or wall"
        )


def check_interpreter(python: str, flag: str, device: str) -> None:
    """``python`` runs, imports this perfcheck and torch, and sees a GPU when the device is CUDA."""
    if python == sys.executable and device != "cuda":
        return  # this very interpreter: it runs perfcheck now, and the probes import torch first thing
    try:
        done = subprocess.run(
            [python, "-c", _ASK],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
            stdin=subprocess.DEVNULL,
        )
    except (OSError, subprocess.TimeoutExpired) as err:
        raise SetupError(f"{flag} {python}: cannot run it ({err})") from None
    try:
        found = json.loads(done.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        last = (done.stderr.strip().splitlines() or ["no output"])[-1][:300]
        raise SetupError(f"{flag} {python}: not a Python interpreter that runs ({last})") from None
    version = tuple(int(x) for x in str(found.get("python", "0")).split(".")[:2] if x.isdigit())
    if version < MIN_PYTHON:
        raise SetupError(
            f"{flag} {python}: Python {found.get('python')}; the probes need "
            f"{'.'.join(map(str, MIN_PYTHON))} or later, whose PYTHONSAFEPATH keeps a module of the "
            "PR's tree from being imported before the probe process is sandboxed"
        )
    if "perfcheck_error" in found:
        raise SetupError(
            f"{flag} {python}: cannot import perfcheck ({found['perfcheck_error'][:200]}); the probes run "
            f"perfcheck's own workers under it, so install perfcheck {__version__} into that environment"
        )
    if found.get("perfcheck") != __version__:
        raise SetupError(
            f"{flag} {python}: has perfcheck {found.get('perfcheck')}, this is {__version__}; the probes "
            "speak this version's protocol, so install the same one there"
        )
    if "torch_error" in found:
        raise SetupError(f"{flag} {python}: cannot import torch ({found['torch_error'][:200]})")
    if device == "cuda" and not found.get("cuda"):
        raise SetupError(
            f"--device cuda: torch {found.get('torch')} under {python} sees no CUDA device "
            "(a CPU build of torch, or no GPU on this machine); use --device cpu"
        )


# What a probe process's interpreter finds: its import path's folders and the top-level modules of
# the workloads' ``package.module`` entries. Standard library only; it imports nothing of theirs.
_SEES = (
    "import importlib.util, json, os, sys\n"
    "tops = json.loads(sys.argv[1])\n"
    "def found(t):\n"
    "    try:\n        return importlib.util.find_spec(t) is not None\n"
    "    except (ImportError, ValueError):\n        return False\n"
    "print(json.dumps({'path': [p for p in sys.path if p and os.path.isdir(p)], "
    "'found': {t: found(t) for t in tops}}))\n"
)


def _sees(argv: list[str], cwd: Path, env: Mapping[str, str], flag: str) -> dict[str, Any]:
    """What ``_SEES`` printed, run as ``argv``."""
    try:
        done = subprocess.run(
            argv, capture_output=True, text=True, cwd=cwd, env=dict(env), timeout=120, check=False,
            stdin=subprocess.DEVNULL,
        )  # fmt: skip
    except (OSError, subprocess.TimeoutExpired) as err:
        raise SetupError(f"{flag}: the import check could not run ({err})") from None
    try:
        seen = json.loads(done.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        seen = None
    if not isinstance(seen, dict):
        last = (done.stderr.strip().splitlines() or ["no output"])[-1][:300]
        raise SetupError(f"{flag}: the import check could not run ({last})")
    return seen


def hidden_reason(path: str, hidden: Iterable[str]) -> str:
    """Why the sandbox hides ``path``, in words: the folder that covers it on purpose (the other
    side's tree, the review's caches), else /tmp, which each side has of its own."""
    covering = max((h for h in hidden if sandbox.holds(h, path)), key=len, default=None)
    if covering is not None:
        return f"it lies in {covering}, which the sandbox hides"
    if sandbox.holds("/tmp", path):
        return "it lies under /tmp, and each side's sandbox has a /tmp of its own"
    return "the sandbox does not show it"


def _counterpart(folder: str, other_tree: Path, tree: Path) -> str | None:
    """``folder``'s place in ``tree`` where it lies in ``other_tree`` (each side's ``src``)."""
    path = Path(folder)
    return (
        str(tree.resolve() / path.relative_to(other_tree.resolve()))
        if path.is_relative_to(other_tree.resolve())
        else None
    )


def check_sandboxed_imports(
    python: str,
    flag: str,
    tree: Path,
    other_tree: Path,
    walls_json: str,
    env: Mapping[str, str],
    workloads: Iterable[WorkloadConfig],
) -> None:
    """The probes' view of imports, checked before any probe: the interpreter run as a probe is
    (its environment, the side's tree as working directory), once outside and once behind the
    side's walls. A folder on its import path, or a workload's top-level module, that it finds
    outside and not inside is hidden by the sandbox (a PYTHONPATH entry or an editable install
    under /tmp, say): every probe would fail with 'No module named …', so it is bad input, named.
    A folder of the other side's tree is the side's own where its counterpart in this side's tree
    is on the path too (PYTHONPATH naming each side's ``src``): each side sees its own."""
    tops = sorted(
        {
            target.split(".")[0]
            for wl in workloads
            if wl.entry not in BUILTIN_WORKLOADS
            and (target := wl.entry.rpartition(":")[0])
            and not target.endswith(".py")
            and "/" not in target
        }
    )
    ask = [python, "-c", _SEES, json.dumps(tops)]
    outside = _sees(ask, tree, env, flag)
    inside = _sees(sandbox.command(walls_json, ask), tree, env, flag)
    hidden = json.loads(walls_json).get("hidden", [])
    seen = set(inside.get("path", []))
    for folder in outside.get("path", []):
        if folder not in seen and _counterpart(folder, other_tree, tree) not in seen:
            raise SetupError(
                f"{flag}: {folder} is on the probes' import path, but {hidden_reason(folder, hidden)}: "
                "every probe of this side would fail to import from it (put it outside both trees "
                "and the review's output folder)"
            )
    found_inside = inside.get("found", {})
    for top, ok in outside.get("found", {}).items():
        if ok and not found_inside.get(top):
            raise SetupError(
                f"{flag}: module {top!r} imports outside the sandbox but not inside: the folder it is "
                "installed from is hidden (an editable install under /tmp, say; install it elsewhere)"
            )


def sandboxed(env: Mapping[str, str], unavailable: Callable[[], str | None]) -> tuple[bool, str | None]:
    """Whether the probes run in per-side sandboxes (perfcheck/runner/process/sandbox.py), and what to warn
    about.

    In GitHub Actions a review without them is refused: PR code would run with the rights of
    everything it is compared against, and a required check it can pass by rewriting base is no
    check. Elsewhere (a developer's machine, a macOS laptop) the review runs and says it is not
    isolated. ``PERFCHECK_SANDBOX=0`` turns them off where the operator says so, and a run in
    Actions still says what that means. ``PERFCHECK_COMPILE_CACHE``, one cache every process of
    both sides writes, is a test-only knob: refused in Actions."""
    actions = env.get("GITHUB_ACTIONS") == "true"
    if actions and env.get(SHARED_CACHE_ENV):
        raise SetupError(
            f"{SHARED_CACHE_ENV} is set: one compile cache that both sides' processes write is for "
            "perfcheck's own tests, not a review in GitHub Actions (unset it)"
        )
    if env.get(sandbox.DISABLE_ENV) == "0":
        return False, (
            f"{sandbox.DISABLE_ENV}=0: the sides run without sandboxes, so head's code can change "
            "what base measures"
        )
    why = unavailable()
    if why is None:
        return True, None
    if actions:
        raise SetupError(
            f"the probes need a sandbox per side and this runner cannot make one ({why}); it needs "
            "unprivileged user namespaces (docs/security.md: 'What a self-hosted runner needs'), or set "
            f"{sandbox.DISABLE_ENV}=0 to run PR code unisolated"
        )
    return False, f"no sandbox on this machine ({why}): the sides run unisolated"
