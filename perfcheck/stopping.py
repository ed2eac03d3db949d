"""How a command that runs probes is stopped: Ctrl-C raises KeyboardInterrupt, SIGTERM
``Terminated`` (perfcheck/cli/main.py installs the handler). The review catches either on its way out
to write what it measured before the stop (perfcheck/review.py)."""

from __future__ import annotations


class Terminated(Exception):
    """SIGTERM, as KeyboardInterrupt is SIGINT."""


STOPS = (KeyboardInterrupt, Terminated)


def stop_name(stop: BaseException) -> str:
    """The stop as a user sent it: ``SIGTERM`` or ``Ctrl-C``."""
    return "SIGTERM" if isinstance(stop, Terminated) else "Ctrl-C"
