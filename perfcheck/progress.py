"""Progress for long work: a live line on a terminal, one plain line per finished step in CI logs."""

from __future__ import annotations

import sys
import threading
import time
from typing import TextIO


class Progress:
    def __init__(self, total: int, stream: TextIO | None = None, live: bool | None = None) -> None:
        self.total = total
        self.done = 0
        self.stream = stream or sys.stderr
        self.live = self.stream.isatty() if live is None else live
        self._label = ""
        self._started = 0.0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self, label: str) -> None:
        self._label = label
        self._started = time.monotonic()
        if self.live:
            self._stop.clear()
            self._thread = threading.Thread(target=self._tick, daemon=True)
            self._thread.start()

    def _line(self) -> str:
        return f"[{self.done + 1}/{self.total}] {self._label} … {time.monotonic() - self._started:5.1f}s"

    def _tick(self) -> None:
        while not self._stop.wait(0.2):
            self.stream.write("\r\x1b[2K" + self._line())
            self.stream.flush()

    def finish(self, outcome: str) -> None:
        elapsed = time.monotonic() - self._started
        if self._thread is not None:
            self._stop.set()
            self._thread.join()
            self._thread = None
            self.stream.write("\r\x1b[2K")
        self.done += 1
        self.stream.write(f"[{self.done}/{self.total}] {self._label}: {outcome} ({elapsed:.1f}s)\n")
        self.stream.flush()
