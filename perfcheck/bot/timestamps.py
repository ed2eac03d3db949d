"""GitHub's timestamps (ISO 8601, `Z` or an offset) as aware datetimes; None when absent or unreadable."""

from __future__ import annotations

from datetime import UTC, datetime


def instant(text: str | None) -> datetime | None:
    if not text:
        return None
    try:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)
