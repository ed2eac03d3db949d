"""`perfcheck plan`, as one function: the event parsed once at the edge, the decision pure
(perfcheck/bot/plan.py), the lookups and the answer through the GitHub port passed in."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from perfcheck.bot.actions_io import write_outputs
from perfcheck.bot.events import Event, PayloadError, parse_event
from perfcheck.bot.gateway import GitHubError, GitHubPort
from perfcheck.bot.plan import Context, Plan, decide
from perfcheck.bot.respond import lookup_context, respond
from perfcheck.bot.settings import GitHubSettings
from perfcheck.config import Config, ConfigError, load_config

EXIT_PLANNED, EXIT_GITHUB, EXIT_BAD_INPUT = 0, 1, 2

Log = Callable[[str], None]


class PlanInputError(ValueError):
    """A plan that cannot start; the message is meant for the user as it stands."""


@dataclass(frozen=True)
class PlanSettings:
    event_name: str
    event: Event
    config: Config
    respond: bool  # carry out the answer (react, reply, set the check), not only print it
    out: Path | None
    run_url: str | None
    run_id: str | None

    @property
    def repository(self) -> str:
        return self.event.repository.full_name


def settings_from(
    event_name: str,
    event_path: Path,
    config_path: Path | None,
    respond_too: bool,
    out: Path | None,
    env: GitHubSettings,
    cwd: Path,
) -> PlanSettings:
    """Read and check the event and the config; raises PlanInputError saying what is wrong."""
    try:
        config = load_config(config_path, cwd)
        event = parse_event(event_name, event_path.read_bytes())
    except OSError as err:
        raise PlanInputError(f"{event_path}: cannot read the event ({err.strerror})") from None
    except (ConfigError, PayloadError) as err:
        raise PlanInputError(str(err)) from None
    if respond_too and not env.token:
        raise PlanInputError("--respond needs a token: set GITHUB_TOKEN for this step")
    repository = event.repository.full_name
    return PlanSettings(event_name, event, config, respond_too, out, env.run_url(repository), env.run_id)


def outputs(decided: Plan) -> dict[str, object]:
    """The plan as the workflow's step outputs."""
    return {
        "run": decided.run,
        "mode": decided.mode,
        "reason": decided.reason,
        "head_sha": decided.head_sha,
        "base_sha": decided.base_sha,
        "pr_number": decided.pr_number,
        "awaiting_approval": decided.awaiting_approval,
        "workloads": ",".join(decided.workloads),
        "probes": ",".join(decided.probes),
        "device": decided.device,
        "bisect": decided.bisect,
        "plan": decided.model_dump_json(),
    }


def budget_warnings(config: Config, device: str | None) -> list[str]:
    """The budgets of ``config`` tighter than the A/A noise its history store measured on the
    runners of ``device`` (every runner class where the plan names no device), each naming the
    setting and the figure; none without history or A/A runs. Warnings only: the plan stands."""
    if not config.history.enabled:
        return []
    from perfcheck.core import noise
    from perfcheck.core.history import HistoryError, stored_aa_runs

    try:
        runs = stored_aa_runs(Path(config.history.path))
    except HistoryError as err:
        return [f"the A/A runs could not be read, so the budgets are not checked against them: {err}"]
    if device:
        runs = [r for r in runs if r.runner_class.startswith(f"{device}:")]
    return noise.budget_warnings(noise.summarise(runs), noise.config_budgets(config.budgets))


def run(s: PlanSettings, port: GitHubPort | None, log: Log, show: Log) -> int:
    """Decide (with what ``port`` looks up; without a port, from the event alone), show the plan,
    write it to OUT/plan.json and the step outputs, and answer when asked to."""
    try:
        ctx = lookup_context(s.event, s.config, port) if port is not None else Context(config=s.config)
        decided = decide(s.event_name, s.event, ctx)
        show(decided.model_dump_json(indent=2))
        if decided.run:
            for line in budget_warnings(s.config, decided.device):
                log(f"warning: {line}")
        if s.out is not None:
            s.out.mkdir(parents=True, exist_ok=True)
            (s.out / "plan.json").write_text(decided.model_dump_json(indent=2))
        if s.respond and port is not None:
            for line in respond(port, decided, s.config, s.run_url, s.run_id):
                log(line)
    except GitHubError as err:
        log(f"GitHub: {err}")
        return EXIT_GITHUB
    write_outputs(outputs(decided))
    return EXIT_PLANNED
