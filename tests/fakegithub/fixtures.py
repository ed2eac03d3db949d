"""The `fake_github` pytest fixture: a started FakeGitHub that fails the test on any API violation."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from .server import FakeGitHub


@pytest.fixture
def fake_github() -> Iterator[FakeGitHub]:
    with FakeGitHub() as fake:
        yield fake
    # Checked after the test body, so a test that provokes violations on purpose can clear them first.
    violations = "\n".join(fake.violations)
    assert fake.violations == [], f"requests or answers that break GitHub's API description:\n{violations}"
