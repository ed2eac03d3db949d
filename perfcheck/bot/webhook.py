"""GitHub App mode: a WSGI application that receives webhooks and hands them to a worker thread.

It checks ``X-Hub-Signature-256`` in constant time before reading anything else, drops a delivery
id it has already accepted, and answers at once (GitHub gives a webhook 10 seconds): the work of
looking things up, deciding and answering on GitHub happens on a background thread. Standard
library only, so any WSGI server can host it; ``perfcheck serve`` runs it under waitress
(``perfcheck/bot/server.py``). A delivery is dropped when its id or its signed body was accepted before: a
replayed body under a new id is still the same delivery.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import queue
import sys
import threading
import traceback
from collections import OrderedDict
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, TextIO

from perfcheck.bot.events import EVENT_MODELS

MAX_PAYLOAD_BYTES = 25 * 1024 * 1024  # GitHub does not send larger payloads


@dataclass(frozen=True)
class Delivery:
    id: str
    event: str
    payload: dict[str, Any]


def signature_ok(secret: bytes, body: bytes, header: str | None) -> bool:
    if not header or not header.startswith("sha256="):
        return False
    expected = "sha256=" + hmac.new(secret, body, hashlib.sha256).hexdigest()
    return hmac.compare_digest(expected.encode(), header.strip().encode())


class DeliveryLog:
    """The most recent delivery ids, to drop GitHub's repeats; bounded so it cannot grow forever."""

    def __init__(self, size: int = 10_000) -> None:
        self._ids: OrderedDict[str, None] = OrderedDict()
        self._size = size
        self._lock = threading.Lock()

    def first_time(self, delivery_id: str) -> bool:
        with self._lock:
            if delivery_id in self._ids:
                return False
            self._ids[delivery_id] = None
            while len(self._ids) > self._size:
                self._ids.popitem(last=False)
            return True


class Worker:
    """One background thread that handles deliveries in arrival order; a failure is logged, not fatal."""

    def __init__(self, handle: Callable[[Delivery], None], log: TextIO | None = None) -> None:
        self._handle = handle
        self._queue: queue.Queue[Delivery | None] = queue.Queue()
        self._log = log or sys.stderr
        self._thread = threading.Thread(target=self._loop, name="perfcheck-webhook-worker", daemon=True)

    def start(self) -> Worker:
        self._thread.start()
        return self

    def submit(self, delivery: Delivery) -> None:
        self._queue.put(delivery)

    def stop(self, timeout: float = 30.0) -> None:
        self._queue.put(None)
        self._thread.join(timeout)

    def drain(self) -> None:
        """Wait until every delivery submitted so far has been handled."""
        self._queue.join()

    def _loop(self) -> None:
        while True:
            item = self._queue.get()
            try:
                if item is None:
                    return
                self._handle(item)
            except Exception:
                print(f"perfcheck serve: delivery {item.id if item else '?'} failed:", file=self._log)
                traceback.print_exc(file=self._log)
            finally:
                self._queue.task_done()


Respond = Callable[[str, list[tuple[str, str]]], Any]


class WebhookApp:
    def __init__(self, secret: bytes, worker: Worker, log: DeliveryLog | None = None) -> None:
        if not secret:
            raise ValueError("a webhook secret is required: unsigned deliveries would be accepted")
        self._secret = secret
        self._worker = worker
        self._seen = log or DeliveryLog()

    def __call__(self, environ: dict[str, Any], start_response: Respond) -> Iterable[bytes]:
        def answer(status: str, message: str) -> list[bytes]:
            body = json.dumps({"message": message}).encode()
            start_response(status, [("Content-Type", "application/json"), ("Content-Length", str(len(body)))])
            return [body]

        if environ.get("REQUEST_METHOD") != "POST":
            return answer("405 Method Not Allowed", "webhooks are POSTed")
        try:
            length = int(environ.get("CONTENT_LENGTH") or 0)
        except ValueError:
            length = -1
        if length < 0 or length > MAX_PAYLOAD_BYTES:
            return answer("413 Payload Too Large", "payload size missing or too large")
        body = environ["wsgi.input"].read(length) if length else b""
        if not signature_ok(self._secret, body, environ.get("HTTP_X_HUB_SIGNATURE_256")):
            return answer("401 Unauthorized", "signature does not match")
        event = environ.get("HTTP_X_GITHUB_EVENT", "")
        delivery_id = environ.get("HTTP_X_GITHUB_DELIVERY", "")
        if not delivery_id:
            return answer("400 Bad Request", "X-GitHub-Delivery is missing")
        if event == "ping":
            return answer("200 OK", "pong")
        if event not in EVENT_MODELS:
            return answer("202 Accepted", f"event {event!r} is not handled; ignored")
        try:
            payload = json.loads(body)
        except (ValueError, RecursionError):
            return answer("400 Bad Request", "payload is not JSON (or nested too deep)")
        if not isinstance(payload, dict):
            return answer("400 Bad Request", "payload is not a JSON object")
        body_key = "sha256:" + hashlib.sha256(body).hexdigest()
        if not self._seen.first_time(delivery_id) or not self._seen.first_time(body_key):
            return answer("200 OK", f"delivery {delivery_id} was already received; ignored")
        self._worker.submit(Delivery(delivery_id, event, payload))
        return answer("202 Accepted", f"delivery {delivery_id} queued")
