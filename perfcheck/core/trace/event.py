"""One trace event, reduced to the fields the analyses read.

``Event`` is a msgspec Struct so that the reader can decode a window of the trace straight into
these fields: msgspec skips every other key of an event (Kineto's ``args`` carry input shapes,
call stacks, ids) without building a Python object for it, which is most of what a generic JSON
decoder spends its time on. ``to_event`` builds the same Struct from an already decoded object,
for the rare windows whose values do not fit these types.
"""

from __future__ import annotations

from typing import Any

import msgspec


class Args(msgspec.Struct, gc=False):
    """The two ``args`` of a GPU activity that the analyses use."""

    stream: int | None = None  # set on GPU activity (kernels, memcpy, memset)
    correlation: int | None = None  # links a GPU activity to the CPU call that launched it


# gc=False: events never reference each other, and untracked objects keep the cyclic garbage
# collector from re-scanning every live event of a window as they are allocated.
class Event(msgspec.Struct, gc=False):
    """The fields of one trace event that the analyses need."""

    ph: str = ""  # the event's phase ("X" complete, "M" metadata, ...): "" for an object that is no event
    cat: str | None = None
    name: str = ""
    ts: float | None = None
    dur: float | None = None
    pid: int | str | None = None
    tid: int | str | None = None
    args: Args | None = None

    @property
    def stream(self) -> int | None:
        return self.args.stream if self.args is not None else None

    @property
    def correlation(self) -> int | None:
        return self.args.correlation if self.args is not None else None


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


def _ident(value: Any) -> int | str | None:
    # A process or thread id is a key, never a number to compute with: anything unusual is kept
    # as its text so that it still tells threads apart.
    if value is None or value.__class__ in (int, str):
        return value
    return repr(value)


def to_event(raw: dict[str, Any]) -> Event:
    """The fields of one decoded event object, whatever their JSON types: a time that is not a
    number is absent, a name that is not a string is its text."""
    get = raw.get
    args = get("args")
    fields = None
    if args.__class__ is dict:
        fields = Args(_integer(args.get("stream")), _integer(args.get("correlation")))
    ph, cat, name = get("ph", ""), get("cat"), get("name", "")
    return Event(
        ph=ph if ph.__class__ is str else "",  # a phase is a string: anything else is none
        cat=cat if cat.__class__ is str else None,
        name=name if name.__class__ is str else str(name),
        ts=_number(get("ts")),
        dur=_number(get("dur")),
        pid=_ident(get("pid")),
        tid=_ident(get("tid")),
        args=fields,
    )
