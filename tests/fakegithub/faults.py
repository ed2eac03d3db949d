"""Injected failures: the answers GitHub gives when it is overloaded, throttling, or the network breaks."""

from __future__ import annotations

import re
from dataclasses import dataclass

from .exchange import Reply

FAULT_KINDS = ("502", "rate_limit", "429", "drop")
# Only these can strike after GitHub acted: a rate limit is decided before the request is handled.
AFTER_EFFECT_KINDS = ("502", "drop")
SECONDARY_RATE_LIMIT = (
    "You have exceeded a secondary rate limit. Please wait a few minutes before you try again. "
    "If you reach out to GitHub Support for help, please include the request ID {request_id}."
)
SECONDARY_RATE_LIMIT_DOCS = (
    "https://docs.github.com/free-pro-team@latest/rest/overview/rate-limits-for-the-rest-api"
    "#about-secondary-rate-limits"
)


@dataclass
class Fault:
    method: str
    pattern: re.Pattern[str]
    kind: str
    remaining: int
    after_effect: bool
    retry_after: int

    def matches(self, method: str, path: str) -> bool:
        if self.remaining <= 0:
            return False
        return self.method in ("*", method.upper()) and self.pattern.search(path) is not None


def make_fault(
    method: str, path_regex: str, kind: str, times: int, after_effect: bool, retry_after: int
) -> Fault:
    if kind not in FAULT_KINDS:
        raise ValueError(f"fault kind must be one of {FAULT_KINDS}, not {kind!r}")
    if after_effect and kind not in AFTER_EFFECT_KINDS:
        raise ValueError(f"after_effect applies to {AFTER_EFFECT_KINDS} only, not {kind!r}")
    if times < 1:
        raise ValueError(f"times must be at least 1, not {times}")
    return Fault(method.upper(), re.compile(path_regex), kind, times, after_effect, retry_after)


def fault_reply(fault: Fault, request_id: str) -> Reply | None:
    """What the client receives; None means no answer at all (the connection is closed)."""
    if fault.kind == "drop":
        return None
    if fault.kind == "502":
        return Reply(502, {"message": "Server Error"})
    status = 403 if fault.kind == "rate_limit" else 429
    body = {
        "message": SECONDARY_RATE_LIMIT.format(request_id=request_id),
        "documentation_url": SECONDARY_RATE_LIMIT_DOCS,
        "status": str(status),
    }
    return Reply(status, body, {"Retry-After": str(fault.retry_after)})
