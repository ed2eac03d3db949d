"""Base's compile cache, packed beside its compile record and unpacked into a review that reuses it.

Why a reused compile needs its cache: a cold review's base compile probe fills base's compile cache,
and everything after it starts from that cache (head's compile from a copy of it, both sides'
timing workers, whose first compile is where compile latency's cache-cold samples are made). A
reused base without it is not in a cold review's state: on an H100 the default GPU suite's A/A
failed on compile latency that way (mlp's cache-cold compile 0.40 s on base against 1.04 s on
head). With the cache unpacked where base's compile probe would have left it, the rest of the
review runs as it would have.

Inductor's cache is keyed by content and its entries are found again from another folder (an FX
graph compiled under one TORCHINDUCTOR_CACHE_DIR hits from a copy under another). Triton's is not:
each kernel's index (``triton/<key>/__grp__<name>.json``) names its files by absolute path, the
recording run's folder, gone by the time a review reuses the record; a kernel whose files are not
at those paths is a miss, and Triton builds it again. Inductor's own copy of the kernels, bundled
in the FX graph's entry, does not step in: it writes them out only where the kernel's folder is
empty, and the unpacked one is not. So each index is pointed at the folder it was unpacked into,
where its files are (``_relocate``), as Inductor does when it writes a bundled kernel out;
without it every Triton kernel of base's cache was built again in head's compile and in each
side's timing workers.

The archive is data written by a trusted run, but it is read as hostile: its sha256 and size are
the record's (checked on a private copy, which is then the one unpacked, so nothing can change it
between the check and the unpacking), and only plain files and folders under relative names are
unpacked, bounded in count and bytes.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import shutil
import stat
import tarfile
import tempfile
from pathlib import Path, PurePosixPath
from typing import BinaryIO, Final, NamedTuple

from perfcheck.core.records import MAX_CACHE_BYTES

MAX_CACHE_FILES: Final = 200_000
_BLOCK: Final = 1 << 20
_TRITON_INDEX: Final = "__grp__"  # Triton's FileCacheManager names a kernel's index so
_MAX_INDEX_BYTES: Final = 1 << 20  # an index lists a kernel's few files; more is not one


class Unpacked(NamedTuple):
    files: int
    triton_kernels: int  # Triton kernel indexes pointed at the folder they were unpacked into


class ArchiveError(ValueError):
    """An archive that is not unpacked; its message says why."""


def pack(folder: Path, dest: Path) -> tuple[str, int]:
    """Every plain file and folder of ``folder`` (no links, nothing else) as a tar at ``dest``;
    its sha256 and size. Raises ArchiveError where the folder holds more than the bounds allow."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    files = 0
    with tarfile.open(dest, "w", format=tarfile.PAX_FORMAT) as tar:
        for path in sorted(folder.rglob("*")):  # rglob follows no linked folder
            if path.is_symlink() or not (path.is_file() or path.is_dir()):
                continue
            files += 1
            if files > MAX_CACHE_FILES:
                raise ArchiveError(f"more than {MAX_CACHE_FILES} files")
            tar.add(path, arcname=path.relative_to(folder).as_posix(), recursive=False)
    size = dest.stat().st_size
    if size > MAX_CACHE_BYTES:
        dest.unlink()
        raise ArchiveError(f"{size >> 20} MB packed, more than {MAX_CACHE_BYTES >> 20} MB")
    return _sha256(dest), size


def unpack(archive: Path, sha256: str, size: int, into: Path, scratch: Path) -> Unpacked:
    """The files of ``archive`` into ``into`` (made afresh), where the archive is ``size`` bytes
    with this ``sha256``: copied first into ``scratch`` while hashed, and that copy unpacked, its
    Triton kernels' indexes pointed at ``into``. How many files and kernels; raises ArchiveError
    (``into`` then left empty) where anything is off."""
    scratch.mkdir(parents=True, exist_ok=True)
    fd, name = tempfile.mkstemp(dir=scratch, prefix=".cache-", suffix=".tar")
    copy = Path(name)
    try:
        with os.fdopen(fd, "wb") as out:
            digest = _copy_hashed(archive, out, size)
        if digest != sha256:
            raise ArchiveError("its content is not the record's (sha256 differs)")
        shutil.rmtree(into, ignore_errors=True)
        into.mkdir(parents=True)
        try:
            indexes = _extract(copy, into)
            return Unpacked(indexes.files, sum(_relocate(into / name) for name in indexes.triton))
        except BaseException:
            shutil.rmtree(into, ignore_errors=True)
            into.mkdir(parents=True, exist_ok=True)
            raise
    finally:
        copy.unlink(missing_ok=True)


