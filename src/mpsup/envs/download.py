"""Fetch one wheel into the cache, checking the index's sha256 before anything installs it."""

from __future__ import annotations

import hashlib
import os
import tempfile
import urllib.error
import urllib.parse
from collections.abc import Callable
from pathlib import Path

from mpsup.envs.index import local_path, open_url
from mpsup.errors import OperationFailed

ProgressFn = Callable[[int, int | None], None]  # (bytes so far, total or None)
_CHUNK = 1 << 20


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        while chunk := fh.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def _check(path: Path, expected: str | None, url: str) -> None:
    if expected and sha256_of(path) != expected.lower():
        raise OperationFailed(f"{url}: sha256 does not match the index's ({expected[:12]}...); the file was not installed")


def head_size(url: str, cafile: str | None) -> int | None:
    """Content-Length, for the plan and the disk check; None when the server will not say."""
    path = local_path(url)
    if path is not None:
        return path.stat().st_size if path.is_file() else None
    try:
        with open_url(url, cafile=cafile, timeout=15, accept="*/*", method="HEAD") as resp:
            length = resp.headers.get("Content-Length")
            return int(length) if length and length.isdigit() else None
    except (urllib.error.URLError, OSError, ValueError):
        return None


def fetch_wheel(url: str, sha256: str | None, cache: Path, *, cafile: str | None = None,
                progress: ProgressFn | None = None) -> Path:
    """A verified local wheel: a `file://` wheel is checked where it lies, others are downloaded.

    The download goes to a temp name in the cache and is renamed only once its hash matches, so a
    cut connection or a tampered file never leaves something installable behind.
    """
    path = local_path(url)
    if path is not None:
        if not path.is_file():
            raise OperationFailed(f"{url}: the index lists this wheel but the file is missing")
        _check(path, sha256, url)
        return path
    name = urllib.parse.unquote(urllib.parse.urlsplit(url).path.rsplit("/", 1)[-1])
    dest = cache / name
    if dest.is_file() and sha256 and sha256_of(dest) == sha256.lower():
        return dest
    cache.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(prefix=f".{name}.", suffix=".part", dir=cache)
    tmp = Path(tmp_name)
    try:
        with os.fdopen(fd, "wb") as out, open_url(url, cafile=cafile, timeout=60, accept="*/*") as resp:
            length = resp.headers.get("Content-Length")
            total = int(length) if length and length.isdigit() else None
            done = 0
            while chunk := resp.read(_CHUNK):
                out.write(chunk)
                done += len(chunk)
                if progress:
                    progress(done, total)
        _check(tmp, sha256, url)
        os.replace(tmp, dest)
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", None) or exc
        raise OperationFailed(f"{url}: download failed ({reason})") from None
    finally:
        tmp.unlink(missing_ok=True)
    return dest
