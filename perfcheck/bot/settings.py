"""Where the bot runs and how it reaches GitHub: one typed object, read from the environment once.

Actions sets GITHUB_API_URL, GITHUB_REPOSITORY, GITHUB_SERVER_URL, GITHUB_RUN_ID and the step-file
paths; the token is given to the step explicitly (GITHUB_TOKEN or PERFCHECK_GITHUB_TOKEN), never
found in a config file. Building a client is separate so that code taking a client can be given one.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class GitHubSettings:
    api_url: str = "https://api.github.com"
    server_url: str = "https://github.com"
    token: str | None = None
    repository: str | None = None
    run_id: str | None = None
    step_summary: Path | None = None
    # GitHub asks integrations to space writes about a second apart to stay clear of the secondary
    # rate limits; a local test server needs no pacing.
    write_pace_s: float = 1.0
    attempts: int = 5  # per GitHub call, the first included

    @classmethod
    def from_environ(cls, environ: Mapping[str, str] = os.environ) -> GitHubSettings:
        def get(name: str) -> str | None:
            value = environ.get(name, "").strip()
            return value or None

        def number(name: str, default: float) -> float:
            try:
                return float(get(name) or default)
            except ValueError:
                return default

        return cls(
            api_url=(get("GITHUB_API_URL") or cls.api_url).rstrip("/"),
            server_url=(get("GITHUB_SERVER_URL") or cls.server_url).rstrip("/"),
            token=get("PERFCHECK_GITHUB_TOKEN") or get("GITHUB_TOKEN"),
            repository=get("GITHUB_REPOSITORY"),
            run_id=get("GITHUB_RUN_ID"),
            step_summary=Path(s) if (s := get("GITHUB_STEP_SUMMARY")) else None,
            write_pace_s=max(0.0, number("PERFCHECK_GITHUB_WRITE_PACE", 1.0)),
            attempts=max(1, int(number("PERFCHECK_GITHUB_RETRIES", 5))),
        )

    def run_url(self, repository: str | None = None) -> str | None:
        repo = repository or self.repository
        if not repo or not self.run_id:
            return None
        return f"{self.server_url}/{repo}/actions/runs/{self.run_id}"


def github_client(auth: Any, api_url: str, write_pace_s: float) -> Any:
    """A PyGithub client; retries are the gateway's job, so PyGithub's are off."""
    from github import Github

    return Github(
        auth=auth,
        base_url=api_url,
        retry=None,
        lazy=True,
        seconds_between_requests=None,
        seconds_between_writes=write_pace_s or None,
    )


def token_client(settings: GitHubSettings) -> Any:
    from github import Auth

    if not settings.token:
        raise ValueError("no GitHub token: set GITHUB_TOKEN (or PERFCHECK_GITHUB_TOKEN) for this step")
    return github_client(Auth.Token(settings.token), settings.api_url, settings.write_pace_s)
