"""Base's structural results, recorded by a trusted run (--record-base) and reused by a review
(--reuse-base) where a record's key is this base's: the store's files, the base tree's hashes and
this run's environment fingerprint (perfcheck/core/records.py holds the key and the checks).

A compile record carries base's compile cache as its compile probe left it, packed in a file
beside it (perfcheck/runner/reuse/cache_archive.py says why the rest of the review needs it); a review
that reuses the record unpacks it where base's compile probe would have filled the cache.

Who can write the store is the whole of its trust: only the orchestrator writes records, after
the probes ended, and only in a run asked to record; no probe process sees the store folders
(``side_walls`` hides them); a review reads the store's records once, before any probe starts, so
that nothing written into it while PR code runs is read. A packed cache is read later, when its
record is reused, and only where its size and sha256 are the ones that record (read at the start)
gives.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
import threading
from collections.abc import Callable, Iterable
from functools import cache
from pathlib import Path
from typing import BinaryIO

from perfcheck.core import probes
from perfcheck.core.records import (
    MAX_RECORD_BYTES,
    MAX_STORE_BYTES,
    MAX_STORE_FILES,
    CacheArchive,
    Record,
    RecordError,
    RecordKey,
    as_recorded,
    cache_file_name,
    file_name,
    lookup_prefix,
    make_record,
    mismatch,
    parse_record,
    recordable,
    reused_result,
    spec_digest,
)
from perfcheck.measures import Environment
from perfcheck.runner.latency.results import latency_place
from perfcheck.runner.process import forkserver
from perfcheck.runner.process.forkserver import ForkServers
from perfcheck.runner.process.probe_process import run_module
from perfcheck.runner.process.sides import SHARED_CACHE_ENV, probe_env, side_caches, side_walls
from perfcheck.runner.reuse import cache_archive
from perfcheck.runner.review_run import ReviewRun
from perfcheck.runner.workloads import BUILTIN_WORKLOADS
from perfcheck.schema import ContractError, ProbeResult, load_model
from perfcheck.spec import ProbeSpec

FINGERPRINT_TIMEOUT_S = 120.0
CANDIDATES = 20  # records of one probe and configuration checked against this base, at most
RUN_ID_ENV = "GITHUB_RUN_ID"


def reusable(probe: str) -> bool:
    kind = probes.get(probe)
    return kind is not None and kind.reusable


@cache
def tool_version() -> str:
    """perfcheck's version and the digest of its own code and data: a record made by other code
    (another commit of perfcheck, same version number) is not this one's result."""
    import perfcheck

    package = Path(perfcheck.__file__).parent
    digest = hashlib.sha256()
    for path in sorted(package.rglob("*")):
        if path.suffix in (".py", ".yml", ".yaml") and "__pycache__" not in path.parts and path.is_file():
            digest.update(path.relative_to(package).as_posix().encode() + b"\0")
            digest.update(hashlib.sha256(path.read_bytes()).digest())
    return f"{perfcheck.__version__}+{digest.hexdigest()[:16]}"


def read_store(folder: Path) -> tuple[dict[str, bytes], list[str]]:
    """Every record file of ``folder`` (plain files named ``*.json``, no links), read whole now,
    bounded in count and size; and what was left out, and why."""
    found: dict[str, bytes] = {}
    left: list[str] = []
    total = 0
    try:
        # Records only: the packed caches beside them are read when one is reused.
        entries = sorted((e for e in os.scandir(folder) if e.name.endswith(".json")), key=lambda e: e.name)
    except OSError as err:
        return {}, [f"{folder}: cannot read it ({err.strerror})"]
    for entry in entries[:MAX_STORE_FILES]:
        if not entry.is_file(follow_symlinks=False):
            continue
        try:
            with os.fdopen(cache_archive.open_regular(entry.path), "rb") as f:
                raw = f.read(MAX_RECORD_BYTES + 1)
        except OSError as err:
            left.append(f"{entry.name}: cannot read it ({err.strerror})")
            continue
        if len(raw) > MAX_RECORD_BYTES or total + len(raw) > MAX_STORE_BYTES:
            left.append(f"{entry.name}: over the store's size bounds")
            continue
        total += len(raw)
        found[entry.name] = raw
    if len(entries) > MAX_STORE_FILES:
        left.append(f"{len(entries) - MAX_STORE_FILES} files past the first {MAX_STORE_FILES}")
    return found, left


