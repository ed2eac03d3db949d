"""The fast lane cannot grow a slow test: a test without the e2e mark that starts an interpreter,
perfcheck, torchrun, valgrind or a script fails, naming the mark (tests/conftest.py)."""

from __future__ import annotations

import subprocess
import sys

import pytest
from conftest import starts_a_slow_process


@pytest.mark.parametrize(
    "args",
    [
        [sys.executable, "-c", "pass"],
        ["python3", "-m", "perfcheck"],
        ["/usr/local/bin/perfcheck", "review"],
        ["torchrun", "--nproc-per-node", "2", "x.py"],
        ["valgrind", "--tool=callgrind", "python"],
        ["bash", "action/run.sh"],
        "python3 -c pass",
    ],
)
def test_what_the_fast_lane_may_not_start(args: object) -> None:
    assert starts_a_slow_process(args)


@pytest.mark.parametrize("args", [["git", "status"], ["actionlint", "x.yml"], "git log", []])
def test_what_it_may(args: object) -> None:
    assert not starts_a_slow_process(args)


def test_a_fast_lane_test_that_starts_python_fails_naming_the_mark() -> None:
    with pytest.raises(AssertionError, match=r"mark it @pytest\.mark\.e2e"):
        subprocess.run([sys.executable, "-c", "pass"], check=False)


def test_git_still_runs_in_the_fast_lane() -> None:
    done = subprocess.run(["git", "--version"], capture_output=True, text=True, check=True)
    assert done.stdout.startswith("git version")


@pytest.mark.e2e
def test_an_e2e_test_starts_what_it_needs() -> None:
    done = subprocess.run([sys.executable, "-c", "print(6 * 7)"], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "42"


class _Item:
    def __init__(self, *fixtures: str) -> None:
        self.fixturenames = list(fixtures)
        self.marks: list[pytest.MarkDecorator] = []

    def add_marker(self, mark: pytest.MarkDecorator) -> None:
        self.marks.append(mark)

    def get_closest_marker(self, name: str) -> pytest.MarkDecorator | None:
        return next((m for m in self.marks if m.name == name), None)


def test_a_test_that_runs_reviews_or_keeps_fork_servers_is_marked_e2e_and_runs_first() -> None:
    from conftest import pytest_collection_modifyitems

    items = [_Item("tmp_path", "github"), _Item("tmp_path", "review"), _Item("fork_servers")]
    pytest_collection_modifyitems(items)  # type: ignore[arg-type]
    # Marked, and run first (the fast tests fill the end of both workers' time).
    assert [i.fixturenames[-1] for i in items] == ["review", "fork_servers", "github"]
    assert [[m.name for m in i.marks] for i in items] == [["e2e"], ["e2e"], []]
