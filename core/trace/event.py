"""One trace event, reduced to the fields the analyses read."""

from __future__ import annotations

from typing import Any, NamedTuple


class Event(NamedTuple):
    """The fields of one trace event that the analyses need."""

    ph: str
    cat: str | None
    name: str
    ts: float | None
    dur: float | None
    pid: Any
    tid: Any
    stream: int | None  # args.stream: set on GPU activity (kernels, memcpy, memset)
    correlation: int | None  # args.correlation: links a GPU activity to the CPU call that launched it


# The C constructor of tuples: a NamedTuple's own __new__ is a Python function, which costs more
# than the rest of to_event put together.
_new_tuple = tuple.__new__


def _number(value: Any) -> float | None:
    if value.__class__ is float:
        return value
    if value.__class__ is int:
        return float(value)
    return None  # absent, or a string or boolean: not a time


def _integer(value: Any) -> int | None:
    # Kineto writes stream and correlation as integers; HTA converts with int() and treats what
    # does not convert as absent.
    if value is None or value.__class__ is int:
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str):
        try:
            return int(value)
        except ValueError:
            return None
    return None


def to_event(raw: dict[str, Any]) -> Event:
    """The fields of one decoded event object. Runs once per event of a large trace, so it avoids
    anything it can."""
    get = raw.get
    args = get("args")
    stream = correlation = None
    if args.__class__ is dict:
        stream, correlation = args.get("stream"), args.get("correlation")
        if stream is not None and stream.__class__ is not int:
            stream = _integer(stream)
        if correlation is not None and correlation.__class__ is not int:
            correlation = _integer(correlation)
    cat, name = get("cat"), get("name", "")
    ts, dur = get("ts"), get("dur")
    fields = (
        get("ph", ""),
        cat if cat.__class__ is str else None,
        name if name.__class__ is str else str(name),
        ts if ts.__class__ is float else _number(ts),
        dur if dur.__class__ is float else _number(dur),
        get("pid"),
        get("tid"),
        stream,
        correlation,
    )
    return _new_tuple(Event, fields)
