"""What a probe is to the torch-free side: one descriptor per probe, in one registry.

A probe's descriptor names it, says when it runs, and carries the two pure functions the review
needs from it: ``compare`` (base and head results and the config -> findings, reasons the verdict
is inconclusive, and for the timing probe its timing change) and ``rows`` (its lines of the
workload table, the probe's fragment of every report). The runner side registers only the
function that runs it (``perfcheck/runner/probes/base.py``). Adding a probe touches its own
files and one registry line.

Every probe names the categories of the shared vocabulary its comparator raises (``raises``), so
that each category's cause and verify command can be checked against each probe that raises it;
where a shared category means something else from this probe (``collective_drift`` from FSDP's
units, not DDP's buckets) its descriptor carries its own entry for it (``entries``).

Every probe's own finding categories come with it (``categories``), each with its root-cause
matrix entry (a built-in probe's in the YAML file beside its descriptor), and are registered with
it. Every probe's metrics model is its descriptor's (``metrics``): what ``ProbeResult.metrics``
holds for it, validated against it as a result is read and read through
``perfcheck.schema.probe_metrics``. Its settings model (``settings``) is its config section,
under its name (read with ``Config.section``, and in the worker with ``ProbeSpec.section``), and
``run`` says where its run function lives (``"module:function"``, imported only in the probe's
worker process, where torch is): a plugin probe (a module named under ``plugins:`` in
perfcheck.yml, see perfcheck/plugins.py) carries both, since no built-in file knows it, and so do
the built-ins (all but the timing probe, whose paired processes the orchestrator runs, name their
run function; export, ddp, fsdp, custom_ops and profile their section). The ``compile:`` and
``timing:`` sections are not one probe's: every compiling probe reads ``compile`` (backend, mode,
dynamic) and the compile probe and the planner read ``timing``, so they stay the config's own
(``Config.compile``, ``Config.timing``, and ``ProbeSpec``'s).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Protocol

from pydantic import BaseModel, ValidationError

from perfcheck.core.markdown import Compound, Figure
from perfcheck.measures import CompileLatencyChange, TimingChange
from perfcheck.schema import Finding, ProbeResult, WorkloadReview

if TYPE_CHECKING:  # the config imports plugins, which import this: no import back at run time
    from perfcheck.settings import SettingsView, WorkloadConfig


# A cell of a row: a figure with its unit, or two values joined (``3 (1.5 KB)``), both formatted
# in one place (perfcheck/core/markdown.py); or text (a status such as "crashed", "=", "—").
Cell = Figure | Compound | str


@dataclass(frozen=True)
class Row:
    """One line of a workload's table: a metric, base, head and the change."""

    metric: str
    base: Cell
    head: Cell
    delta: Cell


@dataclass(frozen=True)
class Compared:
    """What comparing one probe's base and head results found."""

    findings: list[Finding] = field(default_factory=list)
    inconclusive: list[str] = field(default_factory=list)  # why the verdict cannot be decided
    timing: TimingChange | None = None
    compile_latency: CompileLatencyChange | None = None


Compare = Callable[[str, ProbeResult, ProbeResult, "SettingsView"], Compared]
Rows = Callable[[ProbeResult | None, ProbeResult | None, WorkloadReview], list[Row]]


@dataclass(frozen=True)
class Column:
    """A probe's column in the reviews' one-line-per-workload overview (the check run's summary,
    the HTML report): ``header`` heads it; ``key`` names its cell in a template's context
    (``wl.summary.step``), so that a project's own template can pick a cell by name."""

    key: str
    header: str
    numeric: bool = False  # a figure: right-aligned where the report aligns


# A probe's cells of one workload's overview line, by its columns' keys: plain text (each report
# escapes what it shows). Either result may be None (the probe did not run on that side).
Overview = Callable[[ProbeResult | None, ProbeResult | None, WorkloadReview], Mapping[str, str]]


def side_pair(base: str | None, head: str | None) -> str:
    """An overview cell for a figure on each side: ``a → b``, ``a (=)`` where they agree, "—"
    where neither has one."""
    if base is None and head is None:
        return "—"
    if base == head:
        return f"{base} (=)"
    return f"{base or '—'} → {head or '—'}"


def status_or(r: ProbeResult | None, value: str | None) -> str | None:
    """``value`` where the probe finished, else its status ("crashed"); None where it did not run."""
    if r is None:
        return None
    return value if r.status == "ok" and value is not None else r.status


