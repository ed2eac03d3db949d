"""The bot's pure decisions: retry waits, sticky-comment choice, check-run content, webhook checks."""

from __future__ import annotations

import hashlib
import hmac
from pathlib import Path

import pytest

from perfcheck.bot.checks import annotation, annotations, conclusion, title
from perfcheck.bot.gateway import ExistingComment, batched
from perfcheck.bot.publish import CommentState, Target, comment_body, decide_comment, parse_state
from perfcheck.bot.retry import Failure, RetryPolicy, delay_for, is_rate_limited
from perfcheck.bot.webhook import DeliveryLog, signature_ok
from perfcheck.core import markdown
from perfcheck.measures import SourceLocation
from perfcheck.schema import Finding, load_review
from perfcheck.settings import GitHubConfig

DATA = Path(__file__).parent / "data"
POLICY = RetryPolicy(attempts=5, base_delay_s=1.0, max_delay_s=120.0, secondary_limit_delay_s=60.0)


# -- retry ---------------------------------------------------------------------------------------


def test_server_errors_back_off_exponentially_then_give_up() -> None:
    f = Failure(502, {})
    assert [delay_for(f, a, POLICY, now=0) for a in (1, 2, 3, 4)] == [1, 2, 4, 8]
    assert delay_for(f, 5, POLICY, now=0) is None


def test_retry_after_is_honoured_for_secondary_rate_limits() -> None:
    f = Failure(403, {"retry-after": "7"}, "You have exceeded a secondary rate limit")
    assert is_rate_limited(f)
    assert delay_for(f, 1, POLICY, now=0) == 7


def test_primary_rate_limit_waits_until_the_reset() -> None:
    f = Failure(403, {"X-RateLimit-Remaining": "0", "X-RateLimit-Reset": "1030"}, "API rate limit exceeded")
    assert delay_for(f, 1, POLICY, now=1000) == 31
    far = Failure(403, {"X-RateLimit-Remaining": "0", "X-RateLimit-Reset": "99999"})
    assert delay_for(far, 1, POLICY, now=1000) is None  # longer than max_delay_s: fail, don't stall


def test_secondary_limit_without_header_waits_a_minute() -> None:
    assert delay_for(Failure(403, {}, "secondary rate limit"), 1, POLICY, now=0) == 60


def test_client_errors_are_final() -> None:
    for status in (401, 404, 422):
        assert delay_for(Failure(status, {}), 1, POLICY, now=0) is None
    assert delay_for(Failure(403, {}, "Resource not accessible by integration"), 1, POLICY, now=0) is None


def test_no_answer_is_retried() -> None:
    assert delay_for(Failure(None, {}, "ConnectionError"), 1, POLICY, now=0) == 1


# -- sticky comment ------------------------------------------------------------------------------

SHA = "ec26c3e57ca3a959ca5aad62de7213c562f8c821"


def _comment(cid: int, verdict: str, text: str = "body") -> ExistingComment:
    state = CommentState(verdict, SHA, "0123456789abcdef").line()  # type: ignore[arg-type]
    return ExistingComment(cid, f"{state}\n{text}", "perfcheck[bot]")


def test_first_review_creates_a_comment() -> None:
    assert decide_comment([], "fail", "x").kind == "create"


def test_same_verdict_edits_the_latest_in_place() -> None:
    new = _comment(0, "fail", "new text").body
    action = decide_comment([_comment(5, "pass"), _comment(9, "fail")], "fail", new)
    assert (action.kind, action.comment_id) == ("edit", 9)


def test_flipped_verdict_posts_a_new_comment() -> None:
    action = decide_comment([_comment(9, "pass")], "fail", _comment(0, "fail").body)
    assert action.kind == "create"
    assert "pass to fail" in action.why


def test_identical_review_is_left_alone() -> None:
    old = _comment(9, "fail", "same")
    new_state = CommentState("fail", SHA, "fedcba9876543210").line()
    assert decide_comment([old], "fail", f"{new_state}\nsame").kind == "none"


def test_state_line_is_parsed_strictly() -> None:
    assert parse_state(_comment(1, "inconclusive").body) == CommentState(
        "inconclusive", SHA, "0123456789abcdef"
    )
    assert parse_state("<!-- perfcheck:state verdict=maybe sha=zz run=1 -->") is None