def _copy_hashed(archive: Path, out: BinaryIO, size: int) -> str:
    digest = hashlib.sha256()
    copied = 0
    try:
        fd = open_regular(archive)
    except OSError as err:
        raise ArchiveError(f"cannot read it ({err.strerror})") from None
    with os.fdopen(fd, "rb") as f:
        while block := f.read(_BLOCK):
            copied += len(block)
            if copied > min(size, MAX_CACHE_BYTES):
                raise ArchiveError(f"larger than the record says ({size} bytes)")
            digest.update(block)
            out.write(block)
    if copied != size:
        raise ArchiveError(f"{copied} bytes, the record says {size}")
    return digest.hexdigest()


def open_regular(path: Path | str) -> int:
    """A read-only descriptor of ``path`` where it is a regular file, not reached through a link;
    OSError otherwise. Opened without blocking (a FIFO planted there opens, is refused, and never
    waits for a writer), then checked on the descriptor itself, not on the name."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(errno.EINVAL, "not a regular file", str(path))
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd


class _Extracted(NamedTuple):
    files: int
    triton: list[str]  # the names of Triton kernels' indexes among them


def _extract(archive: Path, into: Path) -> _Extracted:
    files = 0
    total = 0
    triton: list[str] = []
    try:
        with tarfile.open(archive, "r:") as tar:
            for member in tar:
                name = _member_name(member.name)
                if member.isdir():
                    (into / name).mkdir(parents=True, exist_ok=True)
                    continue
                if not member.isfile():
                    raise ArchiveError(f"{member.name!r}: not a plain file or folder")
                files += 1
                total += member.size
                if files > MAX_CACHE_FILES or total > MAX_CACHE_BYTES:
                    raise ArchiveError("more files or bytes than a compile cache is allowed")
                dest = into / name
                dest.parent.mkdir(parents=True, exist_ok=True)
                source = tar.extractfile(member)
                if source is None:
                    raise ArchiveError(f"{member.name!r}: unreadable")
                with source, open(dest, "xb") as out:
                    shutil.copyfileobj(source, out, _BLOCK)
                os.chmod(dest, 0o644 | (0o111 if member.mode & 0o100 else 0))  # a kernel's .so runs
                base = PurePosixPath(name).name
                if base.startswith(_TRITON_INDEX) and base.endswith(".json"):
                    triton.append(name)
    except (tarfile.TarError, EOFError) as err:
        raise ArchiveError(f"not a readable archive ({err})") from None
    except FileExistsError as err:
        raise ArchiveError(f"{err.filename}: named twice") from None
    except OSError as err:
        raise ArchiveError(f"cannot unpack it ({err.strerror}: {err.filename})") from None
    return _Extracted(files, triton)


def _relocate(index: Path) -> int:
    """A Triton kernel's index pointed at its own folder: each file it names by absolute path
    (the recording run's) is named in the folder the index lies in, where Triton wrote it beside
    the index. 1 where it was; 0 where the file is not an index Triton could use, which is removed:
    Triton reads a missing index as a miss and builds the kernel, where one it cannot parse stops
    the compile. A name that is not a plain file name is dropped, so an index never leads out of
    its folder."""
    try:
        data = json.loads(index.read_bytes()) if index.stat().st_size <= _MAX_INDEX_BYTES else None
    except (OSError, ValueError, RecursionError):  # nested past the parser's depth: no index either
        data = None
    children = data.get("child_paths") if isinstance(data, dict) else None
    if not isinstance(data, dict) or not isinstance(children, dict):
        try:
            index.unlink(missing_ok=True)
        except OSError as err:
            raise ArchiveError(f"cannot remove {index.name}, not an index ({err.strerror})") from None
        return 0
    moved = {
        name: str(index.parent / PurePosixPath(path).name)
        for name, path in children.items()
        if isinstance(name, str) and isinstance(path, str) and PurePosixPath(path).name not in ("", ".", "..")
    }
    try:
        index.write_text(json.dumps({**data, "child_paths": moved}))
    except OSError as err:
        raise ArchiveError(f"cannot point {index.name} at its folder ({err.strerror})") from None
    return 1


def _member_name(name: str) -> str:
    """``name`` as a path inside the archive's folder; ArchiveError where it would lead elsewhere."""
    path = PurePosixPath(name)
    if not name or path.is_absolute() or any(p in ("..", "") for p in path.parts) or "\\" in name:
        raise ArchiveError(f"{name!r}: not a path inside the cache")
    return path.as_posix()


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(_BLOCK):
            digest.update(block)
    return digest.hexdigest()
