"""Each side's walls, compile caches and probe environment: what a probe process of one side
sees and where it writes (perfcheck/runner/process/sandbox.py builds the walls; this module says what
they hold). Orchestration and the paired timing both set sides up through it.
"""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from perfcheck.runner.process import sandbox
from perfcheck.runner.review_run import ReviewRun, SideSetup
from perfcheck.spec import ProbeSpec, Walls, side_files

if TYPE_CHECKING:
    pass


def side_caches(workdir: Path, workload: str) -> dict[str, Path]:
    """One compile cache per side and workload: the compile probe fills it with its cold compile,
    and the timing probe's processes start warm from it; a side never sees the other's."""
    return {side: workdir / "cache" / f"{side}-{workload}" for side in ("base", "head")}


def base_for_head(workdir: Path, workload: str) -> Path:
    """Head's own copy of base's compile cache, which head's processes see at base's cache's path
    (perfcheck/runner/process/sandbox.py ``moved``): entries of base's that head's cache got name base's
    folder (Triton's groups list absolute paths, Inductor writes beside a kernel it loaded), and head's
    code must write none of base's."""
    return workdir / "cache" / f"base-for-head-{workload}"


def copy_base_for_head(workdir: Path, workload: str) -> None:
    """A fresh copy of base's compile cache for head's processes (``base_for_head``)."""
    copy = base_for_head(workdir, workload)
    shutil.rmtree(copy, ignore_errors=True)
    merge_caches(copy, [side_caches(workdir, workload)["base"]])
    copy.mkdir(parents=True, exist_ok=True)


def sandboxed_walls(spec: ProbeSpec, workdir: Path, *writable: Path) -> Walls | None:
    """``spec.walls`` with the folders a process may write besides, and for head, its copy of
    base's cache shown where base's is, once the orchestrator made one."""
    if spec.walls is None:
        return None
    walls = spec.walls.with_writable(*writable)
    copy = base_for_head(workdir, spec.workload.name)
    if spec.side == "head" and copy.is_dir():
        walls = walls.with_moved(copy, side_caches(workdir, spec.workload.name)["base"])
    return walls


def merge_caches(into: Path, sources: Sequence[Path]) -> None:
    """Every file of each source into ``into``; a later source's file replaces an earlier's.

    Why the timing processes share one cache: Inductor autotunes some kernels on their first run
    and keeps the chosen config in the cache beside the kernel. Two cold compiles of identical
    code, made at the same time on one GPU, can choose differently, and every later process of
    that side inherits the choice: measured on the H200, an A/A Llama read -0.73 % device time
    (-0.78 ... -0.67) over 25 process pairs, from the first pair on. Entries are keyed by content,
    so in a merged cache identical kernels share one choice (base's) and code only head has keeps
    head's own. Files are copied, never hard-linked: a process that wrote into a linked file in
    place would change the source, and a source is another side's cache.
    """
    for source in sources:
        if not source.is_dir():
            continue
        for path in source.rglob("*"):  # never into a linked folder (rglob does not follow them)
            if path.is_dir() or path.is_symlink():
                continue
            dest = into / path.relative_to(source)
            _real_folders(into, dest.parent)
            dest.unlink(missing_ok=True)  # a link planted at the file's path goes, not its target
            shutil.copy2(path, dest, follow_symlinks=False)


def _real_folders(root: Path, folder: Path) -> None:
    """``folder`` and every folder between it and ``root``, made where missing, each a real folder:
    a link planted there (by PR code that wrote its own cache) is replaced, never written through."""
    root.mkdir(parents=True, exist_ok=True)
    current = root
    for part in folder.relative_to(root).parts:
        current = current / part
        if current.is_symlink() or (current.exists() and not current.is_dir()):
            current.unlink()
        current.mkdir(exist_ok=True)


# Set to a folder, every probe process of every review compiles into that one cache, warm after
# the first: for test suites and repeated local runs, where the cache is not what is measured.
# Cold-compile figures are then not cold, the sides share what they compiled, and compile latency
# is not measured (perfcheck/runner/latency/runs.py).
SHARED_CACHE_ENV = "PERFCHECK_COMPILE_CACHE"


TRACE_ENV = "TORCH_TRACE"


def probe_env(cache: Path, trace_dir: Path | None = None) -> dict[str, str]:
    """The environment of a probe process whose compile cache is ``cache`` (the shared one instead,
    where SHARED_CACHE_ENV names one). Where the user set TORCH_TRACE, torch's structured trace
    goes to ``trace_dir``, a folder the side's sandbox may write (its files folder), whatever
    folder TORCH_TRACE named: a sandboxed probe can write nowhere else, and the two sides must
    not write into one folder; a process given no ``trace_dir`` (a timing worker) makes none."""
    override = os.environ.get(SHARED_CACHE_ENV)
    if override:
        cache = Path(override)
    traced = {}
    if os.environ.get(TRACE_ENV) and trace_dir is not None:
        trace_dir.mkdir(parents=True, exist_ok=True)
        traced = {TRACE_ENV: str(trace_dir)}
    env = {k: v for k, v in os.environ.items() if k != TRACE_ENV}
    return {
        # In a shared cache Dynamo would record the shapes it saw and compile the next process
        # dynamic from the start; each process must compile as a fresh run of the code would. A
        # cache of the process's own has no record to read: set there too, so that every probe
        # process of an interpreter has one environment and one fork server
        # (perfcheck/runner/process/forkserver.py).
        "TORCH_DYNAMO_AUTOMATIC_DYNAMIC_LOCAL_PGO": "0",
        **env,
        "PYTHONUNBUFFERED": "1",
        # The tree is the PR's: it must not shadow perfcheck itself by sitting first on sys.path.
        "PYTHONSAFEPATH": "1",
        # Both sides hash alike: dict layout is one of the ways two runs of identical code differ.
        "PYTHONHASHSEED": "0",
        # A compiler cache of the probe's own keeps "cold compile" cold and the sides independent.
        "TORCHINDUCTOR_CACHE_DIR": str(cache / "inductor"),
        "TRITON_CACHE_DIR": str(cache / "triton"),
        **traced,
    }


