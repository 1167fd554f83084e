"""install-rc under a hostile index and hostile records (issue 10: items 1, 2, 3, 5, 7, 8).

Every hostile input is built here, in code; the servers are scripted ones on 127.0.0.1.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
from pathlib import Path

import pytest
from rich.console import Console

from mpsup.envs.discover import pick_wheel
from mpsup.envs.download import fetch_wheel, wheel_file_name
from mpsup.envs.index import (
    Fetched,
    IndexFile,
    IndexUnreachable,
    check_link,
    default_fetcher,
    list_project_files,
    parse_json_page,
)
from mpsup.envs.plan import InstallPlan, InstallRequest, plan_install
from mpsup.envs.tags import Target
from mpsup.errors import OperationFailed, UserError
from tests.conftest import run_cli
from tests.pkgindex import LINUX_PROBE, Routes, build_wheel, fake_torch_files, serve_routes

MAC = Target((3, 11), "cpython", False, "darwin", "arm64", macos=(15, 1))


def _plan(index_url: str, **request: object) -> InstallPlan:
    plan = plan_install(
        InstallRequest(python=Path(sys.executable), index_url=index_url, installer="uv", **request),  # type: ignore[arg-type]
        probe=lambda _p: LINUX_PROBE,
    )
    assert isinstance(plan, InstallPlan)
    return plan


@pytest.fixture
def wheel(tmp_path: Path) -> tuple[Path, str]:
    w = build_wheel(tmp_path / "built", "torch", "2.16.0rc1", "py3-none-any", fake_torch_files("2.16.0rc1"))
    return w, hashlib.sha256(w.read_bytes()).hexdigest()


def _files_under(root: Path) -> set[Path]:
    return {p for p in root.rglob("*") if p.is_file()}


# Item 1: a download is named only from the validated wheel file name, inside a private folder.


@pytest.mark.parametrize("page_kind", ["json", "html"])
def test_an_encoded_dot_dot_url_cannot_place_the_download_outside_the_data_dir(
    tmp_path: Path, mpsup_home: Path, wheel, page_kind: str
) -> None:
    """The URL's last segment decodes to `./../../../escaped.whl`; it once named the file (one appeared outside MPSUP_HOME)."""
    w, sha = wheel
    hostile = "/files/.%2F..%2F..%2F..%2Fescaped.whl"
    routes = Routes()
    routes.page(hostile, w.read_bytes(), "application/octet-stream")
    if page_kind == "json":
        doc = {
            "meta": {"api-version": "1.0"},
            "files": [{"filename": w.name, "url": hostile, "hashes": {"sha256": sha}}],
        }
        routes.page("/simple/torch/", json.dumps(doc), "application/vnd.pypi.simple.v1+json")
    else:  # PEP 503: the anchor's final path segment is the file name, so the hostile name itself must be refused
        routes.page("/simple/torch/", f'<a href="{hostile}#sha256={sha}">{w.name}</a>')
    before = _files_under(tmp_path)
    with serve_routes(routes) as url:
        if page_kind == "html":
            with pytest.raises(OperationFailed, match="lists no torch wheels"):
                _plan(f"{url}/simple")
            return
        plan = _plan(f"{url}/simple")
        fetched = fetch_wheel(plan.wheel.url, plan.wheel.filename, plan.wheel.sha256, mpsup_home / "downloads")
    assert fetched.path == mpsup_home / "downloads" / w.name == plan.wheel_path
    assert _files_under(tmp_path) - before == {fetched.path}  # nothing else written, anywhere
    assert (mpsup_home / "downloads").stat().st_mode & 0o777 == 0o700


