"""Argument types shared by the command-line modules."""

from __future__ import annotations

import argparse


def positive(value: str) -> int:
    try:
        n = int(value)
    except ValueError:
        n = 0
    if n < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number of at least 1, got {value!r}")
    return n


def comma_separated(value: str) -> tuple[str, ...]:
    return tuple(v.strip() for v in value.split(",") if v.strip())


def names(value: str) -> tuple[str, ...]:
    """A --workloads/--probes value: at least one name. An empty one must not mean "all"."""
    names = comma_separated(value)
    if not names:
        raise argparse.ArgumentTypeError(f"expected comma-separated names, got {value!r}")
    return names
