"""`perfcheck schema` and `render`: the result contract's JSON Schemas, and the comment rendered
again from a recorded result.json.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

EXIT_BAD_INPUT = 2


def _cmd_schema(args: argparse.Namespace) -> int:
    import json

    from perfcheck.schema import json_schema

    print(json.dumps(json_schema(args.document), indent=2))
    return 0


def _cmd_render(args: argparse.Namespace) -> int:
    from perfcheck.config import ConfigError, load_config
    from perfcheck.core.matrix import merged
    from perfcheck.core.render import render_comment
    from perfcheck.schema import ContractError, load_review

    try:
        config = load_config(args.config, Path.cwd())  # first: its plugins' categories are known then
        review = load_review(args.result)
    except (ConfigError, ContractError) as err:
        print(f"perfcheck: {err}", file=sys.stderr)
        return EXIT_BAD_INPUT
    print(render_comment(review, args.templates, matrix=merged(config.matrix)))
    return 0


def add_schema_parser(sub: Any) -> None:
    schema = sub.add_parser(
        "schema",
        help="print the JSON Schema of result.json, probes.json or a --json output",
        description="Print the JSON Schema of one of perfcheck's documents: the review result "
        "(result.json, the default), a probe run (probes.json), or what `perfcheck trace summary "
        "--json` and `trace diff --json` print.",
        epilog="Exit codes: 0 printed, 2 an unknown document.",
    )
    schema.add_argument(
        "document",
        nargs="?",
        default="result",
        choices=("result", "probe-run", "trace-summary", "trace-diff", "bisect"),
        help="which document (default %(default)s)",
    )
    schema.set_defaults(func=_cmd_schema)


def add_render_parser(sub: Any) -> None:
    render = sub.add_parser(
        "render",
        help="render the comment from a result.json",
        description="Validate a result.json as untrusted data and print its review comment.",
        epilog="Exit codes: 0 printed, 2 bad input (a result or config that cannot be read).",
    )
    render.add_argument("result", type=Path, help="path to result.json")
    render.add_argument("--templates", type=Path, help="folder with your own comment.md.j2")
    render.add_argument(
        "--config", type=Path, help="settings file: its plugins and matrix (default: perfcheck.yml here)"
    )
    render.set_defaults(func=_cmd_render)
