"""Writes the fsdp probe's planted pair for the H200 run (bench/h200.sh fsdp): the CPU tests' decoder
(MODEL in tests/test_fsdp.py, read as text: the GPU image need not have the test dependencies) as
base, and a head whose layers branch on their own index and whose last layer is of a subclass the
wrap policy does not name.

    python bench/fsdp_trees.py DIR   -> DIR/base/model.py, DIR/head/model.py
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def _model_text() -> str:
    tree = ast.parse((REPO / "tests" / "test_fsdp.py").read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "MODEL" for t in node.targets):
            value = ast.literal_eval(node.value)
            assert isinstance(value, str)
            return value
    raise SystemExit("tests/test_fsdp.py has no MODEL")


def main(out: Path) -> None:
    model = _model_text()
    for side, fields in (("base", ("False", "Block")), ("head", ("True", "FinalBlock"))):
        (out / side).mkdir(parents=True, exist_ok=True)
        body = model.format(branch=fields[0], last=fields[1], redistribute="False")
        (out / side / "model.py").write_text(body)


if __name__ == "__main__":
    main(Path(sys.argv[1]))