def test_comment_body_starts_with_state_and_fits_github() -> None:
    review = load_review(DATA / "demo-result.json")
    body = comment_body(review, Target("o/r", SHA, 2, "https://github.com/o/r/actions/runs/1"), "ab" * 8)
    assert parse_state(body) == CommentState("fail", SHA, "ab" * 8)
    assert len(body) <= 65536


def test_a_huge_review_is_cut_with_a_pointer_to_the_run() -> None:
    review = load_review(DATA / "demo-result.json")
    big = Finding(
        category="probe_crashed",
        severity="error",
        workload="mlp-tiny",
        probe="compile",
        message="x " * 40_000,
        evidence={"detail": "line\n" * 30_000, "side": "head"},
    )
    # Each field is capped before rendering, so only many of them can pass the comment's limit.
    review = review.model_copy(update={"findings": [*review.findings, big] * 20})
    body = comment_body(review, Target("o/r", SHA, 2, "https://github.com/o/r/actions/runs/42"), "ab" * 8)
    assert len(body) <= 65536
    assert body.rstrip().endswith("(https://github.com/o/r/actions/runs/42).")
    assert body.count("<details>") == body.count("</details>")


# -- check run content ---------------------------------------------------------------------------


def _finding(path: str, line: int = 17, severity: str = "error") -> Finding:
    return Finding(
        category="graph_break_added",
        severity=severity,  # type: ignore[arg-type]
        workload="mlp",
        probe="compile",
        message="new break\x07 at @org/team <b>",
        evidence={"reason": "Tensor.item()"},
        location=SourceLocation(path=path, line=line),
    )


def test_annotations_point_at_repository_lines_only() -> None:
    a = annotation(_finding("model.py"))
    assert a is not None
    assert (a["path"], a["start_line"], a["annotation_level"]) == ("model.py", 17, "failure")
    assert "\x07" not in a["message"] and a["raw_details"] == "Tensor.item()"
    for outside in ("/usr/lib/python3/site.py", "../escape.py", "<frozen runpy>", "C:/x.py"):
        assert annotation(_finding(outside)) is None
    assert annotation(_finding("model.py", line=0)) is None
    assert annotation(_finding("m.py", severity="warning"))["annotation_level"] == "warning"  # type: ignore[index]


def test_demo_review_has_one_annotation_and_fails() -> None:
    review = load_review(DATA / "demo-result.json")
    assert [a["path"] for a in annotations(review)] == ["model.py"]
    assert conclusion(review.verdict, GitHubConfig()) == "failure"
    assert title(review).startswith("perfcheck: 2 regressions")


def test_inconclusive_conclusion_is_configurable() -> None:
    assert conclusion("inconclusive", GitHubConfig()) == "action_required"
    assert conclusion("inconclusive", GitHubConfig(inconclusive_conclusion="neutral")) == "neutral"
    assert conclusion("pass", GitHubConfig()) == "success"


def test_batches_of_fifty() -> None:
    assert [len(b) for b in batched(list(range(120)), 50)] == [50, 50, 20]
    assert list(batched([], 50)) == []


def test_links_cannot_break_out_of_markdown() -> None:
    assert markdown.url("javascript:alert(1)") == "#"
    assert ")" not in markdown.url("https://x.test/a) [b](c")


# -- webhook checks ------------------------------------------------------------------------------


def test_signature_is_checked() -> None:
    body, secret = b'{"zen": "Keep it logically awesome."}', b"s3cret"
    good = "sha256=" + hmac.new(secret, body, hashlib.sha256).hexdigest()
    assert signature_ok(secret, body, good)
    assert not signature_ok(secret, body + b" ", good)
    assert not signature_ok(b"other", body, good)
    assert not signature_ok(secret, body, None)
    assert not signature_ok(secret, body, "sha1=" + hmac.new(secret, body, hashlib.sha1).hexdigest())


def test_delivery_log_drops_repeats_and_stays_bounded() -> None:
    log = DeliveryLog(size=2)
    assert log.first_time("a") and log.first_time("b")
    assert not log.first_time("a")
    assert log.first_time("c")  # evicts "a"
    assert log.first_time("a")


@pytest.mark.parametrize("value", ["@org/team", "<img src=x onerror=alert(1)>", "```\n# heading"])
def test_hostile_text_renders_inert(value: str) -> None:
    assert "@org" not in markdown.cell(value)
    assert "<img" not in markdown.text(value)
    # Inside a code block nothing renders or notifies, as long as the value cannot close the fence.
    fence = markdown.block(value).split("\n", 1)[0]
    assert fence not in value and markdown.block(value).endswith("\n" + fence)
