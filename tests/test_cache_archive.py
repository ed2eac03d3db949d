"""Base's compile cache packed beside its record and unpacked for a review that reuses it
(perfcheck/runner/reuse/cache_archive.py): what was packed comes back byte for byte, and an archive
that is not the record's, or would write anywhere but its own folder, unpacks nothing."""

from __future__ import annotations

import hashlib
import io
import json
import os
import shutil
import tarfile
from pathlib import Path

import pytest

from perfcheck.runner.reuse.cache_archive import ArchiveError, pack, unpack


def _tree(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_a_packed_cache_unpacks_byte_for_byte_elsewhere_and_links_stay_behind(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    (cache / "inductor" / "fxgraph" / "ab").mkdir(parents=True)
    (cache / "inductor" / "fxgraph" / "ab" / "entry").write_bytes(os.urandom(3000))
    kernel = cache / "inductor" / "cp" / "kernel.so"
    kernel.parent.mkdir()
    kernel.write_bytes(b"\x7fELF")
    kernel.chmod(0o755)
    (cache / "triton").mkdir()
    (cache / "inductor" / "outside").symlink_to(tmp_path)  # a link is not the cache's to carry

    sha, size = pack(cache, tmp_path / "store" / "c.cache.tar")
    assert size == (tmp_path / "store" / "c.cache.tar").stat().st_size
    into = tmp_path / "review" / "base-net"
    into.mkdir(parents=True)
    (into / "stale").write_text("left by an earlier review")
    unpacked = unpack(tmp_path / "store" / "c.cache.tar", sha, size, into, tmp_path / "scratch")

    expected = {k: v for k, v in _tree(cache).items() if not k.startswith("inductor/outside")}
    assert unpacked == (2, 0) and _tree(into) == expected
    assert (into / "triton").is_dir() and not (into / "inductor" / "outside").exists()
    assert os.access(into / "inductor" / "cp" / "kernel.so", os.X_OK)
    assert list((tmp_path / "scratch").iterdir()) == []  # the private copy is gone


def test_triton_kernels_indexes_name_the_folder_they_were_unpacked_into(tmp_path: Path) -> None:
    """Triton's FileCacheManager lists a kernel's files in ``__grp__<name>.json`` by absolute path;
    the recording run's folder is gone when a review unpacks its cache, and a kernel whose listed
    files are missing is built again."""
    cache = tmp_path / "record" / "probes" / "cache" / "base-net"
    kernel = cache / "triton" / "KEY3A"
    kernel.mkdir(parents=True)
    names = ("triton_poi_0.cubin", "triton_poi_0.json", "triton_poi_0.ttir")
    for name in names:
        (kernel / name).write_bytes(os.urandom(64))
    index = {"child_paths": {n: str(kernel / n) for n in names}}
    (kernel / "__grp__triton_poi_0.json").write_text(json.dumps(index))
    odd = cache / "triton" / "KEY7B"
    odd.mkdir()
    (odd / "k.cubin").write_bytes(b"\0")
    (odd / "__grp__k.json").write_text(
        json.dumps({"child_paths": {"k.cubin": "/gone/k.cubin", "up": "/x/..", "etc": "../../etc/passwd"}})
    )
    (odd / "__grp__broken.json").write_text("{not json")
    sha, size = pack(cache, tmp_path / "c.cache.tar")
    shutil.rmtree(tmp_path / "record")  # as the recording review's folder goes

    into = tmp_path / "review" / "probes" / "cache" / "base-net"
    unpacked = unpack(tmp_path / "c.cache.tar", sha, size, into, tmp_path / "scratch")

    assert unpacked == (7, 2)
    moved = json.loads((into / "triton" / "KEY3A" / "__grp__triton_poi_0.json").read_text())["child_paths"]
    assert moved == {n: str(into / "triton" / "KEY3A" / n) for n in names}
    assert all(Path(p).is_file() for p in moved.values())  # what Triton's get_group checks: a hit
    planted = json.loads((into / "triton" / "KEY7B" / "__grp__k.json").read_text())["child_paths"]
    folder = into / "triton" / "KEY7B"
    assert planted == {"k.cubin": str(folder / "k.cubin"), "etc": str(folder / "passwd")}  # never out of it
    assert not (folder / "__grp__broken.json").exists()  # a miss to Triton, where unparsable stops it


def test_an_archive_that_is_not_the_records_unpacks_nothing(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    cache.mkdir()
    (cache / "entry").write_text("compiled")
    archive = tmp_path / "c.tar"
    sha, size = pack(cache, archive)
    into = tmp_path / "into"

    with pytest.raises(ArchiveError, match="bytes, the record says"):
        unpack(archive, sha, size + 1, into, tmp_path / "s")
    with pytest.raises(ArchiveError, match="larger than the record says"):
        unpack(archive, sha, size - 1, into, tmp_path / "s")
    data = bytearray(archive.read_bytes())
    data[600] ^= 1  # inside the file's content
    archive.write_bytes(bytes(data))
    with pytest.raises(ArchiveError, match="sha256 differs"):
        unpack(archive, sha, size, into, tmp_path / "s")
    assert not into.exists() or list(into.iterdir()) == []
    (tmp_path / "link.tar").symlink_to(archive)
    with pytest.raises(ArchiveError, match="cannot read it"):
        unpack(tmp_path / "link.tar", sha, size, into, tmp_path / "s")


def _hostile(tmp_path: Path, member: tarfile.TarInfo, data: bytes = b"") -> tuple[Path, str, int]:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        ok = tarfile.TarInfo("fxgraph/entry")
        ok.size = 2
        tar.addfile(ok, io.BytesIO(b"ok"))
        tar.addfile(member, io.BytesIO(data) if data else None)
    raw = buf.getvalue()
    path = tmp_path / "hostile.tar"
    path.write_bytes(raw)
    return path, hashlib.sha256(raw).hexdigest(), len(raw)


@pytest.mark.parametrize(
    ("name", "kind", "why"),
    [
        ("../../escaped", tarfile.REGTYPE, "not a path inside the cache"),
        ("/etc/escaped", tarfile.REGTYPE, "not a path inside the cache"),
        ("fxgraph/../../escaped", tarfile.REGTYPE, "not a path inside the cache"),
        ("fxgraph/link", tarfile.SYMTYPE, "not a plain file or folder"),
        ("fxgraph/hard", tarfile.LNKTYPE, "not a plain file or folder"),
        ("fxgraph/fifo", tarfile.FIFOTYPE, "not a plain file or folder"),
        ("fxgraph/entry", tarfile.REGTYPE, "named twice"),
    ],
)
def test_an_archive_reaching_outside_its_folder_or_holding_links_unpacks_nothing(
    tmp_path: Path, name: str, kind: bytes, why: str
) -> None:
    member = tarfile.TarInfo(name)
    member.type = kind
    data = b""
    if kind == tarfile.REGTYPE:
        data = b"planted"
        member.size = len(data)
    else:
        member.linkname = "/etc/passwd"
    archive, sha, size = _hostile(tmp_path, member, data)
    into = tmp_path / "review" / "cache"
    with pytest.raises(ArchiveError, match=why):
        unpack(archive, sha, size, into, tmp_path / "scratch")
    assert into.is_dir() and list(into.iterdir()) == []  # what came before the bad member is gone too
    assert not (tmp_path / "escaped").exists() and not (tmp_path / "review" / "escaped").exists()


@pytest.mark.parametrize("planted", ["fifo", "folder"])
def test_a_fifo_or_a_folder_in_place_of_the_archive_is_refused_at_once(tmp_path: Path, planted: str) -> None:
    """A store restored from a cache PR code could write: a FIFO where the packed cache should be
    would hang a read until a writer came; a folder raised IsADirectoryError out of the review."""
    archive = tmp_path / "c.cache.tar"
    if planted == "fifo":
        os.mkfifo(archive)
    else:
        archive.mkdir()
    into = tmp_path / "into"
    with pytest.raises(ArchiveError, match="cannot read it"):
        unpack(archive, "0" * 64, 10, into, tmp_path / "s")
    assert not into.exists() or list(into.iterdir()) == []


def test_a_triton_index_nested_past_the_parsers_depth_is_dropped_not_raised(tmp_path: Path) -> None:
    """200,000 levels deep: json raises RecursionError, which unpack let out (the review died).
    Now it is no index (Triton reads its absence as a miss and builds the kernel)."""
    cache = tmp_path / "cache"
    kernel = cache / "triton" / "KEY"
    kernel.mkdir(parents=True)
    (kernel / "k.cubin").write_bytes(b"\0")
    (kernel / "__grp__k.json").write_text("[" * 200_000 + "]" * 200_000)
    sha, size = pack(cache, tmp_path / "c.cache.tar")
    into = tmp_path / "into"
    unpacked = unpack(tmp_path / "c.cache.tar", sha, size, into, tmp_path / "s")
    assert unpacked == (2, 0)
    assert (into / "triton" / "KEY" / "k.cubin").is_file()
    assert not (into / "triton" / "KEY" / "__grp__k.json").exists()
