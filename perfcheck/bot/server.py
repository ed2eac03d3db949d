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


def bounds_notice(settings: dict[str, Any] = SETTINGS) -> str:
    """What ``serve`` says at start-up: the bounds it keeps, and that a flood beyond them is not
    its to stop. Waitress caps connections for the whole server, not per client, so one client
    holding more idle ones than ``connection_limit`` (1,100 of 1,000) makes signed deliveries
    wait in the backlog until the idle ones time out; per-client limits belong in front of it."""
    mb = settings["max_request_body_size"] / (1024 * 1024)
    return (
        f"bounds: {settings['connection_limit']:,} open connections, {settings['channel_timeout']} s "
        f"idle, {mb:g} MB bodies, {settings['threads']} threads; a connection flood beyond these "
        "(one client holding more idle connections than the limit) is a reverse proxy's job: put one "
        "in front (nginx, a cloud load balancer) with per-client connection and rate limits"
    )
