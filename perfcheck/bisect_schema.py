"""The document `perfcheck bisect` writes (OUT/bisect.json): for each finding of the good → bad
review, the first commit that has it and the last that does not. Torch-free; versioned apart from
the review's result contract, like the sweep's (`perfcheck schema bisect` prints it).

In the workflow the probe job writes it (into its probes.json too), so the report side reads it as
untrusted data: every field is bounded here, and the report keeps only findings it found itself.
"""

from __future__ import annotations

from typing import Final, Literal

from pydantic import BaseModel, ConfigDict, Field

BISECT_SCHEMA_VERSION: Final = 1

Outcome = Literal["found", "ambiguous", "not_bisected", "present_at_good", "unfinished"]
# Bounds for a document read from another job: more than any real search produces.
MAX_ITEMS = 500
MAX_TEXT = 2000
MAX_COMMITS = 5000  # a longer range is not bisected (perfcheck.bisect says so)


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


class Commit(_Strict):
    sha: str = Field(pattern=r"^[0-9a-f]{40}$")
    subject: str = Field(max_length=MAX_TEXT)
    author: str = Field(max_length=MAX_TEXT)


class Skipped(_Strict):
    """A commit whose tree could not be probed (its workload does not build): skipped, as
    `git bisect skip` does."""

    sha: str = Field(pattern=r"^[0-9a-f]{40}$")
    workload: str = Field(max_length=MAX_TEXT)
    why: str = Field(max_length=MAX_TEXT)


class Located(_Strict):
    """One finding (or, for an IR change, one op of it) and where it came from."""

    key: str = Field(
        max_length=MAX_TEXT, description="the finding's identity: category, workload and what it is about"
    )
    label: str = Field(max_length=MAX_TEXT, description="what a reader is shown")
    category: str = Field(max_length=200)
    workload: str = Field(max_length=MAX_TEXT)
    probe: str = Field(max_length=200)
    outcome: Outcome = Field(
        description="found: first_bad is the commit; ambiguous: one of candidates (skipped commits "
        "between); present_at_good: the search's first commit has it already; unfinished: the time "
        "budget ran out between last_good and first_bad; not_bisected: a measured finding"
    )
    first_bad: Commit | None = Field(default=None, description="the first commit that has it")
    last_good: Commit | None = Field(default=None, description="the last commit before it that does not")
    candidates: list[Commit] = Field(
        default=[],
        max_length=MAX_ITEMS,
        description="when skipped commits hide which one: every commit it may be",
    )
    probe_runs: int = Field(default=0, ge=0, description="probe runs spent narrowing this one down")
    note: str | None = Field(default=None, max_length=MAX_TEXT)


class BisectDoc(_Strict):
    schema_version: Literal[1] = BISECT_SCHEMA_VERSION
    good: Commit
    bad: Commit
    commits: int = Field(ge=1, description="first-parent commits after good, bad included")
    span: list[Commit] = Field(
        default=[],
        max_length=MAX_COMMITS + 1,
        description="the range searched: good, then each first-parent commit after it up to bad. "
        "Every commit an entry names must be one of these, as given here, in an order the search can "
        "have found (the report refuses a document that is not)",
    )
    probes: list[str] = Field(max_length=100)
    findings: list[Located] = Field(max_length=MAX_ITEMS)
    skipped: list[Skipped] = Field(default=[], max_length=MAX_ITEMS)
    probe_runs: int = Field(ge=0, description="probe runs in all, the good → bad review's not counted")
    budget_s: float | None = Field(
        default=None, gt=0, description="the time the search was given (the workflow's bisect.budget_s)"
    )
