"""A streaming reader of Kineto (PyTorch profiler) chrome traces, plain ``.json`` or ``.json.gz``.

Traces of real training runs reach gigabytes, so the file is never loaded whole: the text is read
in chunks of CHUNK_CHARS through a sliding window, and the events of the ``traceEvents`` array are
decoded by the C JSON decoder a window at a time (one event at a time where a window cannot be
cut cleanly), each reduced at once to the fields the analyses use. Memory stays at a window of
text and the events decoded from it, whatever the size of the file.
"""

from __future__ import annotations

import gzip
import json
import re
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

from perfcheck.core.trace.event import Event, to_event

CHUNK_CHARS = 1 << 16
# A single event (or top-level value other than traceEvents) larger than this is not a trace
# we can read incrementally; refusing it keeps a corrupt file from being buffered whole.
MAX_VALUE_CHARS = 64 << 20

_WHITESPACE = re.compile(r"[ \t\n\r]*")
_DECODER = json.JSONDecoder()


class TraceError(ValueError):
    """A trace that cannot be read; the message names the file and says what is wrong."""


class _Text:
    """A sliding window over a text stream: the unread part of the current chunk, refilled on demand."""

    def __init__(self, stream: IO[str], chunk_chars: int) -> None:
        self._stream = stream
        self._chunk = chunk_chars
        self.buf = ""
        self.pos = 0
        self.eof = False

    def more(self) -> None:
        data = self._stream.read(self._chunk)
        if not data:
            self.eof = True
            return
        # Dropping the consumed prefix here is what keeps memory bounded.
        self.buf = self.buf[self.pos :] + data
        self.pos = 0

    def peek(self) -> str:
        """The next character that is not whitespace, without consuming it; '' at the end."""
        while True:
            self.pos = _WHITESPACE.match(self.buf, self.pos).end()  # type: ignore[union-attr]
            if self.pos < len(self.buf) or self.eof:
                return self.buf[self.pos] if self.pos < len(self.buf) else ""
            self.more()

    def take(self, expected: str) -> None:
        got = self.peek()
        if got != expected:
            shown = repr(got) if got else "the end of the file"
            raise ValueError(f"expected {expected!r}, found {shown}")
        self.pos += 1

    def value(self) -> Any:
        """Decode the next JSON value, reading more text while it runs past the window."""
        self.peek()
        while True:
            try:
                obj, end = _DECODER.raw_decode(self.buf, self.pos)
            except json.JSONDecodeError as err:
                if self.eof or len(self.buf) - self.pos > MAX_VALUE_CHARS:
                    raise ValueError(f"invalid JSON ({err.msg})") from None
                self.more()
                continue
            # A number that ends exactly at the window's edge may continue in the next chunk.
            if end < len(self.buf) or self.eof:
                self.pos = end
                return obj
            self.more()

    def batch(self) -> list[Any] | None:
        """The values from here to the last whole event in the window, decoded in one call.

        Per-event decoding pays a Python round trip per event; one ``json.loads`` over a window of
        them runs at the C decoder's speed. The window is cut after a ``},``: if that cut falls
        inside a string or a nested value, the slice is not valid JSON and an earlier cut is tried,
        so a successful decode always ends on an event boundary. None: decode one by one.
        """
        if len(self.buf) - self.pos < self._chunk // 2 and not self.eof:
            self.more()
        end = len(self.buf)
        for _ in range(3):
            cut = self.buf.rfind("},", self.pos, end)
            if cut < 0:
                return None
            try:
                values = json.loads(f"[{self.buf[self.pos : cut + 1]}]")
            except json.JSONDecodeError:
                end = cut
                continue
            self.pos = cut + 1
            return values
        return None


def _array(text: _Text, timed_only: bool) -> Iterator[Event]:
    text.take("[")
    if text.peek() == "]":
        return
    while True:
        values = text.batch() if text.peek() == "{" else None
        for raw in values if values is not None else (text.value(),):
            if raw.__class__ is dict and (not timed_only or "dur" in raw):
                yield to_event(raw)
        if text.peek() == "]":
            return
        text.take(",")


def _events(text: _Text, timed_only: bool) -> Iterator[Event]:
    # The chrome trace format also allows a bare array of events; Kineto writes the object form.
    if text.peek() == "[":
        yield from _array(text, timed_only)
        return
    text.take("{")
    if text.peek() == "}":
        raise ValueError("no traceEvents array")
    while True:
        key = text.value()
        text.take(":")
        if key == "traceEvents":
            yield from _array(text, timed_only)
            return
        text.value()  # metadata beside the events (deviceProperties, distributedInfo, ...)
        if text.peek() == "}":
            raise ValueError("no traceEvents array")
        text.take(",")


def _open(path: Path) -> IO[str]:
    with path.open("rb") as probe:
        magic = probe.read(2)
    if magic == b"\x1f\x8b":
        return gzip.open(path, "rt", encoding="utf-8")
    return path.open("r", encoding="utf-8")


def iter_events(path: Path, chunk_chars: int = CHUNK_CHARS, timed_only: bool = False) -> Iterator[Event]:
    """The events of the trace's ``traceEvents`` array, streamed one at a time, each reduced to
    the fields in ``Event``. ``timed_only`` skips, before any conversion, the events without a
    duration (flows, instants, metadata), which no time analysis uses."""
    try:
        stream = _open(path)
    except OSError as err:
        raise TraceError(f"{path}: cannot read it ({err.strerror or err})") from None
    with stream:
        try:
            yield from _events(_Text(stream, chunk_chars), timed_only)
        except (ValueError, OSError, EOFError, zlib.error) as err:
            # gzip and UTF-8 errors surface here too; all mean the same to the user.
            raise TraceError(f"{path}: not a readable Kineto trace: {err}") from None
