"""What the GitHub App does with a delivery: look up, decide, answer, and start the probe workflow.

The App never runs PR code itself. A delivery that asks for a review becomes a queued check run
and a ``workflow_dispatch`` of the repository's probe workflow with the pinned commit as inputs;
that workflow's GPU job probes it and its publish job reports back.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

from perfcheck.bot.events import parse_event
from perfcheck.bot.gateway import GitHubGateway, GitHubPort
from perfcheck.bot.plan import Plan, decide
from perfcheck.bot.respond import lookup_context, respond
from perfcheck.bot.settings import GitHubSettings, github_client
from perfcheck.bot.webhook import Delivery
from perfcheck.config import Config


class SettingsError(ValueError):
    """The App's environment is incomplete; the message names what is missing."""


@dataclass(frozen=True)
class AppSettings:
    app_id: int
    private_key: str
    webhook_secret: bytes
    api_url: str = "https://api.github.com"
    write_pace_s: float = 1.0

    @classmethod
    def from_environ(cls, environ: Mapping[str, str] = os.environ) -> AppSettings:
        missing = [
            name
            for name in ("PERFCHECK_APP_ID", "PERFCHECK_WEBHOOK_SECRET")
            if not environ.get(name, "").strip()
        ]
        key = environ.get("PERFCHECK_APP_PRIVATE_KEY", "").strip()
        key_file = environ.get("PERFCHECK_APP_PRIVATE_KEY_FILE", "").strip()
        if not key and not key_file:
            missing.append("PERFCHECK_APP_PRIVATE_KEY or PERFCHECK_APP_PRIVATE_KEY_FILE")
        if missing:
            raise SettingsError(f"perfcheck serve needs {', '.join(missing)} in the environment")
        app_id = environ["PERFCHECK_APP_ID"].strip()
        if not app_id.isdigit():
            raise SettingsError(f"PERFCHECK_APP_ID: expected the App's numeric id, got {app_id!r}")
        if not key:
            try:
                key = Path(key_file).read_text(encoding="utf-8")
            except OSError as err:
                raise SettingsError(f"PERFCHECK_APP_PRIVATE_KEY_FILE: {key_file}: {err.strerror}") from None
        github = GitHubSettings.from_environ(environ)
        return cls(
            app_id=int(app_id),
            private_key=key,
            webhook_secret=environ["PERFCHECK_WEBHOOK_SECRET"].strip().encode(),
            api_url=github.api_url,
            write_pace_s=github.write_pace_s,
        )


def installation_port(settings: AppSettings, repository: str, installation_id: int) -> GitHubPort:
    """A gateway acting as the App's installation (PyGithub mints and renews the token)."""
    from github import Auth

    auth = Auth.AppAuth(settings.app_id, settings.private_key).get_installation_auth(installation_id)
    client = github_client(auth, settings.api_url, settings.write_pace_s)
    return GitHubGateway(client, repository)


def dispatch_inputs(decided: Plan) -> dict[str, str]:
    return {
        "sha": decided.head_sha or "",
        "base_sha": decided.base_sha or "",
        "pr": str(decided.pr_number or ""),
        "workloads": ",".join(decided.workloads),
        "probes": ",".join(decided.probes),
        "device": decided.device or "",
        "bisect": decided.bisect,
    }


def handle_delivery(
    delivery: Delivery,
    config: Config,
    port_for: Callable[[str, int], GitHubPort],
    log: TextIO = sys.stderr,
) -> Plan | None:
    payload: dict[str, Any] = delivery.payload
    installation = (payload.get("installation") or {}).get("id")
    repository = (payload.get("repository") or {}).get("full_name")
    if not isinstance(installation, int) or not isinstance(repository, str):
        print(f"perfcheck serve: {delivery.id}: no installation or repository; ignored", file=log)
        return None
    port = port_for(repository, installation)
    ev = parse_event(delivery.event, payload)  # once: the lookups and the decision read it
    decided = decide(delivery.event, ev, lookup_context(ev, config, port))
    print(f"perfcheck serve: {delivery.id} {delivery.event}: {decided.reason}", file=log)
    respond(port, decided, config)
    if decided.run and decided.mode == "probe" and decided.head_sha:
        ref = (payload.get("repository") or {}).get("default_branch") or "main"
        port.dispatch_workflow(config.github.probe_workflow, str(ref), dispatch_inputs(decided))
        print(
            f"perfcheck serve: dispatched {config.github.probe_workflow} for {decided.head_sha[:7]}", file=log
        )
    return decided
