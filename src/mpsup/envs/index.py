"""Read a package index's simple API: PEP 691 JSON where offered, PEP 503 HTML otherwise.

Only what picking a wheel needs is kept: file name, absolute URL, sha256, size, Requires-Python,
yanked. `file://` indexes are read from disk (a folder's page is its index.html).
"""

from __future__ import annotations

import ipaddress
import json
import re
import ssl
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from html.parser import HTMLParser
from pathlib import Path

from mpsup.errors import UserError

_ACCEPT = "application/vnd.pypi.simple.v1+json, application/vnd.pypi.simple.v1+html;q=0.2, text/html;q=0.01"


class IndexUnreachable(Exception):
    """The index could not be read (offline, DNS, refused, HTTP error): the caller says so in one line."""


@dataclass(frozen=True)
class IndexFile:
    filename: str
    url: str
    sha256: str | None = None
    size: int | None = None
    requires_python: str | None = None
    yanked: bool = False


def normalize_name(name: str) -> str:
    """PEP 503: runs of -, _ and . are one dash, lower case."""
    return re.sub(r"[-_.]+", "-", name).lower()


def check_index_url(url: str, what: str = "--index-url") -> None:
    """https and file are fine; plain http only to this machine (tests, a local mirror)."""
    parsed = urllib.parse.urlsplit(url)
    if parsed.scheme in ("https", "file"):
        return
    if parsed.scheme == "http":
        host = parsed.hostname or ""
        if host == "localhost":
            return
        try:
            if ipaddress.ip_address(host).is_loopback:
                return
        except ValueError:
            pass
        raise UserError(f"{what} {url}: plain http is refused (anyone on the path could swap the wheel); use https")
    raise UserError(f"{what} {url}: expected an https://, file:// or loopback http:// URL")


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


def parse_json_page(text: str, page_url: str) -> list[IndexFile]:
    """PEP 691 (with PEP 700's size where given)."""
    doc = json.loads(text)
    files = []
    for entry in doc.get("files", []):
        if not isinstance(entry, dict) or not entry.get("filename") or not entry.get("url"):
            continue
        url, frag_sha = _split_hash(urllib.parse.urljoin(page_url, entry["url"]))
        hashes = entry.get("hashes") if isinstance(entry.get("hashes"), dict) else {}
        size = entry.get("size") if isinstance(entry.get("size"), int) else None
        files.append(IndexFile(entry["filename"], url, (hashes.get("sha256") or frag_sha), size,
                               entry.get("requires-python"), bool(entry.get("yanked"))))
    return files


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


def open_url(url: str, *, cafile: str | None = None, timeout: float = 30.0, accept: str = _ACCEPT, method: str = "GET"):
    """urlopen with the user's CA bundle; proxies come from the usual *_proxy variables."""
    request = urllib.request.Request(url, headers={"Accept": accept, "User-Agent": "mpsup"}, method=method)
    return urllib.request.urlopen(request, timeout=timeout, context=ssl_context(cafile))


def default_fetcher(cafile: str | None = None, timeout: float = 30.0) -> Fetcher:
    def fetch(url: str) -> Fetched:
        path = local_path(url)
        if path is not None:
            if path.is_dir():
                path = path / "index.html"
            try:
                return Fetched(path.read_text(errors="replace"), url, "text/html")
            except OSError as exc:
                raise IndexUnreachable(f"{path}: {exc.strerror or exc}") from None
        try:
            with open_url(url, cafile=cafile, timeout=timeout) as resp:
                body = resp.read().decode(resp.headers.get_content_charset() or "utf-8", errors="replace")
                return Fetched(body, resp.geturl(), resp.headers.get("Content-Type", ""))
        except urllib.error.HTTPError as exc:
            raise IndexUnreachable(f"{url}: HTTP {exc.code} {exc.reason}") from None
        except (urllib.error.URLError, OSError) as exc:
            reason = getattr(exc, "reason", exc)
            raise IndexUnreachable(f"{url}: {reason}") from None

    return fetch


def list_project_files(index_url: str, project: str, fetch: Fetcher) -> list[IndexFile]:
    """Every file the index lists for `project`; an unknown project is an empty list."""
    url = project_url(index_url, project)
    try:
        page = fetch(url)
    except IndexUnreachable as exc:
        if "HTTP 404" in str(exc) or "No such file" in str(exc):
            return []
        raise
    if "json" in page.content_type:
        try:
            return parse_json_page(page.text, page.url)
        except (json.JSONDecodeError, AttributeError):
            raise IndexUnreachable(f"{url}: not a valid PEP 691 JSON page") from None
    return parse_html_page(page.text, page.url)