@pytest.mark.parametrize(
    "name",
    [
        "../torch-2.16.0-py3-none-any.whl",
        "torch-2.16.0-py3-none-x/../../y.whl",
        "torch-2.16.0-py3-none-any.whl/x.whl",
        "torch-2.16.0-py3-none-any\\..\\x.whl",
        ".torch-2.16.0-py3-none-any.whl",
        "torch-2.16.0-py3-none-any.whl\x00.whl",
        "evil-2.16.0-py3-none-any.whl",
        "torch-2.16.0.tar.gz",
        "torch.whl",
        "",
    ],
)
def test_only_a_plain_wheel_name_of_the_project_names_a_file(name: str) -> None:
    with pytest.raises(UserError) as info:
        wheel_file_name(name, "torch", "https://x/simple")
    assert "not a torch wheel file name" in str(info.value) and "\n" not in str(info.value)
    assert pick_wheel([IndexFile(name, f"https://x/{name}", "a" * 64)], MAC).wheel is None


def test_a_real_wheel_name_passes() -> None:
    name = "torch-2.11.0.dev20260128-cp311-cp311-macosx_11_0_arm64.whl"
    assert wheel_file_name(name, "torch") == name
    assert wheel_file_name("torch-2.4.1+cpu-cp312-cp312-win_amd64.whl", "torch")


# Item 2: the address policy on every hop and every link.


def test_redirects_to_a_refused_address_are_not_followed(wheel) -> None:
    """`127.1` reaches this machine but is refused when typed; a redirect once led there (page and wheel both followed)."""
    w, sha = wheel
    routes = Routes()
    with serve_routes(routes) as url:
        port = url.rsplit(":", 1)[1]
        routes.redirect("/simple/torch/", f"http://127.1:{port}/real/torch/")
        with pytest.raises(UserError, match=r"redirects to http://127\.1:\d+/real/torch/: plain http is refused"):
            _plan(f"{url}/simple")
        assert routes.hits == [(f"127.0.0.1:{port}", "/simple/torch/")]  # the refused hop was never requested

        routes.hits.clear()
        routes.page("/simple/torch/", f'<a href="/r/{w.name}#sha256={sha}">{w.name}</a>')
        routes.redirect(f"/r/{w.name}", f"http://127.1:{port}/files/{w.name}")
        routes.page(f"/files/{w.name}", w.read_bytes(), "application/octet-stream")
        with pytest.raises(UserError, match="plain http is refused"):
            _plan(f"{url}/simple")  # the plan's HEAD request for the size meets the redirect first
        with pytest.raises(UserError, match="plain http is refused"):
            fetch_wheel(f"{url}/r/{w.name}", w.name, sha, Path(os.environ["MPSUP_HOME"]) / "downloads")
        assert (f"127.1:{port}", f"/files/{w.name}") not in routes.hits
        assert not list((Path(os.environ["MPSUP_HOME"]) / "downloads").iterdir())  # no partial file left


@pytest.mark.parametrize(
    "location",
    ["http://example.com/torch/", "http://192.168.1.5/torch/", "ftp://example.com/torch/", "file:///etc/passwd"],
)
def test_every_kind_of_refused_redirect_stops_before_any_connection(location: str) -> None:
    routes = Routes()
    routes.redirect("/simple/torch/", location)
    with serve_routes(routes) as url, pytest.raises((UserError, IndexUnreachable)) as info:
        list_project_files(f"{url}/simple", "torch", default_fetcher(timeout=5))
    # urllib itself refuses a redirect to file:// or ftp:// (an HTTPError): either way, one line and nothing read.
    assert "redirect" in str(info.value).lower() or "refused" in str(info.value)
    assert len(routes.hits) == 1


def test_a_loopback_redirect_is_followed(wheel) -> None:
    w, sha = wheel
    routes = Routes()
    routes.redirect("/simple/torch/", "/mirror/torch/")
    routes.page("/mirror/torch/", f'<a href="../../files/{w.name}#sha256={sha}">{w.name}</a>')
    with serve_routes(routes) as url:
        (f,) = list_project_files(f"{url}/simple", "torch", default_fetcher())
    assert f.url == f"{url}/files/{w.name}"  # relative links resolve against the page after the redirect


