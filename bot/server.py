"""The HTTP server `perfcheck serve` runs the webhook app under: waitress, configured for a public
endpoint that must keep answering GitHub while someone else holds connections open.

Waitress reads each request on its own asynchronous loop and hands only complete requests to its
worker threads, so a connection that sends nothing, or a byte at a time, occupies no thread; a
channel idle for ``channel_timeout`` seconds is closed; bodies and headers are bounded before the
app sees them. Tracebacks never reach a client.
"""

from __future__ import annotations

from typing import Any

from waitress.server import create_server

from perfcheck.bot.webhook import MAX_PAYLOAD_BYTES

SETTINGS: dict[str, Any] = {
    "threads": 8,
    "connection_limit": 1000,  # open connections before new ones wait in the backlog
    "channel_timeout": 10,  # seconds a connection may sit idle (GitHub sends at once)
    "cleanup_interval": 2,
    "max_request_body_size": MAX_PAYLOAD_BYTES,
    "max_request_header_size": 64 * 1024,
    "expose_tracebacks": False,
    "ident": "perfcheck",
}


def make_server(app: Any, host: str, port: int, **overrides: Any) -> Any:
    """A server bound to ``host:port`` (0: any free port; see ``effective_port``); ``run()`` serves
    until ``close()``."""
    return create_server(app, host=host, port=port, **{**SETTINGS, **overrides})
