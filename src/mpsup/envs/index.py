"""Read a package index's simple API: PEP 691 JSON where offered, PEP 503 HTML otherwise.

Only what picking a wheel needs is kept: file name, absolute URL, sha256, size, Requires-Python,
yanked, upload time. `file://` indexes are read from disk (a folder's page is its index.html).

Every network read goes through `open_url`, which applies the address policy of `--index-url` to
the URL asked for and to every redirect hop, so a page or a wheel cannot lead mpsup to plain http
by redirecting. Pages are read bounded: an index page is a few MB; a huge one is refused, not read.
"""

from __future__ import annotations

import codecs
import ipaddress
import re
import ssl
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

from mpsup.errors import UserError
from mpsup.safe_files import parse_json, read_bytes_bounded
from mpsup.units import fmt_limit
from mpsup.waits import announced

_ACCEPT = "application/vnd.pypi.simple.v1+json, application/vnd.pypi.simple.v1+html;q=0.2, text/html;q=0.01"
# The nightly channel's torch page, the largest we know of, is a few MB; 32 MiB leaves ample room
# while a 50 MB page (once 841 MB of memory and 35 s) is refused before it is parsed.
MAX_INDEX_PAGE_BYTES = 32 << 20
# The whole page, however the server paces it: the nightly torch page takes seconds on a slow line.
PAGE_DEADLINE_S = 120.0
_SHA256 = re.compile(r"[0-9a-fA-F]{64}")


class IndexUnreachable(Exception):
    """The index could not be read (offline, DNS, refused, HTTP error): the caller says so in one line."""


class ProjectNotFound(IndexUnreachable):
    """The index answered, but has no page for the project (HTTP 404, or no such folder)."""


@dataclass(frozen=True)
class IndexFile:
    filename: str
    url: str
    sha256: str | None = None
    size: int | None = None
    requires_python: str | None = None
    yanked: bool = False
    upload_time: str | None = None  # PEP 700, where the index gives it


def normalize_name(name: str) -> str:
    """PEP 503: runs of -, _ and . are one dash, lower case."""
    return re.sub(r"[-_.]+", "-", name).lower()


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def check_index_url(url: str, what: str = "--index-url") -> None:
    """https and file are fine; plain http only to this machine (tests, a local mirror).

    Hosts are judged as written: `127.1` or a name that happens to resolve to 127.0.0.1 is not
    "this machine" here, so a redirect cannot smuggle one in either.
    """
    parsed = urllib.parse.urlsplit(url)
    if parsed.scheme in ("https", "file"):
        return
    if parsed.scheme == "http":
        if _is_loopback(parsed.hostname or ""):
            return
        raise UserError(f"{what} {url}: plain http is refused (anyone on the path could swap the wheel); use https")
    raise UserError(f"{what} {url}: expected an https://, file:// or loopback http:// URL")


def check_link(url: str, index_url: str, what: str = "the index links the wheel at") -> None:
    """A link on an index page obeys the same rule, and only a local index may point at local files."""
    check_index_url(url, what)
    if urllib.parse.urlsplit(url).scheme == "file" and urllib.parse.urlsplit(index_url).scheme != "file":
        raise UserError(f"{what} {url}: a remote index may not point at files on this machine")


def project_url(index_url: str, project: str) -> str:
    return index_url.rstrip("/") + "/" + normalize_name(project) + "/"