@pytest.mark.parametrize(
    ("link", "index", "ok"),
    [
        ("https://files.example/t.whl", "https://index.example/simple", True),
        ("http://127.0.0.1:8000/t.whl", "https://index.example/simple", True),
        ("http://files.example/t.whl", "https://index.example/simple", False),
        ("file:///home/me/t.whl", "https://index.example/simple", False),
        ("file:///srv/files/t.whl", "file:///srv/simple", True),
    ],
)
def test_links_obey_the_same_rule(link: str, index: str, ok: bool) -> None:
    if ok:
        check_link(link, index)
    else:
        with pytest.raises(UserError):
            check_link(link, index)


# Item 3: no sha256, no install, unless the user says so.


def test_a_link_without_sha256_is_refused_in_one_line_naming_it(tmp_path: Path, wheel) -> None:
    w, _sha = wheel
    page = tmp_path / "idx" / "torch" / "index.html"
    page.parent.mkdir(parents=True)
    page.write_text(f'<a href="{w.as_uri()}">{w.name}</a>')
    with pytest.raises(UserError) as info:
        _plan((tmp_path / "idx").as_uri())
    message = str(info.value)
    assert w.as_uri() in message and "--allow-unhashed" in message and "\n" not in message

    plan = _plan((tmp_path / "idx").as_uri(), allow_unhashed=True)
    assert plan.wheel.sha256 is None and plan.allow_unhashed
    assert any("no sha256" in n and "computed from the download" in n for n in plan.notes)
    with pytest.raises(UserError, match="no sha256"):
        fetch_wheel(plan.wheel.url, plan.wheel.filename, None, tmp_path / "dl")
    fetched = fetch_wheel(plan.wheel.url, plan.wheel.filename, None, tmp_path / "dl", allow_unhashed=True)
    assert (fetched.sha256, fetched.sha256_from) == (hashlib.sha256(w.read_bytes()).hexdigest(), "download")


def test_a_download_longer_than_the_index_says_is_cut_off(mpsup_home: Path, wheel) -> None:
    w, sha = wheel
    routes = Routes()
    routes.stream(f"/files/{w.name}", b"x" * 4096, 64)
    with serve_routes(routes) as url, pytest.raises(OperationFailed, match="larger than the 1000 bytes"):
        fetch_wheel(f"{url}/files/{w.name}", w.name, sha, mpsup_home / "downloads", size=1000)
    assert not list((mpsup_home / "downloads").iterdir())


# Item 7: index pages are read bounded.


@pytest.mark.parametrize("declared", [True, False])
def test_an_oversized_index_page_is_refused_without_reading_it_all(declared: bool) -> None:
    routes = Routes()
    chunk = b"<a href='x'>" + b"y" * 4084
    if declared:
        routes.page("/simple/torch/", chunk * 300)
    else:
        routes.stream("/simple/torch/", chunk, 300)  # ~1.2 MB with no Content-Length
    with serve_routes(routes) as url, pytest.raises(UserError, match="larger than 1 MiB; refusing to read it"):
        list_project_files(f"{url}/simple", "torch", default_fetcher(max_bytes=1 << 20))


def test_a_fifo_or_oversized_file_page_is_refused_not_waited_on(tmp_path: Path) -> None:
    folder = tmp_path / "simple" / "torch"
    folder.mkdir(parents=True)
    os.mkfifo(folder / "index.html")
    with pytest.raises(UserError, match="not a regular file"):
        list_project_files((tmp_path / "simple").as_uri(), "torch", default_fetcher())
    (folder / "index.html").unlink()
    (folder / "index.html").write_bytes(b" " * ((1 << 20) + 1))
    with pytest.raises(UserError, match="larger than 1 MiB"):
        list_project_files((tmp_path / "simple").as_uri(), "torch", default_fetcher(max_bytes=1 << 20))