def interpreter_folders(python: str) -> list[Path]:
    """Where an interpreter and what it imports live: its environment (a venv's root) and the
    installation it was made from, perfcheck's own source, and this interpreter's."""
    import perfcheck

    found = [Path(python).parent.parent, Path(os.path.realpath(python)).parent.parent]
    # The folder holding the perfcheck package (a checkout's root, or site-packages), also where
    # the package folder itself is a link.
    package = Path(perfcheck.__file__).parent
    found += [Path(sys.prefix), Path(sys.base_prefix), package.parent, package.resolve().parent]
    return found


def import_folders(python: str) -> list[Path]:
    """The folders a probe process's interpreter imports from besides its install: PYTHONPATH's
    (the probes inherit it), and where ``python`` is this interpreter, the path entries its site
    packages add (an editable install's ``.pth``). Not this process's first entry, which is the
    folder it was started from."""
    entries = [e for e in os.environ.get("PYTHONPATH", "").split(os.pathsep) if e]
    if os.path.realpath(python) == os.path.realpath(sys.executable):
        entries += sys.path[1:]
    return [Path(e).resolve() for e in dict.fromkeys(entries) if os.path.isabs(e) and os.path.isdir(e)]


def entry_folders(run: ReviewRun, tree: Path) -> list[Path]:
    """The folders of workload files a config names outside the tree (``../ci/bench.py:build``),
    which the side's processes must read."""
    root = tree.resolve()
    found = []
    for wl in run.workloads:
        target = wl.entry.rpartition(":")[0]
        if target.endswith(".py"):
            path = (root / target).resolve()
            if not path.is_relative_to(root):
                found.append(path.parent)
    return found


def side_walls(run: ReviewRun, side: SideSetup) -> Walls | None:
    """The sandbox of ``side``'s probe processes (None where the review runs without): the other
    side's tree, and every scratch and files folder of the review but its own, hidden (and from
    base every compile cache but its own: head reads base's, read-only); its
    own tree, the review's output folder, workload files outside the tree and the interpreters
    visible and read-only; its own scratch folder as /tmp; its files folder (a profile's trace)
    writable. Each process adds the caches it may write (``run_probe``, ``TimingWorker``)."""
    if not run.sandboxed:
        return None
    out = run.out_dir.resolve()
    workdir = out / "probes"
    other = run.head if side.side == "base" else run.base
    visible = [side.tree.resolve(), out, *interpreter_folders(side.python), *entry_folders(run, side.tree)]
    # Head's processes read base's compile caches (read-only): a kernel's cache entries name the
    # folder it was compiled in (Triton's groups list absolute paths), and identical code must
    # find base's kernels and autotuning choices (perfcheck/runner/timing/pairs.py ``pair_caches``). Nothing
    # of the caches head's processes write is seen by base's.
    caches = () if side.side == "head" else (workdir / "cache",)
    # The store of base's results: written by the orchestrator only, read by it only (reuse.py).
    stores = tuple(p.resolve() for p in (run.record_base, run.reuse_base) if p is not None)
    hidden = (other.tree.resolve(), *caches, workdir / "scratch", workdir / "files", *stores)
    # The folders the operator's environment imports from (PYTHONPATH, an editable install's
    # path entry), read-only, where they lie outside what the walls hide on purpose.
    visible += [
        p for p in import_folders(side.python) if not any(sandbox.holds(str(h), str(p)) for h in hidden)
    ]
    shared = os.environ.get(SHARED_CACHE_ENV)
    return Walls(
        scratch=str(workdir / "scratch" / side.side),
        hidden=tuple(str(p) for p in hidden),
        visible=tuple(dict.fromkeys(str(p) for p in visible)),
        # The one cache of SHARED_CACHE_ENV is every process's, both sides' (a test-only knob).
        writable=(str(side_files(workdir, side.side)), *((shared,) if shared else ())),
    )


MERGED_MARK = ".perfcheck-merged-from-base"  # in head's cache, once base's files are in it


def pair_caches(workdir: Path, workload: str, first: bool) -> dict[str, Path]:
    """The compile caches of the next pairs' processes: each side's own, which its compile probe
    (or, where nothing compiled the workload yet, ``first``, its first pair's cold compile)
    filled. After the first, base's files are copied over head's once, so identical code runs
    identical kernels with identical autotuning choices (``merge_caches`` says why). The caches
    stay where they were compiled, since entries name their folder; head's processes see base's
    read-only (``side_walls``), and nothing head's code writes reaches a
    base process: base's cache has only base's files, and copies share no inode."""
    own = side_caches(workdir, workload)
    merged = own["head"] / MERGED_MARK
    if not first and not merged.exists():
        merge_caches(own["head"], [own["base"]])
        own["head"].mkdir(parents=True, exist_ok=True)
        copy_base_for_head(workdir, workload)
        merged.touch()
    return own
