"""perfcheck's light commands as whole processes, as a user meets them: each one run ``--repeat``
times under ``/usr/bin/time -f '%e %M'`` (wall seconds, peak RSS), start-up included; the median is
the typical figure, the minimum the least disturbed on a shared machine.

    .venv/bin/python bench/startup.py [--repeat 10] [--bytecode]

Another checkout's perfcheck (the one before a change, say) runs through the same interpreter
and packages when it comes first on the path: ``git worktree add /tmp/before REV`` and
``PYTHONPATH=/tmp/before .venv/bin/python bench/startup.py``.

A machine that sets PYTHONDONTWRITEBYTECODE (this one does) compiles an editable checkout's
modules from source in every process; ``--bytecode`` measures as a pip-installed perfcheck runs,
from compiled bytecode: the variable unset, bytecode kept in a folder of its own
(PYTHONPYCACHEPREFIX), one unmeasured run of each command first. bench/trace_vs_hta.py
--whole-process times ``perfcheck trace summary`` against HolisticTraceAnalysis the same way.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
SMALL_TRACE = REPO / "tests" / "data" / "h200-device-pass.trace.json.gz"
# Where the measured processes run: not a checkout, whose folder `python -c` would put first on
# the path, ahead of PYTHONPATH.
NEUTRAL = tempfile.gettempdir()


def environment(bytecode: bool) -> dict[str, str]:
    """The environment of the measured processes: this one's, or with bytecode kept (``--bytecode``)."""
    env = dict(os.environ)
    if bytecode:
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        env["PYTHONPYCACHEPREFIX"] = env.get("PYTHONPYCACHEPREFIX") or tempfile.mkdtemp(prefix="pyc-")
    return env


def timed(argv: Sequence[str], env: dict[str, str]) -> tuple[float, float]:
    """One whole process under /usr/bin/time: its wall seconds and peak RSS in MiB; its output is
    discarded, and a failure stops the bench."""
    with tempfile.NamedTemporaryFile("r", suffix=".time") as out:
        done = subprocess.run(
            ["/usr/bin/time", "-o", out.name, "-f", "%e %M", *argv],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
            cwd=NEUTRAL,
            check=False,
        )
        if done.returncode != 0:
            raise SystemExit(f"{' '.join(argv)} failed ({done.returncode}):\n{done.stderr[-3000:]}")
        seconds, kib = out.read().split()[-2:]
    return float(seconds), int(kib) / 1024


def summary(runs: list[tuple[float, float]]) -> tuple[float, float, float]:
    """Median seconds, minimum seconds, median peak MiB."""
    times = [t for t, _ in runs]
    return statistics.median(times), min(times), statistics.median(m for _, m in runs)


def load() -> str:
    return "load average " + " / ".join(f"{x:.2f}" for x in os.getloadavg()) + " (1 / 5 / 15 min)"


def _modules(python: str, argv: Sequence[str], env: dict[str, str]) -> int:
    """How many modules the command imports (Python's -X importtime list)."""
    done = subprocess.run(
        [python, "-X", "importtime", *argv], capture_output=True, text=True, env=env, cwd=NEUTRAL, check=False
    )
    return sum(1 for line in done.stderr.splitlines() if line.startswith("import time:"))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--python", default=sys.executable, help="python with perfcheck (default: this one)")
    parser.add_argument("--repeat", type=int, default=10)
    parser.add_argument("--bytecode", action="store_true", help="measure from compiled bytecode (see above)")
    parser.add_argument(
        "--trace", type=Path, default=SMALL_TRACE, help="a small trace (default: %(default)s)"
    )
    args = parser.parse_args()
    script = str(Path(args.python).parent / "perfcheck")
    summary_argv = [script, "trace", "summary", str(args.trace.resolve())]
    commands = {
        "python -c pass (the interpreter alone)": [args.python, "-c", "pass"],
        "python -c 'import perfcheck.core.trace'": [args.python, "-c", "import perfcheck.core.trace"],
        "perfcheck --help": [script, "--help"],
        "perfcheck trace --help": [script, "trace", "--help"],
        f"perfcheck trace summary {args.trace.name}": summary_argv,
        f"perfcheck trace summary {args.trace.name} --json": [*summary_argv, "--json"],
    }
    env = environment(args.bytecode)
    if args.bytecode:
        for argv in commands.values():
            timed(argv, env)
    where = subprocess.run(
        [args.python, "-c", "import perfcheck; print(perfcheck.__file__)"],
        capture_output=True,
        text=True,
        env=env,
        cwd=NEUTRAL,
        check=True,
    ).stdout.strip()
    print(f"perfcheck from {where}; PYTHONDONTWRITEBYTECODE={env.get('PYTHONDONTWRITEBYTECODE', '(unset)')}")
    print(f"before: {load()}")
    print("\n| command | s (median / min) | peak MiB | modules imported |")
    print("|---|---|---|---|")
    runs: dict[str, list[tuple[float, float]]] = {name: [] for name in commands}
    for _ in range(args.repeat):  # round-robin, so that a busy minute slows every command alike
        for name, argv in commands.items():
            runs[name].append(timed(argv, env))
    for name, argv in commands.items():
        median, least, mib = summary(runs[name])
        count = _modules(args.python, argv[1:] if argv[0] == args.python else argv, env)
        print(f"| `{name}` | {median:.2f} / {least:.2f} | {mib:.0f} | {count} |")
    print(f"\nafter: {load()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