def store_problem(folder: Path, flag: str, trees: Iterable[Path], out: Path, reading: bool) -> str | None:
    """What is wrong with ``folder`` as a store (None: nothing): a store the review reads must be a
    folder; one it writes is made where missing. Neither may lie inside a tree the probes run in
    (PR code could write it) or hold one, nor inside the review's output folder."""
    where = folder.resolve()
    if where.exists() and not where.is_dir():
        return f"{flag} {folder}: not a folder"
    if reading and not where.is_dir():
        return f"{flag} {folder}: no such folder (restore the store first, or leave {flag} out)"
    for tree, name in [*((t.resolve(), "a tree the probes run in") for t in trees), (out.resolve(), "--out")]:
        if where.is_relative_to(tree) or tree.is_relative_to(where):
            return f"{flag} {folder}: inside {name} ({tree}) or holding it; keep the store apart"
    return None


def file_sha256(tree: Path, rel: str) -> str | None:
    """The sha256 of ``rel`` in ``tree``: None where it is missing, not a plain file, or leads out
    of the tree through a link."""
    root = os.path.realpath(tree)
    real = os.path.realpath(os.path.join(root, rel))
    if not real.startswith(root + os.sep) or not os.path.isfile(real):
        return None
    digest = hashlib.sha256()
    try:
        with open(real, "rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                digest.update(block)
    except OSError:
        return None
    return digest.hexdigest()


class BaseStore:
    """One review's part in the store: the records it read at its start (``--reuse-base``), the
    specs of base's probes it is to record (``--record-base``), and this run's fingerprint."""

    def __init__(self, run: ReviewRun, workdir: Path, forks: ForkServers | None, say: Callable[[str], None]):
        self.run, self.workdir, self.forks, self.say = run, workdir, forks, say
        self.snapshot: dict[str, bytes] = {}
        if run.reuse_base is not None:
            self.snapshot, left = read_store(run.reuse_base)
            for why in left[:5]:
                say(f"reuse: left out {why}")
        self._lock = threading.Lock()
        self._environment: Environment | None = None
        self._fingerprinted = False
        self._hashes: dict[str, str | None] = {}
        self._specs: dict[tuple[str, str], ProbeSpec] = {}
        # Base's compile cache per workload, packed for its record (or why it was not).
        self._packed: dict[str, tuple[Path, CacheArchive] | str] = {}

    def spec(self, spec: ProbeSpec) -> ProbeSpec:
        """``spec``, asked to say what it reads where this run records its result."""
        if self.run.record_base is None or spec.side != "base":
            return spec
        if not reusable(spec.probe):
            return spec
        spec = spec.model_copy(update={"track_reads": True})
        with self._lock:
            self._specs[(spec.workload.name, spec.probe)] = spec
        return spec

    def reused(self, spec: ProbeSpec) -> ProbeResult | None:
        """Base's result of ``spec`` from a record whose key is this base's, or None (said why)."""
        if not self.snapshot or spec.side != "base" or not reusable(spec.probe):
            return None
        label = f"base · {spec.workload.name} · {spec.probe}"
        # Compile latency's cache-cold samples are made in processes that start from base's compile
        # cache: base's compile is reused there only with the cache its probe left, unpacked.
        needs_cache = spec.probe == "compile" and latency_place(self.run, {"compile"}) is not None
        digest = spec_digest(spec)
        names = sorted(n for n in self.snapshot if n.startswith(lookup_prefix(spec.probe, digest)))
        if not names:
            self.say(f"reuse: {label}: probed: no record of this configuration")
            return None
        whys = []
        for name in names[:CANDIDATES]:
            try:
                record = parse_record(self.snapshot[name], name)
            except RecordError as err:
                whys.append(f"refused {err}")
                continue
            why = mismatch(
                record,
                spec=digest,
                tool=tool_version(),
                entry=spec.workload.entry,
                hashes=self._base_hashes,
                environment=self.environment,
                built_in=spec.workload.entry in BUILTIN_WORKLOADS,
            )
            if why is not None:
                whys.append(f"{name}: {why}")
                continue
            unpacked, what = (True, "")
            if spec.probe == "compile":
                unpacked, what = self._restore(record, name, spec.workload.name)
            if not unpacked and needs_cache:
                whys.append(f"{name}: {what}, and this review's compile latency starts from it")
                continue
            files = len(record.key.files)
            said = f"; {what}" if what else ""
            self.say(f"reuse: {label}: reused {_origin(record)}, same content ({files} files){said}")
            return reused_result(record)
        self.say(f"reuse: {label}: probed afresh: {'; '.join(whys[:3])}")
        return None

    def _restore(self, record: Record, name: str, workload: str) -> tuple[bool, str]:
        """Base's compile cache of ``record`` unpacked where base's compile probe would have left
        it: whether it was, and what became of it ("its compile cache unpacked (12 files, 0.4
        MB)", "no compile cache kept with it")."""
        if record.cache is None:
            return False, "no compile cache kept with it"
        assert self.run.reuse_base is not None  # a snapshot is read from it
        try:
            unpacked = cache_archive.unpack(
                self.run.reuse_base / cache_file_name(name),
                record.cache.sha256,
                record.cache.size,
                side_caches(self.workdir, workload)["base"],
                self.workdir / "record-cache",
            )
        except cache_archive.ArchiveError as err:
            return False, f"its packed compile cache refused: {err}"
        kernels = unpacked.triton_kernels
        pointed = f", {kernels} Triton kernels pointed at it" if kernels else ""
        mb = record.cache.size / 1e6
        return True, f"its compile cache unpacked ({unpacked.files} files, {mb:.1f} MB{pointed})"

    def keep_cache(self, spec: ProbeSpec, cache: Path) -> None:
        """Base's compile cache of ``spec``'s workload, packed now, as its compile probe left it
        (before the timing workers add to it), for the record this run makes of that probe."""
        workload = spec.workload.name
        if (workload, spec.probe) not in self._specs or spec.probe != "compile" or spec.side != "base":
            return
        if os.environ.get(SHARED_CACHE_ENV):  # the test suite's one cache: not the probe's own
            self._packed[workload] = "the compile cache is the shared one (PERFCHECK_COMPILE_CACHE)"
            return
        dest = self.workdir / "record-cache" / f"{hashlib.sha256(workload.encode()).hexdigest()[:16]}.tar"
        try:
            sha, size = cache_archive.pack(cache, dest)
        except (cache_archive.ArchiveError, OSError) as err:
            self._packed[workload] = f"its compile cache not packed: {err}"
            return
        self._packed[workload] = (dest, CacheArchive(sha256=sha, size=size))

    def record(self, results: Iterable[ProbeResult]) -> None:
        """Base's reusable results of this run, recorded in ``--record-base`` (after every probe
        ended: nothing of a probe process writes there)."""
        folder = self.run.record_base
        if folder is None:
            return
        written = 0
        for result in results:
            spec = self._specs.get((result.workload, result.probe))
            if spec is None or result.side != "base":
                continue
            label = f"base · {result.workload} · {result.probe}"
            why = recordable(result, True, spec.workload.entry, spec.workload.entry in BUILTIN_WORKLOADS)
            files = self._base_hashes(result.read_files or [])
            if why is None and any(d is None for d in files.values()):
                why = "a file it read is no longer in the tree"
            environment = self.environment() if why is None else None
            if why is None and environment is None:
                why = "this run's environment could not be fingerprinted"
            if why is not None or environment is None:
                self.say(f"record: {label}: not recorded: {why}")
                continue
            key = RecordKey(
                workload=result.workload,
                probe=result.probe,
                spec=spec_digest(spec),
                environment=environment,
                tool=tool_version(),
                files={p: d for p, d in files.items() if d is not None},
            )
            run_id = os.environ.get(RUN_ID_ENV, "")
            packed = self._packed.get(result.workload) if result.probe == "compile" else None
            kept = None
            if isinstance(packed, tuple):
                archive, kept = packed
                # Written first: a record in the store never names a packed cache that is not there.
                _write_file(folder, cache_file_name(file_name(key)), archive)
            elif packed is not None:
                self.say(f"record: {label}: {packed}")
            record = make_record(
                key, as_recorded(result), self.run.base_revision, run_id if run_id.isdigit() else None, kept
            )
            _write(folder, record)
            written += 1
        self.say(f"record: {written} of base's results recorded in {folder}")

    def environment(self) -> Environment | None:
        """This run's fingerprint of base's interpreter, made once, as a probe process of base
        sees it (behind base's walls, from base's fork server): the record's came the same way."""
        with self._lock:
            if not self._fingerprinted:
                self._environment = self._fingerprint()
                self._fingerprinted = True
            return self._environment

    def _fingerprint(self) -> Environment | None:
        run = self.run
        self.workdir.mkdir(parents=True, exist_ok=True)
        device = self.workdir / "base-fingerprint.json"
        device.write_text(json.dumps({"device": run.device}))
        with tempfile.TemporaryDirectory(prefix="perfcheck-fingerprint-") as own:
            walls = side_walls(run, run.base)
            ended = run_module(
                run.base.python,
                "perfcheck.runner.reuse.fingerprint",
                device,
                str(run.base.tree.resolve()),
                probe_env(Path(own)),
                FINGERPRINT_TIMEOUT_S,
                self.workdir / "base-fingerprint.log",
                forks=self.forks if forkserver.serves(run.device) else None,
                walls=walls.with_writable(own) if walls is not None else None,
                inductor=run.config.compile.backend == "inductor",
            )
        if ended.code != 0 or not ended.result:
            self.say(
                f"reuse: the environment fingerprint failed (see {self.workdir / 'base-fingerprint.log'})"
            )
            return None
        try:
            return load_model(Environment, ended.result, "the environment fingerprint")
        except ContractError as err:
            self.say(f"reuse: {err}")
            return None

    def _base_hashes(self, paths: Iterable[str]) -> dict[str, str | None]:
        out = {}
        for rel in paths:
            with self._lock:
                known = rel in self._hashes
            if not known:
                digest = file_sha256(self.run.base.tree, rel)
                with self._lock:
                    self._hashes[rel] = digest
            out[rel] = self._hashes[rel]
        return out


def _origin(record: Record) -> str:
    commit = f" of {record.commit[:7]}" if record.commit else ""
    run = f" (run {record.run})" if record.run else ""
    return f"from the recorded run{commit}{run}"


def _write(folder: Path, record: Record) -> None:
    """``record`` into ``folder``, whole or not at all (a reader never sees half a record)."""
    _replace(folder, file_name(record.key), lambda f: f.write(record.model_dump_json().encode()))


def _write_file(folder: Path, name: str, source: Path) -> None:
    """A copy of ``source`` as ``folder``/``name``, whole or not at all."""

    def copy(f: BinaryIO) -> None:
        with open(source, "rb") as src:
            shutil.copyfileobj(src, f, 1 << 20)

    _replace(folder, name, copy)


def _replace(folder: Path, name: str, fill: Callable[[BinaryIO], object]) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=".record-", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            fill(f)
        os.chmod(tmp, 0o644)  # the store is data for every later run to read, not a secret
        os.replace(tmp, folder / name)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
