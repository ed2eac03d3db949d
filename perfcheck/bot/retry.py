"""When to try a GitHub request again, and how long to wait first.

Pure: the gateway turns a failure into a ``Failure`` and asks ``delay_for``. GitHub's guidance:
honour ``Retry-After``; on a primary rate limit wait until ``X-RateLimit-Reset``; on a secondary
rate limit without a header wait at least a minute; back off exponentially on server errors.
Anything else (404, 422, bad credentials) will not get better by waiting.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass


@dataclass(frozen=True)
class Failure:
    status: int | None  # None: no HTTP answer at all (connection refused, dropped, timed out)
    headers: Mapping[str, str]
    message: str = ""


@dataclass(frozen=True)
class RetryPolicy:
    attempts: int = 5
    base_delay_s: float = 1.0
    max_delay_s: float = 120.0  # a wait longer than this fails the call instead of stalling the job
    secondary_limit_delay_s: float = 60.0


def _header(headers: Mapping[str, str], name: str) -> str | None:
    for key, value in headers.items():
        if key.lower() == name.lower():
            return value
    return None


def _number(value: str | None) -> float | None:
    try:
        return float(value) if value is not None else None
    except ValueError:
        return None


def is_rate_limited(f: Failure) -> bool:
    if f.status == 429:
        return True
    if f.status != 403:
        return False
    return (
        _header(f.headers, "Retry-After") is not None
        or _header(f.headers, "X-RateLimit-Remaining") == "0"
        or "rate limit" in f.message.lower()
    )


def delay_for(f: Failure, attempt: int, policy: RetryPolicy, now: float) -> float | None:
    """Seconds to wait before attempt ``attempt + 1``; None when the failure is final."""
    if attempt >= policy.attempts:
        return None
    retry_after = _number(_header(f.headers, "Retry-After"))
    if is_rate_limited(f):
        if retry_after is not None:
            wait = retry_after
        elif _header(f.headers, "X-RateLimit-Remaining") == "0":
            reset = _number(_header(f.headers, "X-RateLimit-Reset"))
            wait = max(0.0, reset - now) + 1 if reset is not None else policy.secondary_limit_delay_s
        else:
            wait = policy.secondary_limit_delay_s * attempt
    elif f.status is None or f.status >= 500:
        wait = retry_after if retry_after is not None else policy.base_delay_s * 2 ** (attempt - 1)
    else:
        return None
    return wait if wait <= policy.max_delay_s else None
