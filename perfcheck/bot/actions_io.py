"""GitHub Actions' file-based step outputs.

Values can come from events (branch names, logins, reasons), so every value is written with a
heredoc delimiter that no value contains: a newline in a value can never start another output.
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Mapping
from pathlib import Path


def format_outputs(values: Mapping[str, object]) -> str:
    lines = []
    for key, value in values.items():
        text = "" if value is None else (str(value).lower() if isinstance(value, bool) else str(value))
        delimiter = f"perfcheck_{secrets.token_hex(8)}"
        while delimiter in text:
            delimiter = f"perfcheck_{secrets.token_hex(8)}"
        lines.append(f"{key}<<{delimiter}\n{text}\n{delimiter}\n")
    return "".join(lines)


def write_outputs(values: Mapping[str, object], environ: Mapping[str, str] = os.environ) -> bool:
    """Append to $GITHUB_OUTPUT when running inside Actions; False elsewhere."""
    target = environ.get("GITHUB_OUTPUT")
    if not target:
        return False
    with Path(target).open("a", encoding="utf-8") as f:
        f.write(format_outputs(values))
    return True
