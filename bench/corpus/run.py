"""Real pull requests reviewed forward and reversed (issue 54): merged upstream PRs that add or
remove graph breaks, export failures or recompiles, each reviewed as it was merged (base: the
merge's first parent, head: the merge) and undone (the two swapped: what a regressing PR looks
like), with the default config, whole `perfcheck review` processes.

    python bench/corpus/run.py --mirrors /work/.mirror --work /tmp/corpus-run \\
        --out docs/data/issue-54/corpus.json [--cases pyg-softmax-ptr,...] [--perfcheck PATH]

``--mirrors``: a folder holding each repository as ``owner+name/repo`` (a bare git directory, as
the `fetch` tool leaves it) or ``owner+name`` (a clone). The trees are written with ``git archive``
at the PR's commits; beside each goes the case's workload (``bench/corpus/<case>.py``, this
project's code, which imports the repository's) and a perfcheck.yml naming it. Nothing of the
repositories is kept here. The interpreter running the reviews needs what the repositories
import (docs/benchmarks.md lists the packages).

Each run is scored against what is right for it: the verdict, and how many causes the review
tells (the headline's causes, plus any error finding no cause holds), which for a reversed run of
a PR that fixed one thing is one.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent


@dataclass(frozen=True)
class Case:
    name: str
    repo: str  # owner/name on GitHub
    merge: str  # the merged commit; base is its first parent
    title: str
    # What is right: the verdict forward, and the causes a reversed review tells.
    forward: str = "pass"
    reversed_causes: int = 1
    probes: tuple[str, ...] = ()  # the workload's probes where the defaults cannot run (empty: defaults)
    why: str = ""  # why a case expects other than the usual


CASES = (
    Case(
        "pyg-dense-batch2",
        "pyg-team/pytorch_geometric",
        "0d5d0909a14c97961af984450ca7e284e34258b4",
        "fix(perf): Don't use data-dependent op when batch_size and max_num_nodes are provided to "
        "to_dense_batch (#10660)",
    ),
    Case(
        "pyg-softmax-ptr",
        "pyg-team/pytorch_geometric",
        "3cbab309ab819b3720ee7dbdcd2b9719779381fc",
        "Avoid stream sync in torch_geometric.utils.softmax (#10499)",
        reversed_causes=2,
        why="the PR changes two repeat_interleave calls, each a break of its own when undone",
    ),
    Case(
        "frame-met",
        "pyg-team/pytorch-frame",
        "8e964d27d84ff500b71e5fa2b68e1681aea83866",
        "fix(pt2): Skip data-dependent validation to allow constructing mnt/met in compiled regions (#605)",
    ),
    Case(
        "e3nn-softstep",
        "e3nn/e3nn",
        "0bd65c93cce72517ae1f49f19beae067c1831282",
        "Fix soft_unit_step for torch.compile (#506)",
    ),
    Case(
        "e3nn-activation",
        "e3nn/e3nn",
        "80711e3bbcef5ee1b012621b46f6d3cd65e986f2",
        "PT2 compile with Legacy code (#455)",
    ),
    Case(
        "tune-kvcache",
        "meta-pytorch/torchtune",
        "bae4b276d82f12d5bbc72138bfd40bb5b73f0c01",
        "Fixing recompiles in KV-cache + compile (#1663)",
        forward="fail",
        why="the PR's `cache_pos[0].item()` in an assert makes torch.export fail where base exported",
    ),
    Case(
        "tabpfn-fa3",
        "PriorLabs/TabPFN",
        "f9020879a305cdc327eac353358d3dcbccd192b3",
        "Add an attention-backend registry (#1165)",
        probes=("compile", "timing"),
        why="TabPFN v3 exports on neither side; the default review says so (inconclusive) and tells "
        "the user to leave export out, as this case does",
    ),
)


def git_dir(mirrors: Path, repo: str) -> Path:
    folder = mirrors / repo.replace("/", "+")
    for candidate in (folder / "repo", folder):
        if candidate.is_dir():
            return candidate
    raise SystemExit(f"no copy of {repo} under {mirrors} (looked for {folder}/repo and {folder})")


def write_tree(git: Path, commit: str, dest: Path, case: Case) -> None:
    shutil.rmtree(dest, ignore_errors=True)
    dest.mkdir(parents=True)
    archive = subprocess.run(
        ["git", "--git-dir", str(git), "archive", commit], check=True, capture_output=True
    )
    subprocess.run(["tar", "-x", "-C", str(dest)], input=archive.stdout, check=True)
    shutil.copyfile(HERE / f"{case.name.replace('-', '_')}.py", dest / "perfcheck_workload.py")
    probes = f"\n    probes: [{', '.join(case.probes)}]" if case.probes else ""
    (dest / "perfcheck.yml").write_text(
        f"workloads:\n  - name: {case.name}\n    entry: perfcheck_workload.py:build{probes}\n"
    )


def causes_told(result: dict[str, Any]) -> int:
    """The causes of failure the review tells: each cause holding an open error (its headline's),
    and each open error finding no cause holds. Warnings are not counted: they fail nothing."""
    findings = result.get("findings", [])
    failing = {i for i, f in enumerate(findings) if f.get("severity") == "error" and f.get("ack") is None}
    causes = [c for c in result.get("causes", []) if failing & {*c.get("leads", []), *c.get("effects", [])}]
    held = {i for c in result.get("causes", []) for i in (*c.get("leads", []), *c.get("effects", []))}
    return len(causes) + len(failing - held)


def review(perfcheck: str, where: Path, base: str, head: str, out: str, limit_s: float) -> dict[str, Any]:
    shutil.rmtree(where / out, ignore_errors=True)
    started = time.monotonic()
    try:
        done = subprocess.run(
            [perfcheck, "review", "--base", base, "--head", head, "--out", out],
            cwd=where,
            capture_output=True,
            text=True,
            timeout=limit_s,
        )
        code, tail = done.returncode, done.stderr[-4000:]
    except subprocess.TimeoutExpired:
        code, tail = 124, f"timed out after {limit_s:.0f} s"
    return read_review(where, out, code, time.monotonic() - started, tail)


def read_review(where: Path, out: str, code: int, wall: float, tail: str) -> dict[str, Any]:
    path = where / out / "result.json"
    result = json.loads(path.read_text()) if path.is_file() else {}
    comment = where / out / "comment.md"
    headline = (
        next((ln for ln in comment.read_text().splitlines() if ln.startswith("### perfcheck")), "")
        if comment.is_file()
        else ""
    )
    return {
        "exit": code,
        "wall_s": round(wall, 1),
        "verdict": result.get("verdict"),
        "summary": result.get("summary", ""),
        "headline": headline,
        "causes": causes_told(result) if result else None,
        "findings": [
            f"{f['category']} ({f['severity']})"
            + (f" at {f['location']['path']}:{f['location'].get('line')}" if f.get("location") else "")
            for f in result.get("findings", [])
        ],
        "stderr_tail": tail if code not in (0, 1) else "",
    }


def score(case: Case, direction: str, run: dict[str, Any]) -> bool:
    if direction == "forward":
        return run["verdict"] == case.forward
    return run["verdict"] == "fail" and run["causes"] == case.reversed_causes


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mirrors", type=Path, default=None, help="where the repositories are")
    parser.add_argument("--work", type=Path, required=True, help="where the trees and reviews go")
    parser.add_argument("--out", type=Path, default=None, help="write every run's record here (JSON)")
    parser.add_argument("--cases", default="", help="comma-separated case names (default: all)")
    parser.add_argument("--perfcheck", default="perfcheck", help="the perfcheck command to run")
    parser.add_argument("--limit-s", type=float, default=900.0, help="per review (default 900)")
    parser.add_argument(
        "--rescore",
        action="store_true",
        help="run nothing: score the reviews --work holds, with the exit codes and wall times --out has",
    )
    args = parser.parse_args()
    earlier: dict[tuple[str, str], dict[str, Any]] = {}
    if args.rescore:
        if args.out is None or not args.out.is_file():
            print("--rescore reads the records of --out, which is not there", file=sys.stderr)
            return 2
        earlier = {(r["name"], r["direction"]): r for r in json.loads(args.out.read_text())}
    if args.mirrors is None and not args.rescore:
        print(
            "--mirrors is needed to write the trees (or --rescore, to score what --work holds)",
            file=sys.stderr,
        )
        return 2
    wanted = {c for c in args.cases.split(",") if c}
    unknown = wanted - {c.name for c in CASES}
    if unknown:
        print(f"unknown case(s): {', '.join(sorted(unknown))}", file=sys.stderr)
        return 2
    records = []
    right = total = 0
    for case in CASES:
        if wanted and case.name not in wanted:
            continue
        where = args.work / case.name
        if not args.rescore:
            assert args.mirrors is not None
            git = git_dir(args.mirrors, case.repo)
            write_tree(git, f"{case.merge}^", where / "base", case)
            write_tree(git, case.merge, where / "head", case)
        for direction, base, head in (("forward", "base", "head"), ("reversed", "head", "base")):
            if args.rescore:
                was = earlier.get((case.name, direction))
                if was is None:
                    continue
                run = read_review(where, f"out-{direction}", was["exit"], was["wall_s"], was["stderr_tail"])
            else:
                run = review(args.perfcheck, where, base, head, f"out-{direction}", args.limit_s)
            ok = score(case, direction, run)
            right, total = right + ok, total + 1
            print(
                f"{case.name:<18} {direction:<9} {'right' if ok else 'WRONG':<6} exit {run['exit']} "
                f"{run['wall_s']:>6.0f} s  causes {run['causes']}  {run['summary'][:150]}",
                flush=True,
            )
            records.append({**asdict(case), "direction": direction, "right": ok, **run})
    print(f"{right} of {total} runs right")
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(records, indent=1) + "\n")
    return 0 if right == total else 1


if __name__ == "__main__":
    sys.exit(main())