def entries_beside(descriptor: str) -> dict[str, Any]:
    """A probe's own categories with their matrix entries, from the YAML file beside its descriptor
    module (perfcheck/core/probes/compile.py: compile.yml), as ``ProbeKind.categories`` takes them; they are
    validated as the probe registers. Read with libyaml where it is there: a few milliseconds."""
    import yaml

    path = Path(descriptor).with_suffix(".yml")
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    raw = yaml.load(path.read_text(encoding="utf-8"), Loader=loader)  # a safe loader, either way
    if not isinstance(raw, dict):
        raise ValueError(f"{path}: expected a mapping of finding categories")
    return raw


# Findings perfcheck/core/compare.py raises for whichever probe's process crashed or hung.
EVERY_PROBE = ("probe_crashed", "probe_timeout", "module_missing")
# Raised (``failed_variants``) by the probes that run their workload several ways in one process.
VARIANT_FAILED = "variant_failed"


@dataclass(frozen=True)
class FollowUp:
    """When a probe runs without being asked: where a workload's probes were left to the defaults,
    ``after`` are among them, and ``enabled`` by the config, it runs when ``called_for`` by the
    workload's results so far (both sides' of every probe that ran)."""

    after: tuple[str, ...]
    enabled: Callable[[SettingsView], bool]
    called_for: Callable[[SettingsView, list[ProbeResult]], bool]


@dataclass(frozen=True)
class ProbeKind:
    name: str
    summary: str  # one line, for --help and the docs
    default: bool = False  # runs when neither --probes nor the workload's `probes` name any
    paired: bool = False  # base and head measured together, after the per-side probes
    # Its result is structural (exact, no statistics): fixed by the files the workload read, the
    # probe's config and the environment, so base's may be recorded by a default-branch run and
    # reused by a PR's review instead of probing base again (perfcheck/core/records.py). Never for
    # a probe whose result holds a measure (timing, profile, ddp, fsdp): those stay paired.
    reusable: bool = False
    compare: Compare | None = None
    rows: Rows | None = None
    # The statuses both sides must have for ``compare`` to run (export compares failures too).
    compared: tuple[str, ...] = ("ok",)
    # Its own finding categories, each with its root-cause matrix entry (category -> entry): a
    # built-in probe's from the YAML file beside its descriptor (``entries_beside``).
    categories: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    settings: type[BaseModel] | None = None  # its config section, under the probe's name
    metrics: type[BaseModel] | None = None  # what ProbeResult.metrics holds for it
    run: str | None = None  # "module:function" of its run function, for the worker
    # The shared categories (schema.py's vocabulary) its comparator raises, besides its own.
    raises: tuple[str, ...] = ()
    # Its own root-cause entries for some of those: partial matrix entries (symptom, causes,
    # verify, docs, rules) that replace the category's for this probe's findings.
    entries: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    # What it is expected to cost per side and workload before this review measured anything of
    # the workload (seconds, per device), for the up-front plan and the time budget.
    prior_s: Mapping[str, float] = field(default_factory=lambda: {"cpu": 30.0, "cuda": 30.0})
    # A workload asks for it by what it is, beside the defaults (amp: one that runs under
    # autocast); None: only by name.
    asked_by: Callable[[WorkloadConfig], bool] | None = None
    # It may run where no one asked for it, once the first results call for it (custom_ops on a
    # workload whose exported graph calls a custom op); None: never.
    follow_up: FollowUp | None = None
    # Its columns in the overview of every workload (the check summary, the HTML report) and the
    # function that fills them; none: the probe shows in each workload's own table only.
    columns: tuple[Column, ...] = ()
    overview: Overview | None = None

    def raised(self) -> tuple[str, ...]:
        """Every category a finding of this probe can have: what it raises, its own categories and
        the crash or time-out of its process (perfcheck/core/compare.py, for any probe)."""
        return (*self.raises, *self.categories, *EVERY_PROBE)

    def metrics_of(self, result: ProbeResult) -> BaseModel | None:
        """The result's plugin metrics as the probe's own model; None when it has none.
        Raises ValueError naming the field when they do not fit it."""
        if self.metrics is None or not result.metrics:
            return None
        try:
            return result.metrics_as(self.metrics)
        except ValidationError as err:
            first = err.errors()[0]
            where = ".".join(str(p) for p in first["loc"]) or "(top level)"
            raise ValueError(f"{self.name} metrics: {where}: {first['msg']}") from None

    def settings_of(self, config: SettingsView) -> BaseModel | None:
        """The probe's config section (its defaults when the config has none)."""
        return config.section(self.settings) if self.settings is not None else None