class _AnchorParser(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.anchors: list[tuple[dict[str, str | None], str]] = []
        self._open: dict[str, str | None] | None = None
        self._text: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "a":
            self._open = dict(attrs)
            self._text = []

    def handle_data(self, data: str) -> None:
        if self._open is not None:
            self._text.append(data)

    def handle_endtag(self, tag: str) -> None:
        if tag == "a" and self._open is not None:
            self.anchors.append((self._open, "".join(self._text).strip()))
            self._open = None


def _split_hash(url: str) -> tuple[str, str | None]:
    base, _, fragment = url.partition("#")
    match = re.search(r"sha256=([0-9a-fA-F]{64})", fragment)
    return base, match.group(1).lower() if match else None


def parse_html_page(text: str, page_url: str) -> list[IndexFile]:
    """PEP 503 anchors; hrefs are resolved against the page's own URL."""
    parser = _AnchorParser()
    parser.feed(text)
    files = []
    for attrs, label in parser.anchors:
        href = attrs.get("href")
        if not href:
            continue
        url, sha = _split_hash(urllib.parse.urljoin(page_url, href))
        filename = urllib.parse.unquote(urllib.parse.urlsplit(url).path.rsplit("/", 1)[-1]) or label
        files.append(IndexFile(filename, url, sha, None, attrs.get("data-requires-python"), "data-yanked" in attrs))
    return files


def _str_or_none(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _json_entry(entry: Any, page_url: str) -> IndexFile | None:
    """One PEP 691 file entry; None for entries too malformed to use. Mistyped optional fields count as absent."""
    if (
        not isinstance(entry, dict)
        or not isinstance(entry.get("filename"), str)
        or not isinstance(entry.get("url"), str)
    ):
        return None
    if not entry["filename"] or not entry["url"]:
        return None
    url, frag_sha = _split_hash(urllib.parse.urljoin(page_url, entry["url"]))
    hashes: dict[str, Any] = entry["hashes"] if isinstance(entry.get("hashes"), dict) else {}
    listed = _str_or_none(hashes.get("sha256"))
    sha = listed.lower() if listed and _SHA256.fullmatch(listed) else frag_sha
    size = entry.get("size")
    size = size if isinstance(size, int) and not isinstance(size, bool) and size >= 0 else None
    yanked = entry.get("yanked")
    return IndexFile(
        entry["filename"],
        url,
        sha,
        size,
        _str_or_none(entry.get("requires-python")),
        bool(yanked) if isinstance(yanked, (bool, str)) else False,
        _str_or_none(entry.get("upload-time")),
    )


def parse_json_page(text: str, page_url: str) -> list[IndexFile]:
    """PEP 691 (with PEP 700's size and upload time where given); a page that is not one is a UserError naming it."""
    doc = parse_json(text, page_url, "index page (PEP 691 JSON)")
    if not isinstance(doc, dict) or not isinstance(doc.get("files", []), list):
        raise UserError(f"{page_url}: not a PEP 691 index page (expected an object with a 'files' list)")
    return [f for entry in doc.get("files", []) if (f := _json_entry(entry, page_url)) is not None]


@dataclass(frozen=True)
class Fetched:
    text: str
    url: str  # after redirects: relative links resolve against this
    content_type: str


Fetcher = Callable[[str], Fetched]


def ssl_context(cafile: str | None) -> ssl.SSLContext:
    """The user's pip `cert` setting (a corporate CA bundle) where they have one; else the system's."""
    return ssl.create_default_context(cafile=cafile) if cafile else ssl.create_default_context()


def local_path(url: str) -> Path | None:
    """The file a `file://` URL names; None for other schemes."""
    parsed = urllib.parse.urlsplit(url)
    return Path(urllib.request.url2pathname(parsed.path)) if parsed.scheme == "file" else None


class _PolicyRedirects(urllib.request.HTTPRedirectHandler):
    """Each redirect hop must pass the rule the user's own --index-url passes, before it is followed."""

    def redirect_request(self, req, fp, code, msg, headers, newurl):  # type: ignore[no-untyped-def]
        target = urllib.parse.urljoin(req.full_url, newurl)
        try:
            check_index_url(target, f"{req.full_url} redirects to")
            if urllib.parse.urlsplit(target).scheme == "file":
                raise UserError(
                    f"{req.full_url} redirects to {target}: a redirect may not lead to files on this machine"
                )
        except UserError:
            fp.close()
            raise
        return super().redirect_request(req, fp, code, msg, headers, newurl)


def open_url(
    url: str,
    *,
    cafile: str | None = None,
    timeout: float = 30.0,
    accept: str = _ACCEPT,
    method: str = "GET",
    what: str = "the URL",
):  # type: ignore[no-untyped-def]
    """urlopen with the user's CA bundle and the address policy on the URL and on every redirect hop.

    Proxies come from the usual *_proxy variables.
    """
    check_index_url(url, what)
    request = urllib.request.Request(url, headers={"Accept": accept, "User-Agent": "mpsup"}, method=method)
    opener = urllib.request.build_opener(urllib.request.HTTPSHandler(context=ssl_context(cafile)), _PolicyRedirects())
    return opener.open(request, timeout=timeout)


def _charset(name: str | None) -> str:
    try:
        return codecs.lookup(name).name if name else "utf-8"
    except LookupError:  # a server naming a charset Python does not know: read it as UTF-8
        return "utf-8"


def read_capped(
    resp: Any,
    url: str,
    max_bytes: int = MAX_INDEX_PAGE_BYTES,
    deadline_s: float = PAGE_DEADLINE_S,
    started: float | None = None,
) -> bytes:
    """The body, streamed, refused as soon as it passes `max_bytes` (Content-Length is checked first) or
    `deadline_s` after `started` (a time.monotonic(); default now): a server that sends a byte now and then
    never trips the socket's timeout, which bounds each read alone."""
    too_big = UserError(
        f"{url}: the index page is larger than {fmt_limit(max_bytes)}; refusing to read it (is this a package index?)"
    )
    length = resp.headers.get("Content-Length")
    if length and length.isdigit() and int(length) > max_bytes:
        raise too_big
    # read1 returns what has arrived; read(n) would wait for all n bytes, past the deadline
    read = resp.read1 if hasattr(resp, "read1") else resp.read
    chunks, total = [], 0
    end = (time.monotonic() if started is None else started) + deadline_s
    while chunk := read(1 << 20):
        total += len(chunk)
        if total > max_bytes:
            raise too_big
        chunks.append(chunk)
        if time.monotonic() > end:
            raise IndexUnreachable(
                f"{url}: the page was not read in {deadline_s:.0f} s ({total:,} bytes so far); is the index this slow?"
            )
    return b"".join(chunks)


# The reader's own deadline check comes first when both are due, since it can say how much arrived.
_DEADLINE_GRACE_S = 0.5


def within_deadline(work: Callable[[], Fetched], url: str, deadline_s: float) -> Fetched:
    """`work()` in a daemon thread, given up `deadline_s` after now: connecting and the status line and headers
    have only the per-read timeout, which a server sending a byte now and then never trips. A thread given up
    on ends at its next read timeout or when the server closes."""
    box: list[tuple[bool, Any]] = []

    def run() -> None:
        try:
            box.append((True, work()))
        except BaseException as exc:  # handed to the caller's thread as it is
            box.append((False, exc))

    thread = threading.Thread(target=run, name="mpsup-index-page", daemon=True)
    thread.start()
    thread.join(deadline_s + _DEADLINE_GRACE_S)
    if not box:
        raise IndexUnreachable(
            f"{url}: the page was not read in {deadline_s:.0f} s (the server had not finished its answer); "
            "is the index this slow?"
        )
    done, value = box[0]
    if done:
        return value  # type: ignore[no-any-return]
    raise value


def default_fetcher(
    cafile: str | None = None,
    timeout: float = 30.0,
    max_bytes: int = MAX_INDEX_PAGE_BYTES,
    deadline_s: float = PAGE_DEADLINE_S,
) -> Fetcher:
    """`timeout` bounds each network read; `deadline_s` the whole page, and is said on stderr while it waits."""

    def fetch(url: str) -> Fetched:
        with announced(f"the index page {url}", deadline_s):
            return _fetch(url)

    def _fetch(url: str) -> Fetched:
        path = local_path(url)
        if path is not None:
            if path.is_dir():
                path = path / "index.html"
            if not path.exists():
                raise ProjectNotFound(f"{path}: No such file")
            return Fetched(
                read_bytes_bounded(path, "index page", max_bytes).decode("utf-8", errors="replace"), url, "text/html"
            )
        return within_deadline(lambda: _fetch_network(url, time.monotonic()), url, deadline_s)

    def _fetch_network(url: str, started: float) -> Fetched:
        try:
            # One read may not outlast the page's own deadline either.
            per_read = min(timeout, deadline_s)
            with open_url(url, cafile=cafile, timeout=per_read, what="the index page") as resp:
                body = read_capped(resp, url, max_bytes, deadline_s, started)
                text = body.decode(_charset(resp.headers.get_content_charset()), errors="replace")
                return Fetched(text, resp.geturl(), resp.headers.get("Content-Type", ""))
        except urllib.error.HTTPError as exc:
            kind = ProjectNotFound if exc.code == 404 else IndexUnreachable
            raise kind(f"{url}: HTTP {exc.code} {exc.reason}") from None
        except (urllib.error.URLError, OSError) as exc:
            reason = getattr(exc, "reason", exc)
            raise IndexUnreachable(f"{url}: {reason}") from None

    return fetch


def list_project_files(index_url: str, project: str, fetch: Fetcher) -> list[IndexFile]:
    """Every file the index lists for `project`; an unknown project is an empty list."""
    url = project_url(index_url, project)
    try:
        page = fetch(url)
    except ProjectNotFound:
        return []
    except IndexUnreachable as exc:
        if "HTTP 404" in str(exc) or "No such file" in str(exc):  # fetchers written before ProjectNotFound
            return []
        raise
    if "json" in page.content_type:
        return parse_json_page(page.text, page.url)
    return parse_html_page(page.text, page.url)
