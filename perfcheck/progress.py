"""Progress for long work: a live line on a terminal, one plain line per finished step in CI logs."""

from __future__ import annotations

import sys
import threading
import time
from typing import TextIO


class Task:
    def __init__(self, progress: Progress, label: str) -> None:
        self.progress = progress
        self.label = label
        self.detail = ""
        self.started = time.monotonic()

    def note(self, detail: str) -> None:
        """Extra detail for the live line (a round count, say); logs get only the finished line."""
        self.detail = detail

    def finish(self, outcome: str) -> None:
        self.progress._finish(self, outcome)


class Progress:
    """Safe to use from several threads: tasks may run concurrently."""

    def __init__(self, total: int, stream: TextIO | None = None, live: bool | None = None) -> None:
        self.total = total
        self.done = 0
        self.stream = stream or sys.stderr
        self.live = self.stream.isatty() if live is None else live
        self._running: list[Task] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._ticker: threading.Thread | None = None

    def begin(self, label: str) -> Task:
        task = Task(self, label)
        with self._lock:
            self._running.append(task)
            if self.live and self._ticker is None:
                self._stop.clear()
                self._ticker = threading.Thread(target=self._tick, daemon=True)
                self._ticker.start()
        return task

    def say(self, line: str) -> None:
        """A line of its own between the finished steps (the plan, a step cut to fit)."""
        with self._lock:
            clear = "\r\x1b[2K" if self.live else ""
            self.stream.write(f"{clear}{line}\n")
            self.stream.flush()

    def _line(self) -> str:
        newest = self._running[-1]
        more = f" (+{len(self._running) - 1} running)" if len(self._running) > 1 else ""
        detail = f" {newest.detail}" if newest.detail else ""
        elapsed = time.monotonic() - newest.started
        return f"[{self.done + 1}/{self.total}] {newest.label} …{detail} {elapsed:5.1f}s{more}"

    def _tick(self) -> None:
        while not self._stop.wait(0.2):
            with self._lock:
                if self._running:
                    self.stream.write("\r\x1b[2K" + self._line())
                    self.stream.flush()

    def _finish(self, task: Task, outcome: str) -> None:
        with self._lock:
            self._running.remove(task)
            self.done += 1
            clear = "\r\x1b[2K" if self.live else ""
            elapsed = time.monotonic() - task.started
            self.stream.write(f"{clear}[{self.done}/{self.total}] {task.label}: {outcome} ({elapsed:.1f}s)\n")
            self.stream.flush()
            if not self._running and self._ticker is not None:
                self._stop.set()
                ticker, self._ticker = self._ticker, None
            else:
                ticker = None
        if ticker is not None:
            ticker.join()