def rejected_finding(
    category: str, wl: str, probe: str, what: str, metrics: Any, base: ProbeResult
) -> Finding:
    """torch (``what``: torch.compile, torch.export) refusing the head's code: the error and the
    user's frame, ``metrics`` carrying ``error_type``/``error_message``/``error_location``; old
    news (a warning) when base fails too."""
    also = base.status == "failed"
    return Finding(
        category=category,
        severity="warning" if also else "error",
        workload=wl,
        probe=probe,
        location=metrics.error_location,
        message=f"{what} fails{' (as on base)' if also else ''}: {metrics.error_type}",
        evidence={
            "error_type": metrics.error_type or "",
            "error": (metrics.error_message or "")[:2000],
            **({"error_kind": kind} if (kind := getattr(metrics, "error_kind", None)) else {}),
        },
    )


class Variant(Protocol):
    """One way a probe ran the workload in its process, as its metrics record it."""

    @property
    def variant(self) -> str: ...

    @property
    def error(self) -> str | None: ...


def failed_variants(wl: str, probe: str, base: Sequence[Variant], head: Sequence[Variant]) -> Compared:
    """The variants (ways a probe runs the workload in one process: DDP's ``compiled_ddp``, ...)
    that raised on a side (``error`` set). Nothing that did not run is "unchanged": failing on
    head only is an error; on both sides a warning and an inconclusive review, since neither side
    measured what it stands for; on base only (head fixed it) an info note. A variant only one
    side ran (another config) is neither."""
    findings: list[Finding] = []
    inconclusive: list[str] = []
    errors = {v.variant: v.error for v in base}
    for name, h in ((v.variant, v.error) for v in head):
        if name not in errors:
            continue
        b = errors[name]
        if b is None and h is None:
            continue
        error = h if h is not None else b
        first = next(iter((error or "").strip().splitlines()), "it raised")[:300]
        severity: Literal["error", "warning", "info"]
        if h is not None and b is not None:
            severity, failed_on = "warning", "both sides"
            message = f"{name} fails on both sides, so it measured nothing: {first}"
            inconclusive.append(
                f"{wl}/{probe}: {name} was measured on neither side: {first} "
                f"(where it cannot run, leave it out of {probe}.variants)"
            )
        elif h is not None:
            severity, failed_on, message = "error", "head", f"{name} fails on head (it runs on base): {first}"
        else:
            severity, failed_on, message = "info", "base", f"{name} runs on head (it fails on base: {first})"
        findings.append(
            Finding(
                category=VARIANT_FAILED,
                severity=severity,
                workload=wl,
                probe=probe,
                message=message,
                evidence={
                    "variant": name,
                    "side": "base" if failed_on == "base" else "head",
                    "failed_on": failed_on,
                    "error": (error or "")[:2000],
                    **({"base_error": b[:2000]} if h is not None and b is not None and b != h else {}),
                },
            )
        )
    return Compared(findings, inconclusive)


def status_cell(r: ProbeResult | None) -> str | None:
    """A table cell for a probe that did not finish ("crashed", "—" when it did not run), or None."""
    if r is None:
        return "—"
    return None if r.status == "ok" else r.status


def settled(rows: list[Row], b: ProbeResult | None, h: ProbeResult | None) -> list[Row]:
    """``rows`` as the table shows them where a side did not finish (failed, crashed, timed out,
    skipped): every cell of that side says its status, and so does every Δ, never a figure
    computed against a side that has none (a failed head's ``-100 %``). Where one side did not
    finish, the Δ names that side ("base failed"): a bare "failed" beside a head that compiled reads
    as the head's regression, under a review that passes because the head fixed base's failure.
    Where both sides did not finish with different statuses, the Δ names both, base first. A side
    that did not run (None) keeps its cells; every probe's ``rows`` returns its rows through this."""
    bs, hs = (r.status if r is not None and r.status != "ok" else None for r in (b, h))
    if bs is None and hs is None:
        return rows
    both = f"{bs}" if bs == hs else f"{bs} / {hs}"
    delta = both if bs and hs else f"base {bs}" if bs else f"head {hs}"
    return [Row(row.metric, bs or row.base, hs or row.head, delta) for row in rows]
