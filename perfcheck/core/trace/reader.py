"""A streaming reader of Kineto (PyTorch profiler) chrome traces, plain ``.json`` or ``.json.gz``.

Traces of real training runs reach gigabytes, so the file is never loaded whole: its bytes are
read in chunks of CHUNK_BYTES through a sliding window, and the events of the ``traceEvents``
array are decoded a window at a time, by msgspec straight into ``Event`` (only the fields the
analyses use: the rest of each event is skipped, never built as Python objects). Memory stays at
a window of bytes and the events decoded from it, whatever the size of the file.

A trace is what the PyTorch profiler writes: a JSON object whose ``traceEvents`` array holds
trace events (objects with a ``ph``, the event's phase, which every Chrome trace event has), or
the bare array of events that the Chrome trace format also allows (torch's legacy profiler writes
it). Other values are tolerated among the events, as fields of odd types are, but an array that
holds no trace event at all is no trace: valid JSON that is something else (``[1, 2, 3]``,
``[{"foo": 1}]``, ``[]``) is refused, not read as an empty profile.

What does not fit that fast path is still read exactly: a window whose values have other types
(a name that is a number, a stream written as a string) is decoded generically and converted
event by event; a value that cannot be cut out of a window (a huge event, metadata before the
events) goes through the standard library's incremental decoder.
"""

from __future__ import annotations

import gzip
import io
import json
import re
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgspec

from perfcheck.core.trace.event import Event, to_event

CHUNK_BYTES = 1 << 16
# A single event (or top-level value other than traceEvents) larger than this is not a trace
# we can read incrementally; refusing it keeps a corrupt file from being buffered whole.
MAX_VALUE_BYTES = 64 << 20

_WHITESPACE = re.compile(rb"[ \t\n\r]*")
_EVENTS = msgspec.json.Decoder(list[Event])
_ANY = msgspec.json.Decoder()
_DECODER = json.JSONDecoder()


# What a trace is, for the message that refuses something else.
EXPECTED = (
    'expected a PyTorch profiler (Kineto) trace: a JSON object whose "traceEvents" array holds '
    'trace events (objects with a "ph" field)'
)


class TraceError(ValueError):
    """A trace that cannot be read; the message names the file and says what is wrong."""


class _NotATrace(ValueError):
    """A document (valid JSON or not) that is not shaped as a trace; says what was found instead."""


def _shown(got: bytes) -> str:
    if not got:
        return "the end of the file"
    return repr(chr(got[0])) if got[0] < 0x80 else f"the byte 0x{got[0]:02x}"


def _text_prefix(data: bytes) -> str:
    """``data`` as text, less a UTF-8 sequence that the window's edge cut in two."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as err:
        if err.reason != "unexpected end of data":
            raise  # not a cut sequence: the bytes are not UTF-8
        return data[: err.start].decode("utf-8")


_KINDS = {b"{": "an object", b"[": "an array", b'"': "a string"}
_LITERALS = {b"n": (b"null", "null"), b"t": (b"true", "a boolean"), b"f": (b"false", "a boolean")}


class _Window:
    """A sliding window over a byte stream: the unread part of the current chunk, refilled on demand."""

    def __init__(self, stream: io.BufferedIOBase, chunk_bytes: int) -> None:
        self._stream = stream
        self._chunk = chunk_bytes
        self.buf = b""
        self.pos = 0
        self.eof = False

    def more(self, at_least: int = 0) -> None:
        data = self._stream.read(max(self._chunk, at_least))
        if not data:
            self.eof = True
            return
        # Dropping the consumed prefix here is what keeps memory bounded.
        self.buf = self.buf[self.pos :] + data
        self.pos = 0

    def peek(self) -> bytes:
        """The next byte that is not whitespace, without consuming it; b'' at the end."""
        while True:
            self.pos = _WHITESPACE.match(self.buf, self.pos).end()  # type: ignore[union-attr]
            if self.pos < len(self.buf) or self.eof:
                return self.buf[self.pos : self.pos + 1]
            self.more()

    def take(self, expected: bytes) -> None:
        got = self.peek()
        if got != expected:
            raise ValueError(f"expected {chr(expected[0])!r}, found {_shown(got)}")
        self.pos += 1

    def what(self) -> str:
        """What the JSON value that starts here is, in words, read no further than its first bytes."""
        got = self.peek()
        if got in _KINDS:
            return _KINDS[got]
        if got and got in b"-0123456789":
            return "a number"
        if got in _LITERALS:
            literal, words = _LITERALS[got]
            if len(self.buf) - self.pos < len(literal) and not self.eof:
                self.more(len(literal))
            if self.buf.startswith(literal, self.pos):
                return words
        return f"not JSON (it begins with {_shown(got)})"

    def value(self) -> Any:
        """Decode the next JSON value, reading more while it runs past the window.

        The standard library's incremental decoder reads text, so a slice of the window is
        converted first: a small one, doubled while the value runs past it, so that decoding many
        small values one by one costs their size, not a window each.
        """
        self.peek()
        size = 4096
        while True:
            available = len(self.buf) - self.pos
            whole = size >= available  # the slice reaches the end of what has been read
            text = _text_prefix(self.buf[self.pos : self.pos + size])
            try:
                obj, end = _DECODER.raw_decode(text)
                # A number that ends exactly at the slice's edge may continue after it.
                if end < len(text) or (whole and self.eof):
                    self.pos += len(text[:end].encode("utf-8"))
                    return obj
            except json.JSONDecodeError as err:
                if whole and (self.eof or available > MAX_VALUE_BYTES):
                    raise ValueError(f"invalid JSON ({err.msg})") from None
            if whole:
                self.more(available)  # at least doubles the window
            size *= 2

    def batch(self) -> list[Event] | None:
        """The events from here to the last whole event in the window, decoded in one call.

        The window is cut after a ``},``: if that cut falls inside a string or a nested value,
        the slice is not valid JSON and an earlier cut is tried, so a successful decode always
        ends on an event boundary. None: decode one value at a time.
        """
        if len(self.buf) - self.pos < self._chunk // 2 and not self.eof:
            self.more()
        end = len(self.buf)
        for _ in range(3):
            cut = self.buf.rfind(b"},", self.pos, end)
            if cut < 0:
                return None
            doc = b"[" + self.buf[self.pos : cut + 1] + b"]"
            events = _decode_events(doc)
            if events is None:
                end = cut
                continue
            self.pos = cut + 1
            return events
        return None


def _decode_events(doc: bytes) -> list[Event] | None:
    """The events of a JSON array; None if ``doc`` is not valid JSON."""
    try:
        return _EVENTS.decode(doc)
    except msgspec.ValidationError:
        pass  # values of other types than Event's, or invalid JSON past the one that failed
    except msgspec.DecodeError:
        return None
    try:
        values = _ANY.decode(doc)
    except msgspec.DecodeError:
        return None
    return [to_event(raw) for raw in values if raw.__class__ is dict]


def _array(window: _Window) -> Iterator[list[Event]]:
    window.take(b"[")
    if window.peek() == b"]":
        return
    while True:
        events = window.batch() if window.peek() == b"{" else None
        if events is None:
            raw = window.value()
            events = [to_event(raw)] if raw.__class__ is dict else []
        yield events
        if window.peek() == b"]":
            return
        window.take(b",")


def _events(window: _Window, where: str) -> Iterator[list[Event]]:
    """The batches of the events array at the window, refused at its end if none of them held a
    trace event: the check costs a look at a batch's first events until one has a phase."""
    found = False
    for events in _array(window):
        if not found:
            found = any(e.ph for e in events)
        yield events
    if not found:
        raise _NotATrace(f"{where} holds no trace event")


