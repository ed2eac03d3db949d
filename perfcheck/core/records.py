"""Base's structural results kept for reuse: what a record is keyed by, and whether one matches.

A review probes base and head side by side; where base is the default branch, its structural
results (a compile's graphs and breaks, an export's IR, amp's dtypes, custom_ops' checks: the
probes whose descriptor says ``reusable``) were already measured by the default branch's own run.
Such a result is fixed by what the probe process read of its tree (the sha256 of each file, the
workload's entry among them), the probe's config (its spec, less the side and paths), the
environment (python, torch, device: perfcheck/measures.py ``Environment``) and perfcheck's own
code. A record holds the result with that key; a review reuses it only where every part of the
key is this base's. Timing and every other measure are never recorded: they stay paired.

Pure functions over untrusted data, no file I/O and no torch: perfcheck/runner/reuse/store.py reads
and writes the store. A record is read as hostile input (bounded, validated, its own digest
checked), though only a trusted run writes the store (docs/security.md).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterable, Mapping
from typing import Annotated, Any, Final, Literal

from pydantic import BaseModel, Field, StringConstraints, ValidationError

from perfcheck.measures import Environment, Strict
from perfcheck.schema import MAX_READ_FILES, ProbeResult, Reused, TreePath, tree_path

RECORD_FORMAT: Final = 1
MAX_RECORD_BYTES: Final = 4 << 20  # one record's file; a compile result is tens of KB
MAX_STORE_FILES: Final = 1000  # files of a store folder looked at
MAX_STORE_BYTES: Final = 64 << 20  # all records read by one review, together
MAX_CACHE_BYTES: Final = 2 << 30  # one packed compile cache (a Llama's on a GPU is hundreds of MB)

Sha256 = Annotated[str, StringConstraints(pattern=r"^[0-9a-f]{64}$")]
# The parts of a probe's spec that say which side it is and where things are: not what it measured.
SPEC_PLACES: Final = frozenset({"side", "tree", "walls", "track_reads"})


class RecordError(ValueError):
    """A record that cannot be used; its message says why."""


class RecordKey(Strict):
    """What a structural result depends on; a review reuses the result only where all of it is its own."""

    workload: str = Field(max_length=200)
    probe: str = Field(max_length=100)
    spec: Sha256 = Field(description="sha256 of the probe's spec less side and paths (spec_digest)")
    environment: Environment
    tool: str = Field(max_length=200, description="perfcheck's version and the digest of its code")
    files: dict[TreePath, Sha256] = Field(
        max_length=MAX_READ_FILES, description="each file of the tree the probe process read, by content"
    )


class CacheArchive(Strict):
    """Base's compile cache as its compile probe left it, packed beside a compile record
    (perfcheck/runner/reuse/cache_archive.py): the file's size and sha256, which bind it to the record."""

    sha256: Sha256
    size: int = Field(ge=0, le=MAX_CACHE_BYTES)


class Record(Strict):
    format: Literal[1] = RECORD_FORMAT
    key: RecordKey
    result: ProbeResult
    cache: CacheArchive | None = Field(
        default=None, description="base's compile cache, packed in the file cache_file_name names"
    )
    commit: str | None = Field(default=None, pattern=r"^[0-9a-f]{7,40}$")
    run: str | None = Field(default=None, max_length=100, pattern=r"^[\w.-]*$")
    digest: Sha256 = Field(description="sha256 of the rest (record_digest): an edited record fails it")


def canonical(data: Any) -> bytes:
    return json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=True).encode()


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def spec_digest(spec: BaseModel) -> str:
    """The digest of everything a probe was asked to do (workload, probe, compile and probe
    settings, device), less which side it was and where its tree and walls were."""
    return sha256(canonical(spec.model_dump(mode="json", exclude=set(SPEC_PLACES))))


def record_digest(record: Record) -> str:
    return sha256(canonical(record.model_dump(mode="json", exclude={"digest"})))


def file_name(key: RecordKey) -> str:
    """A record's file name: its probe and spec (what a review looks up) and its whole key, so a
    later run of the same content replaces it and one of other content lies beside it."""
    return f"{key.probe}-{key.spec[:16]}-{sha256(canonical(key.model_dump(mode='json')))[:16]}.json"


def cache_file_name(record_name: str) -> str:
    """The file beside a record that holds its packed compile cache: replaced with the record."""
    return record_name.removesuffix(".json") + ".cache.tar"


def lookup_prefix(probe: str, spec: str) -> str:
    return f"{probe}-{spec[:16]}-"


