"""Base's compile cache, packed beside its compile record and unpacked into a review that reuses it.

Why a reused compile needs its cache: a cold review's base compile probe fills base's compile cache,
and everything after it starts from that cache (head's compile from a copy of it, both sides'
timing workers, whose first compile is where compile latency's cache-cold samples are made). A
reused base without it is not in a cold review's state: on an H100 the default GPU suite's A/A
failed on compile latency that way (mlp's cache-cold compile 0.40 s on base against 1.04 s on
head). With the cache unpacked where base's compile probe would have left it, the rest of the
review runs as it would have.

Inductor's cache is keyed by content and its entries are found again from another folder (an FX
graph compiled under one TORCHINDUCTOR_CACHE_DIR hits from a copy under another, and Triton
kernels travel bundled in the FX graph's entry); Triton's own index files name absolute paths, and
an entry whose path is gone is a miss, never an error.

The archive is data written by a trusted run, but it is read as hostile: its sha256 and size are
the record's (checked on a private copy, which is then the one unpacked, so nothing can change it
between the check and the unpacking), and only plain files and folders under relative names are
unpacked, bounded in count and bytes.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tarfile
import tempfile
from pathlib import Path, PurePosixPath
from typing import BinaryIO, Final

from perfcheck.core.records import MAX_CACHE_BYTES

MAX_CACHE_FILES: Final = 200_000
_BLOCK: Final = 1 << 20


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


def unpack(archive: Path, sha256: str, size: int, into: Path, scratch: Path) -> int:
    """The files of ``archive`` into ``into`` (made afresh), where the archive is ``size`` bytes
    with this ``sha256``: copied first into ``scratch`` while hashed, and that copy unpacked. The
    number of files unpacked; raises ArchiveError (``into`` then left empty) where anything is off."""
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
            return _extract(copy, into)
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
        fd = os.open(archive, os.O_RDONLY | os.O_NOFOLLOW)
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


def _extract(archive: Path, into: Path) -> int:
    files = 0
    total = 0
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
    except (tarfile.TarError, EOFError) as err:
        raise ArchiveError(f"not a readable archive ({err})") from None
    except FileExistsError as err:
        raise ArchiveError(f"{err.filename}: named twice") from None
    except OSError as err:
        raise ArchiveError(f"cannot unpack it ({err.strerror}: {err.filename})") from None
    return files


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
