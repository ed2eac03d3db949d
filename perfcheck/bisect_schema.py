"""The document `perfcheck bisect` writes (OUT/bisect.json): for each finding of the good → bad
review, the first commit that has it and the last that does not. Torch-free; versioned apart from
the review's result contract, like the sweep's (`perfcheck schema bisect` prints it).
"""

from __future__ import annotations

from typing import Final, Literal

from pydantic import BaseModel, ConfigDict, Field

BISECT_SCHEMA_VERSION: Final = 1

Outcome = Literal["found", "ambiguous", "not_bisected"]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


class Commit(_Strict):
    sha: str = Field(pattern=r"^[0-9a-f]{40}$")
    subject: str
    author: str


class Skipped(_Strict):
    """A commit whose tree could not be probed (its workload does not build): skipped, as
    `git bisect skip` does."""

    sha: str
    workload: str
    why: str


class Located(_Strict):
    """One finding (or, for an IR change, one op of it) and where it came from."""

    key: str = Field(description="the finding's identity: category, workload and what it is about")
    label: str = Field(description="what a reader is shown")
    category: str
    workload: str
    probe: str
    outcome: Outcome
    first_bad: Commit | None = Field(default=None, description="the first commit that has it")
    last_good: Commit | None = Field(default=None, description="the last commit before it that does not")
    candidates: list[Commit] = Field(
        default=[], description="when skipped commits hide which one: every commit it may be"
    )
    probe_runs: int = Field(default=0, ge=0, description="probe runs spent narrowing this one down")
    note: str | None = None


class BisectDoc(_Strict):
    schema_version: Literal[1] = BISECT_SCHEMA_VERSION
    good: Commit
    bad: Commit
    commits: int = Field(ge=1, description="first-parent commits after good, bad included")
    probes: list[str]
    findings: list[Located]
    skipped: list[Skipped] = []
    probe_runs: int = Field(ge=0, description="probe runs in all, the good → bad review's not counted")
