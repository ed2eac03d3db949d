"""A pass means measured and unchanged (issue 40, item 1): a probe that did not finish on a side, or
a variant of it that raised, is never read as "unchanged". Pure: the results are made here, the
review is assembled as `perfcheck report` assembles it."""

from __future__ import annotations

import pytest

from perfcheck.config import Config
from perfcheck.core import probes
from perfcheck.core.probes.ddp import DdpMetrics, DdpVariantMetrics
from perfcheck.core.probes.fsdp_models import FsdpMetrics, FsdpVariant
from perfcheck.core.render import render_comment
from perfcheck.measures import ProbeStatus
from perfcheck.review import assemble
from perfcheck.schema import ProbeResult, Review, SideInfo, WorkloadReview

ERROR = "InductorError: OSError: [Errno 30] Read-only file system: '/tmp/x.lock'"


def result(probe: str, side: str, status: ProbeStatus = "ok", metrics: dict | None = None) -> ProbeResult:
    return ProbeResult(
        probe=probe, workload="net", side=side, status=status, duration_s=1.0, metrics=metrics or {}
    )  # type: ignore[arg-type]


def review_of(base: ProbeResult, head: ProbeResult) -> Review:
    wl = WorkloadReview(name="net", base=[base], head=[head])
    return assemble([wl], Config(), SideInfo(tree="base"), SideInfo(tree="head"))


def ddp(*errors: str | None) -> dict:
    names = ("eager", "compiled_ddp", "ddp_compiled")
    variants = [
        DdpVariantMetrics(variant=n, step_ms=None if e else 2.0, error=e)  # type: ignore[arg-type]
        for n, e in zip(names, errors, strict=False)
    ]
    return DdpMetrics(backend="gloo", world_size=2, variants=variants).model_dump(mode="json")


def fsdp(*errors: str | None) -> dict:
    names = ("eager", "compiled_layers", "compiled_model")
    variants = [
        FsdpVariant(variant=n, step_ms=None if e else 2.0, error=e)  # type: ignore[arg-type]
        for n, e in zip(names, errors, strict=False)
    ]
    metrics = FsdpMetrics(
        backend="gloo", world_size=2, device="cpu", wrapped_by="perfcheck", variants=variants
    )
    return metrics.model_dump(mode="json")


@pytest.mark.parametrize("probe,metrics", [("ddp", ddp), ("fsdp", fsdp)])
def test_a_variant_that_fails_on_both_sides_is_inconclusive_and_says_which(probe, metrics) -> None:  # type: ignore[no-untyped-def]
    r = review_of(
        result(probe, "base", metrics=metrics(None, ERROR)),
        result(probe, "head", metrics=metrics(None, ERROR)),
    )
    assert r.verdict == "inconclusive"
    (why,) = r.inconclusive
    variant = r.workloads[0].head[0].metrics["variants"][1]["variant"]
    assert why.startswith(f"net/{probe}: {variant} was measured on neither side") and "Read-only" in why
    (f,) = r.findings
    assert (f.category, f.severity, f.evidence["failed_on"]) == ("variant_failed", "warning", "both sides")
    comment = render_comment(r)
    assert "no regressions" not in comment and "No findings" not in comment
    assert "| fails | fails |" in comment and variant.replace("_", "\\_") in comment


@pytest.mark.parametrize("probe,metrics", [("ddp", ddp), ("fsdp", fsdp)])
def test_a_variant_that_fails_on_head_only_fails_the_review_naming_variant_side_and_error(
    probe, metrics
) -> None:  # type: ignore[no-untyped-def]
    r = review_of(
        result(probe, "base", metrics=metrics(None, None)),
        result(probe, "head", metrics=metrics(None, ERROR)),
    )
    assert r.verdict == "fail"
    (f,) = r.findings
    assert (f.category, f.severity, f.evidence["side"]) == ("variant_failed", "error", "head")
    assert "fails on head (it runs on base)" in f.message and "InductorError" in f.message


@pytest.mark.parametrize("probe,metrics", [("ddp", ddp), ("fsdp", fsdp)])
def test_a_variant_head_fixed_is_an_info_note(probe, metrics) -> None:  # type: ignore[no-untyped-def]
    r = review_of(
        result(probe, "base", metrics=metrics(None, ERROR)),
        result(probe, "head", metrics=metrics(None, None)),
    )
    assert r.verdict == "pass"
    (f,) = r.findings
    assert (f.category, f.severity, f.evidence["side"]) == ("variant_failed", "info", "base")


def test_no_probe_passes_where_a_side_did_not_finish() -> None:
    """Every built-in probe whose results are compared, with each status a side can end in on one
    side or both: never a pass."""
    compared = [k for k in probes.built_in() if k.compare is not None]
    assert {"compile", "export", "timing", "ddp", "fsdp", "amp", "custom_ops", "profile"} <= {
        k.name for k in compared
    }
    statuses: tuple[ProbeStatus, ...] = ("failed", "crashed", "timeout", "skipped")
    seen = []
    for kind in compared:
        for status in statuses:
            for base_status, head_status in ((status, status), ("ok", status), (status, "ok")):
                if head_status == "ok" and status == "failed":
                    continue  # torch refused base's code and head's runs: head fixed it
                r = review_of(result(kind.name, "base", base_status), result(kind.name, "head", head_status))
                seen.append((kind.name, base_status, head_status, r.verdict))
    assert [s for s in seen if s[3] == "pass"] == []
