"""Shared helpers: small base/head trees written by the tests themselves, and a review runner."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from fakegithub.fixtures import fake_github  # noqa: F401  (the local GitHub, for any test that asks)

from perfcheck.config import Config, parse_config
from perfcheck.core import probes as probe_registry
from perfcheck.review import ReviewRequest, run
from perfcheck.runner.process.forkserver import ForkServers
from perfcheck.runner.process.sides import SHARED_CACHE_ENV
from perfcheck.schema import Review

# The cores this test session may use, before an xdist worker keeps to one of them.
SESSION_CPUS = sorted(os.sched_getaffinity(0))


def pytest_configure(config: pytest.Config) -> None:
    """One compile cache for every probe of the session (xdist's workers inherit it): no test here
    measures what a cold compile costs, and Inductor's C++ builds are most of a CPU compile. Set
    PERFCHECK_COMPILE_CACHE yourself to keep one between runs, or to '' to compile cold."""
    workerinput = getattr(config, "workerinput", None)
    if SHARED_CACHE_ENV not in os.environ and workerinput is None:
        folder = tempfile.mkdtemp(prefix="perfcheck-test-compile-cache-")
        os.environ[SHARED_CACHE_ENV] = folder
        config.add_cleanup(lambda: shutil.rmtree(folder, ignore_errors=True))
    if workerinput is not None:
        _keep_to_one_core(str(workerinput["workerid"]), int(workerinput["workercount"]))


# The fixtures whose tests run real reviews: a test that asks for one is in the end-to-end lane.
E2E_FIXTURES = frozenset({"review", "fork_servers"})
# What a fast-lane test may not start: an interpreter (torch's import alone is seconds), perfcheck,
# torchrun, valgrind, or a shell script (the action's scripts start perfcheck in turn).
_E2E_PROGRAMS = ("python", "perfcheck", "torchrun", "valgrind", "bash", "sh")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if E2E_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.e2e)
    # The end-to-end lane first, each module's tests still in order: its tests take seconds to
    # minutes, the fast lane's milliseconds, so the fast tests left at the end keep both xdist
    # workers busy until the last slow test ends, instead of one waiting on a slow test met last.
    items.sort(key=lambda item: item.get_closest_marker("e2e") is None)


def starts_a_slow_process(args: object) -> bool:
    """Whether a Popen's ``args`` start one of ``_E2E_PROGRAMS`` (git, actionlint and the like are
    quick and stay allowed in the fast lane)."""
    if isinstance(args, (str, bytes, os.PathLike)):
        words = os.fsdecode(args).split()  # a shell line or a lone program
    else:
        words = [os.fsdecode(a) for a in list(args)[:1]]  # type: ignore[call-overload]
    program = os.path.basename(words[0]) if words else ""
    return program.startswith(_E2E_PROGRAMS) or program == os.path.basename(sys.executable)


@pytest.fixture(autouse=True)
def _fast_lane_starts_no_process(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """A test not marked e2e that starts python, perfcheck, torchrun, valgrind or a script fails at
    once, naming the mark it lacks: the fast lane stays fast because it cannot grow a slow test."""
    if request.node.get_closest_marker("e2e") is not None:
        return
    popen_init = subprocess.Popen.__init__

    def guarded(self: subprocess.Popen[bytes], args: object, *rest: object, **kwargs: object) -> None:
        if starts_a_slow_process(args):
            raise AssertionError(
                f"{request.node.nodeid} starts {args!r}: mark it @pytest.mark.e2e (the end-to-end lane)"
            )
        popen_init(self, args, *rest, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(subprocess.Popen, "__init__", guarded)


def _keep_to_one_core(worker: str, workers: int) -> None:
    """Under pytest-xdist with no more workers than cores, each worker and everything it starts
    keeps to a core of its own. The tests that read time (the timing gate's pairs, a profiled step,
    how long the App server takes to answer) then share their core with nothing, however busy the
    other workers keep the rest of the machine, and torch in a probe starts one intra-op thread
    instead of one per core, each fighting the other workers' for the same cores."""
    if workers > len(SESSION_CPUS):
        return  # more workers than cores: they share, and what reads time reads a shared core
    os.sched_setaffinity(0, {SESSION_CPUS[int(worker.removeprefix("gw"))]})


REPO = Path(__file__).resolve().parent.parent
DEMO = REPO / "examples" / "demo"

# A tiny classifier; tests splice one line of "the PR's change" into forward.
MODEL = """\
import torch
from torch import nn


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(16, 32)
        self.fc2 = nn.Linear(32, 4)
        self.calls = 0

    def forward(self, x):
        h = torch.relu(self.fc1(x))
        {change}
        return self.fc2(h)


def build(device):
    gen = torch.Generator().manual_seed(0)
    return Net().to(device), (torch.randn(8, 16, generator=gen).to(device),)
"""