def _batches(window: _Window) -> Iterator[list[Event]]:
    # The chrome trace format also allows a bare array of events; Kineto writes the object form.
    first = window.peek()
    if first == b"[":
        yield from _events(window, "the array")
        return
    if first != b"{":
        raise _NotATrace(f"the file is {window.what()}")
    window.take(b"{")
    if window.peek() == b"}":
        raise _NotATrace("the object has no traceEvents array")
    while True:
        key = window.value()
        window.take(b":")
        if key == "traceEvents":
            if window.peek() != b"[":
                raise _NotATrace(f"its traceEvents is {window.what()}, not an array")
            yield from _events(window, "its traceEvents array")
            return
        window.value()  # metadata beside the events (deviceProperties, distributedInfo, ...)
        if window.peek() == b"}":
            raise _NotATrace("the object has no traceEvents array")
        window.take(b",")


def _open(path: Path) -> io.BufferedIOBase:
    with path.open("rb") as probe:
        magic = probe.read(2)
    if magic == b"\x1f\x8b":
        return gzip.open(path, "rb")
    return path.open("rb")


def iter_batches(path: Path, chunk_bytes: int = CHUNK_BYTES) -> Iterator[list[Event]]:
    """The events of the trace's ``traceEvents`` array, in file order, a window's worth at a
    time: what a pass over a large trace should loop over (one Python call per window, not per
    event)."""
    try:
        stream = _open(path)
    except OSError as err:
        raise TraceError(f"{path}: cannot read it ({err.strerror or err})") from None
    with stream:
        try:
            yield from _batches(_Window(stream, chunk_bytes))
        except _NotATrace as err:
            raise TraceError(f"{path}: not a Kineto trace: {err}; {EXPECTED}") from None
        except RecursionError:
            # The generic decoder recurses per level of nesting; no profiler nests this deep.
            raise TraceError(f"{path}: not a readable Kineto trace: values nested too deeply") from None
        except (ValueError, OSError, EOFError, zlib.error) as err:
            # gzip and UTF-8 errors surface here too; all mean the same to the user.
            raise TraceError(f"{path}: not a readable Kineto trace: {err}") from None


def iter_events(path: Path, chunk_bytes: int = CHUNK_BYTES, timed_only: bool = False) -> Iterator[Event]:
    """The events of the trace's ``traceEvents`` array, one at a time. ``timed_only`` skips the
    events without a duration (flows, instants, metadata), which no time analysis uses."""
    for batch in iter_batches(path, chunk_bytes):
        for event in batch:
            if not timed_only or event.dur is not None:
                yield event
