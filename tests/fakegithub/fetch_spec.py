"""Fetch GitHub's published OpenAPI description for the fake GitHub server.

    python tests/fakegithub/fetch_spec.py .cache/github-openapi

The description ships in the npm package @octokit/openapi; one pinned version is downloaded, checked against
the integrity hash the npm registry publishes for it, and only the description (plus the package's LICENSE)
is kept. Standard library only, so that `make test` can run it before anything else is installed.
"""

from __future__ import annotations

import base64
import hashlib
import io
import os
import sys
import tarfile
import tempfile
import urllib.request
from pathlib import Path

VERSION = "23.0.2"
TARBALL_URL = f"https://registry.npmjs.org/@octokit/openapi/-/openapi-{VERSION}.tgz"
INTEGRITY = "sha512-pV8M7L9GY23AybNvTmo2nyjmpmnt6+2sRE/tqr0ZLQcPS4lnw7u5eZGNmwRNkBC3D7gZXbFx5AHzLUVRBXGDhg=="
SPEC_MEMBER = "package/generated/api.github.com.json"
LICENSE_MEMBER = "package/LICENSE"
SPEC_NAME = "api.github.com.json"
TIMEOUT_S = 120


def _download(url: str) -> bytes:
    with urllib.request.urlopen(url, timeout=TIMEOUT_S) as response:
        data: bytes = response.read()
        return data


def _check_integrity(data: bytes) -> None:
    # npm's `integrity` field is Subresource Integrity: algorithm, dash, base64 of the raw digest.
    actual = "sha512-" + base64.b64encode(hashlib.sha512(data).digest()).decode("ascii")
    if actual != INTEGRITY:
        raise RuntimeError(f"{TARBALL_URL} does not match its published integrity: got {actual}")


def _write_atomically(dest: Path, content: bytes) -> None:
    # A test run that starts while this runs must see either no file or the whole file, never half of it.
    fd, temp_name = tempfile.mkstemp(dir=dest.parent, prefix=f".{dest.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(content)
        # mkstemp creates the file private to its owner; the cache is ordinary readable data.
        os.chmod(temp_name, 0o644)
        os.replace(temp_name, dest)
    except BaseException:
        Path(temp_name).unlink(missing_ok=True)
        raise


def _member(archive: tarfile.TarFile, name: str) -> bytes:
    extracted = archive.extractfile(name)
    if extracted is None:
        raise RuntimeError(f"{name} in {TARBALL_URL} is not a regular file")
    return extracted.read()


def fetch(dest: Path) -> Path:
    """Download, verify and unpack the description into the folder `dest`; returns the JSON file's path."""
    dest.mkdir(parents=True, exist_ok=True)
    data = _download(TARBALL_URL)
    _check_integrity(data)
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as archive:
        spec = _member(archive, SPEC_MEMBER)
        license_text = _member(archive, LICENSE_MEMBER)
    _write_atomically(dest / "LICENSE", license_text)
    target = dest / SPEC_NAME
    _write_atomically(target, spec)
    return target


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print(f"usage: {Path(sys.argv[0]).name} DEST_FOLDER", file=sys.stderr)
        return 2
    path = fetch(Path(argv[0]))
    print(f"GitHub OpenAPI description @octokit/openapi {VERSION} -> {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