FAST_CONFIG = """
workloads:
  - name: net
    entry: model.py:build
    timeout_s: {timeout}
compile:
  backend: aot_eager
{extra}
"""


def write_tree(root: Path, files: dict[str, str]) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    for name, body in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(body))
    return root


def model_tree(root: Path, change: str = "pass") -> Path:
    return write_tree(root, {"model.py": MODEL.replace("{change}", change)})


def fast_config(extra: str = "", timeout: float = 300) -> Config:
    """The tests' config: aot_eager, and compile latency off unless ``extra`` says how to measure it
    (``  measure: wall``): its cache-cold compiles, three a side, are most of a small review's
    time, and they have tests of their own (test_compile_latency.py, test_users_path.py). ``extra``
    goes on inside the ``compile:`` section, so it may add to it or start sections of its own."""
    if "measure:" not in extra:
        extra = "  measure: 'off'\n" + extra
    return parse_config(FAST_CONFIG.format(extra=extra, timeout=timeout), "test-config.yml")


ReviewFn = Callable[..., Review]


@pytest.fixture(scope="session")
def fork_servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ForkServers]:
    """One set of fork servers for an xdist worker's reviews, as a process running several reviews
    would keep (perfcheck/runner/process/forkserver.py): torch is imported once per environment a test
    asks for (a server per interpreter and environment, at most four idle), not once per review or
    per module. A test that ends a server, or needs a review's own, runs without this fixture."""
    with ForkServers(tmp_path_factory.mktemp("forkservers")) as servers:
        yield servers


@pytest.fixture
def review(tmp_path: Path, fork_servers: ForkServers) -> ReviewFn:
    """Run a real review (real subprocesses, real torch) and return the validated result."""

    def _review(
        base: Path,
        head: Path,
        config: Config | None = None,
        probes: tuple[str, ...] = (),
        jobs: int | None = None,
    ) -> Review:
        result, comment = run(
            ReviewRequest(
                base=base,
                head=head,
                config=config or fast_config(),
                out_dir=tmp_path / "out",
                probes=probes,
                jobs=jobs,
            ),
            fork_servers,
        )
        assert comment.startswith("<!-- perfcheck:review -->")
        # Every finding is of a category its probe says it raises (ProbeKind.raises), which is
        # what the matrix's per-probe causes and verify commands are checked against.
        undeclared = [
            (f.probe, f.category)
            for f in result.findings
            if (kind := probe_registry.get(f.probe)) is not None and f.category not in kind.raised()
        ]
        assert not undeclared, f"findings of categories their probe does not declare: {undeclared}"
        return result

    return _review


@pytest.fixture
def registries(monkeypatch: pytest.MonkeyPatch) -> None:
    """Whatever a test registers in this process (a plugin a config names, say) is gone after it:
    the other tests of its xdist worker see the built-in probes and categories only, whatever
    order they run in."""
    from perfcheck import vocabulary
    from perfcheck.core import matrix, probes

    monkeypatch.setattr(probes, "_REGISTRY", dict(probes._REGISTRY))
    monkeypatch.setattr(probes, "_BUILT_IN", list(probes._BUILT_IN))
    monkeypatch.setattr(vocabulary, "_CATEGORIES", list(vocabulary._CATEGORIES))
    monkeypatch.setattr(vocabulary, "_METRICS", dict(vocabulary._METRICS))
    matrix.known()  # the built-in probes' entries, validated before they are copied
    monkeypatch.setattr(matrix, "_PROBES_OWN", dict(matrix._PROBES_OWN))
    monkeypatch.syspath_prepend(str(REPO / "tests"))  # where tests/toyplugin is


def perfcheck_cli(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    """The real command in a fresh process, as a user runs it."""
    return subprocess.run(
        [sys.executable, "-m", "perfcheck", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        timeout=600,
        check=False,
    )


def git(repo: Path, *args: str) -> str:
    """git in ``repo`` as one author, Ada, whatever the machine's git config says."""
    env = {"GIT_AUTHOR_NAME": "Ada", "GIT_AUTHOR_EMAIL": "ada@example.com", "GIT_COMMITTER_NAME": "Ada"}
    env |= {"GIT_COMMITTER_EMAIL": "ada@example.com", "HOME": str(repo), "PATH": "/usr/bin:/bin"}
    done = subprocess.run(
        ["git", "-C", str(repo), *args], capture_output=True, text=True, env=env, check=True
    )
    return done.stdout.strip()


def git_commit(repo: Path, subject: str, files: dict[str, str]) -> str:
    """Write ``files`` into ``repo``, commit them all, and return the new commit's SHA."""
    for name, body in files.items():
        (repo / name).write_text(body)
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", subject)
    return git(repo, "rev-parse", "HEAD")
