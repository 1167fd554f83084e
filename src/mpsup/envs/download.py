"""Fetch one wheel into mpsup's private downloads folder, checking its sha256 before anything installs it.

The file is named only from the wheel file name the index gave, once that name is known to be a
plain wheel name of the expected project; the URL's path never names anything on disk (an index
whose URL ends in an encoded `/../..` would otherwise write outside the data dir).
"""

from __future__ import annotations

import hashlib
import os
import re
import stat
import tempfile
import urllib.error
from dataclasses import dataclass
from pathlib import Path

from packaging.utils import InvalidWheelFilename, canonicalize_name, parse_wheel_filename

from mpsup.envs.events import Downloaded
from mpsup.envs.index import local_path, open_url
from mpsup.errors import OperationFailed, UserError
from mpsup.progress import Progress, ignore
from mpsup.safe_files import open_regular

_CHUNK = 1 << 20
# Letters, digits and the punctuation wheel names use; no separators, no leading dot.
_WHEEL_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+!-]{0,250}\.whl")


def wheel_file_name(filename: str, project: str, where: str = "the index") -> str:
    """`filename` if it is a parseable wheel name of `project` and nothing more (no folder part); else UserError."""
    refused = UserError(f"{where} names the file {filename!r}: not a {project} wheel file name; refusing it")
    if not _WHEEL_NAME.fullmatch(filename):
        raise refused
    try:
        name = parse_wheel_filename(filename)[0]
    except InvalidWheelFilename:
        raise refused from None
    if canonicalize_name(name) != canonicalize_name(project):
        raise refused
    return filename


@dataclass(frozen=True)
class FetchedWheel:
    path: Path
    sha256: str  # of the bytes on disk
    sha256_from: str  # "index": checked against the index's; "download": computed, the index gave none


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with open_regular(path, "wheel") as fh:
        while chunk := fh.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def _mismatch(url: str, expected: str) -> OperationFailed:
    return OperationFailed(f"{url}: sha256 does not match the index's ({expected[:12]}...); the file was not installed")


def head_size(url: str, cafile: str | None) -> int | None:
    """Content-Length, for the plan and the disk check; None when the server will not say."""
    path = local_path(url)
    if path is not None:
        return path.stat().st_size if path.is_file() else None
    try:
        with open_url(url, cafile=cafile, timeout=15, accept="*/*", method="HEAD", what="the wheel") as resp:
            length = resp.headers.get("Content-Length")
            return int(length) if length and length.isdigit() else None
    except (urllib.error.URLError, OSError, ValueError):
        return None


def private_folder(folder: Path) -> Path:
    """Create `folder` readable by this user only (a wheel waiting to be installed is not for others to swap)."""
    folder.mkdir(parents=True, exist_ok=True, mode=0o700)
    if stat.S_IMODE(folder.stat().st_mode) != 0o700:
        folder.chmod(0o700)
    return folder


def _verified_cached(dest: Path, sha256: str | None) -> bool:
    return sha256 is not None and dest.is_file() and not dest.is_symlink() and sha256_of(dest) == sha256.lower()


def fetch_wheel(
    url: str,
    filename: str,
    sha256: str | None,
    folder: Path,
    *,
    project: str = "torch",
    cafile: str | None = None,
    progress: Progress = ignore,
    allow_unhashed: bool = False,
    size: int | None = None,
) -> FetchedWheel:
    """A verified local wheel: a `file://` wheel is checked where it lies, others are downloaded.

    The download goes to a temp name in the folder and is renamed only once its hash matches, so a
    cut connection or a tampered file never leaves something installable behind. Without a sha256
    from the index the wheel is refused unless `allow_unhashed`; its hash is then computed here.
    """
    if sha256 is None and not allow_unhashed:
        raise UserError(
            f"the index gives no sha256 for {url}; refusing an unchecked wheel (--allow-unhashed accepts it)"
        )
    name = wheel_file_name(filename, project)
    path = local_path(url)
    if path is not None:
        actual = sha256_of(path)
        if sha256 and actual != sha256.lower():
            raise _mismatch(url, sha256)
        return FetchedWheel(path, actual, "index" if sha256 else "download")
    dest = private_folder(folder) / name
    if _verified_cached(dest, sha256):
        return FetchedWheel(dest, str(sha256).lower(), "index")
    fd, tmp_name = tempfile.mkstemp(prefix=".download-", suffix=".part", dir=dest.parent)
    tmp = Path(tmp_name)
    try:
        actual = _stream(url, fd, cafile, progress, size)
        if sha256 and actual != sha256.lower():
            raise _mismatch(url, sha256)
        os.replace(tmp, dest)
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", None) or exc
        raise OperationFailed(f"{url}: download failed ({reason})") from None
    finally:
        tmp.unlink(missing_ok=True)
    return FetchedWheel(dest, actual, "index" if sha256 else "download")


def _stream(url: str, fd: int, cafile: str | None, progress: Progress, size: int | None) -> str:
    """Write the body to `fd`, hashing as it goes; a body longer than the index's size is cut off and refused."""
    digest = hashlib.sha256()
    with os.fdopen(fd, "wb") as out, open_url(url, cafile=cafile, timeout=60, accept="*/*", what="the wheel") as resp:
        length = resp.headers.get("Content-Length")
        total = int(length) if length and length.isdigit() else size
        done = 0
        while chunk := resp.read(_CHUNK):
            done += len(chunk)
            if size is not None and done > size:
                raise OperationFailed(
                    f"{url}: the download is larger than the {size} bytes the index gives; the file was not installed"
                )
            out.write(chunk)
            digest.update(chunk)
            progress(Downloaded(done, total))
    return digest.hexdigest()