def entry_files(entry: str) -> tuple[str, ...]:
    """Where a workload's entry (``path/file.py:build`` or ``package.module:build``) lies in its
    tree, as a record's files name it: one of these must have been read. None where it lies
    outside the tree (``../ci/bench.py``) or is not a plain name: such a workload is not reused."""
    target = entry.rpartition(":")[0]
    if target.endswith(".py"):
        path = target.removeprefix("./")
        candidates: tuple[str, ...] = (path,)
    elif target and all(part.isidentifier() for part in target.split(".")):
        stem = target.replace(".", "/")
        candidates = (f"{stem}.py", f"{stem}/__init__.py")
    else:
        return ()
    try:
        return tuple(tree_path(c) for c in candidates)
    except ValueError:
        return ()


def recordable(result: ProbeResult, reusable: bool, entry: str, built_in: bool = False) -> str | None:
    """Why base's ``result`` cannot be recorded, or None: only a reusable probe's, finished (ok, or
    refused by torch: both are what the code is), with the files its process read, its entry
    among them (``as_recorded`` leaves out what other processes measured and joined to it). A
    ``built_in`` workload's entry is perfcheck's own code, which the key's tool digest holds."""
    if not reusable:
        return "its probe measures, and measures stay paired"
    if result.side != "base" or result.reused_from is not None:
        return "not base's own result of this run"
    if result.status not in ("ok", "failed"):
        return f"it {result.status} (only a finished probe's result is the code's)"
    if result.read_files is None:
        return f"its process read more than {MAX_READ_FILES} files of the tree, or did not say"
    if not built_in and not set(entry_files(entry)) & set(result.read_files):
        return "its workload's entry is not among the files it read (outside the tree?)"
    return None


def as_recorded(result: ProbeResult) -> ProbeResult:
    """``result`` as its probe process made it: compile-latency samples that this run's timing
    processes made and joined to it (perfcheck/runner/latency/results.py) are a paired measure,
    made again in every review, so they are never recorded."""
    if not result.metrics.get("latency"):
        return result
    return result.model_copy(update={"metrics": {**result.metrics, "latency": None}})


def make_record(
    key: RecordKey,
    result: ProbeResult,
    commit: str | None = None,
    run: str | None = None,
    cache: CacheArchive | None = None,
) -> Record:
    """A record of ``result`` under ``key``, with its digest."""
    draft = Record(key=key, result=result, commit=commit, run=run, cache=cache, digest="0" * 64)
    return draft.model_copy(update={"digest": record_digest(draft)})


def parse_record(raw: bytes, name: str) -> Record:
    """A record read from the store: bounded, validated, its digest and its file name checked
    (a record edited, or copied under another's name, is refused). Raises RecordError."""
    if len(raw) > MAX_RECORD_BYTES:
        raise RecordError(f"{name}: larger than {MAX_RECORD_BYTES >> 20} MB")
    try:
        record = Record.model_validate_json(raw)
    except ValidationError as err:
        first = err.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "(top level)"
        raise RecordError(f"{name}: not a record ({where}: {first['msg']})") from None
    except (ValueError, RecursionError):
        raise RecordError(f"{name}: not a record") from None
    if record_digest(record) != record.digest:
        raise RecordError(f"{name}: its digest does not match its content (edited?)")
    if file_name(record.key) != name:
        raise RecordError(f"{name}: filed under another key's name")
    r = record.result
    if (r.workload, r.probe, r.side) != (record.key.workload, record.key.probe, "base"):
        raise RecordError(f"{name}: its result is not base's {record.key.probe} of {record.key.workload}")
    return record


def mismatch(
    record: Record,
    *,
    spec: str,
    tool: str,
    entry: str,
    hashes: Callable[[Iterable[str]], Mapping[str, str | None]],
    environment: Callable[[], Environment | None],
    built_in: bool = False,
) -> str | None:
    """Why ``record`` is not this base's result, or None where it is. ``hashes``: the sha256 of each
    of the given files in this base's tree (None: no such file there); ``environment``: this run's
    fingerprint. Both are asked for last, only where everything cheaper matched."""
    key = record.key
    if key.spec != spec:
        return "the probe's configuration differs"
    if key.tool != tool:
        return f"recorded by perfcheck {key.tool}, this is {tool}"
    if not built_in and not set(entry_files(entry)) & set(key.files):
        return "the workload's entry is not among its files"
    found = hashes(key.files)
    for path, digest in key.files.items():
        if found.get(path) != digest:
            return f"{path} differs" if found.get(path) else f"{path} is not in this base"
    here = environment()
    if here is None:
        return "this run's environment could not be fingerprinted"
    if key.environment != here:
        fields = [f for f in Environment.model_fields if getattr(key.environment, f) != getattr(here, f)]
        return f"another environment ({', '.join(fields)} differ)"
    return None


def reused_result(record: Record) -> ProbeResult:
    """The recorded result as this review's base result, saying where it came from."""
    where = Reused(commit=record.commit, run=record.run, files=len(record.key.files))
    return record.result.model_copy(update={"reused_from": where, "read_files": None})