# Item 8: JSON pages through the project's one reader; mistyped entries never reach the wheel choice.


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("[" * 100_000 + "]" * 100_000, "nested too deeply"),
        ('{"files": [{"filename": "a", "url": "b", "size": ' + "9" * 5000 + "}]}", "not valid JSON"),
        ('{"files": [1, 2', "not valid JSON"),
        ('{"files": NaN}', "not valid JSON"),
        ('{"files": {"a": 1}}', "expected an object with a 'files' list"),
        ("[]", "expected an object"),
    ],
)
def test_broken_json_pages_are_one_line_naming_the_page(text: str, expected: str) -> None:
    with pytest.raises(UserError) as info:
        list_project_files(
            "https://x/simple", "torch", lambda u: Fetched(text, u, "application/vnd.pypi.simple.v1+json")
        )
    assert expected in str(info.value) and "https://x/simple/torch/" in str(info.value)


def test_mistyped_json_entries_are_skipped_or_their_bad_fields_ignored() -> None:
    name = "torch-2.16.0-cp311-none-macosx_14_0_arm64.whl"
    entries = [
        {"filename": 5, "url": "x"},
        {"filename": name},
        {"filename": name, "url": ["x"]},
        "junk",
        None,
        {
            "filename": name,
            "url": "t.whl",
            "hashes": {"sha256": 5},
            "requires-python": 5,
            "size": "big",
            "yanked": [1],
            "upload-time": 3,
        },
    ]
    files = parse_json_page(json.dumps({"files": entries}), "https://x/simple/torch/")
    assert files == [IndexFile(name, "https://x/simple/torch/t.whl", None, None, None, False, None)]
    assert pick_wheel(files, MAC).wheel is not None


# Items 5 and 8: records and the plan, as shown.


def _record_dir(home: Path, name: str, doc: object) -> Path:
    folder = home / "envs" / name
    folder.mkdir(parents=True)
    (folder / "mpsup-env.json").write_text(doc if isinstance(doc, str) else json.dumps(doc))
    return folder


def test_list_skips_bad_records_with_a_warning_and_never_hangs(mpsup_home: Path) -> None:
    _record_dir(
        mpsup_home,
        "good",
        {
            "name": "good",
            "python": "/p/[old] env/[/x]/bin/python",
            "prefix": "/p/[old] env/[/x]",
            "torch_version": "2.16.0rc1",
            "channel": "test",
            "wheel": {"sha256": "ab" * 32},
        },
    )
    _record_dir(mpsup_home, "corrupt", "{not json")
    _record_dir(mpsup_home, "wrong-types", {"python": "/p", "wheel": "x"})
    _record_dir(mpsup_home, "not-an-object", [1, 2])
    fifo = mpsup_home / "envs" / "fifo"
    fifo.mkdir()
    os.mkfifo(fifo / "mpsup-env.json")
    res = run_cli("install-rc", "--list", env={"COLUMNS": "250"})
    assert res.returncode == 0, res.stderr
    assert "/p/[old] env/[/x]" in res.stdout and "abababababab" in res.stdout and "Traceback" not in res.stderr
    warnings = res.stderr.strip().splitlines()
    assert len(warnings) == 4 and all(w.startswith("warning: skipped ") for w in warnings)
    for name in ("corrupt", "wrong-types", "not-an-object", "fifo"):
        assert any(f"envs/{name}/mpsup-env.json" in w for w in warnings)
    listed = json.loads(run_cli("install-rc", "--list", "--json").stdout)
    assert [d["name"] for d in listed] == ["good"]


def test_the_plan_shows_markup_like_text_as_it_is(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, wheel) -> None:
    from mpsup.envs.render import render_plan

    home = tmp_path / "[old] home [/x]"
    monkeypatch.setenv("MPSUP_HOME", str(home))
    w, sha = wheel
    page = tmp_path / "[b]idx" / "torch" / "index.html"
    page.parent.mkdir(parents=True)
    page.write_text(f'<a href="{w.as_uri()}#sha256={sha}">{w.name}</a>')
    plan = _plan("file://" + str(tmp_path / "[b]idx"))  # brackets kept as typed, not percent-encoded
    console = Console(record=True, width=400)
    render_plan(plan, console)
    text = console.export_text()
    assert str(home / "envs") in text and "[b]idx" in text
