"""install-rc against real PyTorch listings and real Macs (issue 15, items 1-6).

Listings are written from published facts: the PEP 503 lines of download.pytorch.org/whl/cpu/torch/
for 2.4.1 (file names and sha256s as kept in bazelbuild/rules_python's tests), and the macOS wheel
names of 2.8 to 2.13 and of a nightly given in issue 15. The macOS version captures come from
../shared/data/real-mac.
"""

from __future__ import annotations

import hashlib
import json
import re
import sys
from pathlib import Path

import pytest

from mpsup.envs.discover import pick_wheel
from mpsup.envs.index import IndexFile, parse_html_page
from mpsup.envs.plan import InstallPlan, InstallRequest, NothingToDo, plan_install, read_host_macos
from mpsup.envs.tags import Target, supported_tags, target_from_probe
from mpsup.errors import UserError
from mpsup.syscmd import CommandResult
from tests.conftest import REAL_MAC
from tests.pkgindex import build_wheel, fake_torch_files, write_index

# download.pytorch.org/whl/cpu/torch/, torch 2.4.1: Linux x86_64 and Windows builds are `+cpu` local versions.
CPU_2_4_1 = [
    (
        "torch-2.4.1+cpu-cp311-cp311-linux_x86_64.whl",
        "2b03e20f37557d211d14e3fb3f71709325336402db132a1e0dd8b47392185baf",
    ),
    ("torch-2.4.1+cpu-cp311-cp311-win_amd64.whl", "76a6fe7b10491b650c630bc9ae328df40f79a948296b41d3b087b29a8a63cbad"),
    (
        "torch-2.4.1+cpu-cp312-cp312-linux_x86_64.whl",
        "8800deef0026011d502c0c256cc4b67d002347f63c3a38cd8e45f1f445c61364",
    ),
    ("torch-2.4.1+cpu-cp312-cp312-win_amd64.whl", "3a570e5c553415cdbddfe679207327b3a3806b21c6adea14fba77684d1619e97"),
    (
        "torch-2.4.1-cp311-cp311-manylinux_2_17_aarch64.manylinux2014_aarch64.whl",
        "30be2844d0c939161a11073bfbaf645f1c7cb43f62f46cc6e4df1c119fb2a798",
    ),
    (
        "torch-2.4.1-cp311-none-macosx_11_0_arm64.whl",
        "ddddbd8b066e743934a4200b3d54267a46db02106876d21cf31f7da7a96f98ea",
    ),
    (
        "torch-2.4.1-cp312-cp312-manylinux_2_17_aarch64.manylinux2014_aarch64.whl",
        "36109432b10bd7163c9b30ce896f3c2cca1b86b9765f956a1594f0ff43091e2a",
    ),
    (
        "torch-2.4.1-cp312-none-macosx_11_0_arm64.whl",
        "72b484d5b6cec1a735bf3fa5a1c4883d01748698c5e9cfdbeb4ffab7c7987e0d",
    ),
]
CPU_PAGE_URL = "https://download.pytorch.org/whl/cpu/torch/"


def _pep503(lines: list[tuple[str, str]]) -> str:
    """The page as the index serves it: absolute-path hrefs with `+` percent-encoded, the file name as the anchor text."""
    return "\n".join(
        f'    <a href="/whl/cpu/{name.replace("+", "%2B")}#sha256={sha}">{name}</a><br/>' for name, sha in lines
    )


def _mac(py: tuple[int, int], macos: tuple[int, int], free_threaded: bool = False) -> Target:
    return Target(py, "cpython", free_threaded, "darwin", "arm64", macos=macos)


def test_the_real_cpu_listing_reads_back_names_urls_and_hashes() -> None:
    files = parse_html_page(_pep503(CPU_2_4_1), CPU_PAGE_URL)
    assert [(f.filename, f.sha256) for f in files] == CPU_2_4_1
    assert files[2].url == "https://download.pytorch.org/whl/cpu/torch-2.4.1%2Bcpu-cp312-cp312-linux_x86_64.whl"


def test_a_mac_ignores_the_cpu_indexs_plus_cpu_builds() -> None:
    """2.4.1+cpu sorts above 2.4.1 but has no macOS wheel: it is not a release for a Mac, not even a note."""
    files = parse_html_page(_pep503(CPU_2_4_1), CPU_PAGE_URL)
    pick = pick_wheel(files, _mac((3, 12), (15, 1)))
    assert pick.wheel is not None and pick.wheel.file.filename == "torch-2.4.1-cp312-none-macosx_11_0_arm64.whl"
    assert pick.wheel.file.sha256 == "72b484d5b6cec1a735bf3fa5a1c4883d01748698c5e9cfdbeb4ffab7c7987e0d"
    assert pick.notes == ()
    pinned = pick_wheel(files, _mac((3, 11), (14, 0)), version="2.4.1")
    assert pinned.wheel is not None and pinned.wheel.file.filename == "torch-2.4.1-cp311-none-macosx_11_0_arm64.whl"
    missing = pick_wheel(files, _mac((3, 12), (15, 1)), version="2.5.0", where="the cpu index")
    assert missing.message == "torch 2.5.0 is not on the cpu index (newest there: 2.4.1)"


def test_linux_still_takes_its_own_plus_cpu_build_and_aarch64_the_plain_one() -> None:
    files = parse_html_page(_pep503(CPU_2_4_1), CPU_PAGE_URL)
    x86 = pick_wheel(files, Target((3, 12), "cpython", False, "linux", "x86_64", glibc=(2, 36)))
    assert x86.wheel is not None and x86.wheel.file.filename == "torch-2.4.1+cpu-cp312-cp312-linux_x86_64.whl"
    arm = pick_wheel(files, Target((3, 12), "cpython", False, "linux", "aarch64", glibc=(2, 36)))
    assert arm.wheel is not None and arm.wheel.file.filename.startswith(
        "torch-2.4.1-cp312-cp312-manylinux_2_17_aarch64"
    )
    assert arm.notes == ()
    win = pick_wheel(files, Target((3, 11), "cpython", False, "win32", "AMD64"))
    assert win.wheel is not None and win.wheel.file.filename == "torch-2.4.1+cpu-cp311-cp311-win_amd64.whl"


def _names(version: str, pythons: tuple[str, ...], abi: str, platform: str) -> list[str]:
    return [f"torch-{version}-{py}-{abi.replace('PY', py)}-{platform}.whl" for py in pythons]


# macOS arm64 wheel names across releases (issue 15, item 2).
RELEASES = [
    *_names("2.8.0", ("cp310", "cp311", "cp312", "cp313"), "none", "macosx_11_0_arm64"),
    *_names("2.10.0", ("cp310", "cp311", "cp312", "cp313"), "none", "macosx_11_0_arm64"),
    "torch-2.10.0-cp314-cp314-macosx_14_0_arm64.whl",
    *_names("2.11.0", ("cp310", "cp311", "cp312", "cp313", "cp314"), "PY", "macosx_11_0_arm64"),
    *_names("2.12.0", ("cp310", "cp311", "cp312", "cp313", "cp314"), "PY", "macosx_14_0_arm64"),
    *_names("2.13.0", ("cp310", "cp311", "cp312", "cp313", "cp314"), "PY", "macosx_14_0_arm64"),
    "torch-2.13.0-cp314-cp314t-macosx_14_0_arm64.whl",
]


def _listing(names: list[str]) -> list[IndexFile]:
    return [
        IndexFile(n, f"https://download.pytorch.org/whl/cpu/{n}", hashlib.sha256(n.encode()).hexdigest()) for n in names
    ]


@pytest.mark.parametrize(
    ("target", "expected"),
    [
        (_mac((3, 12), (15, 1)), "torch-2.13.0-cp312-cp312-macosx_14_0_arm64.whl"),
        (_mac((3, 12), (14, 0)), "torch-2.13.0-cp312-cp312-macosx_14_0_arm64.whl"),
        (_mac((3, 12), (13, 6)), "torch-2.11.0-cp312-cp312-macosx_11_0_arm64.whl"),  # the last release for macOS 13
        (_mac((3, 14), (13, 6)), "torch-2.11.0-cp314-cp314-macosx_11_0_arm64.whl"),  # 2.10's cp314 already needed 14
        (_mac((3, 14), (15, 0), free_threaded=True), "torch-2.13.0-cp314-cp314t-macosx_14_0_arm64.whl"),
        (_mac((3, 13), (12, 7)), "torch-2.11.0-cp313-cp313-macosx_11_0_arm64.whl"),
    ],
)
def test_the_wheel_each_mac_gets_across_releases(target: Target, expected: str) -> None:
    pick = pick_wheel(_listing(RELEASES), target)
    assert pick.wheel is not None and pick.wheel.file.filename == expected


def test_a_mac_on_macos_13_is_told_plainly_that_2_12_needs_macos_14() -> None:
    macos13 = _mac((3, 12), (13, 6))
    pick = pick_wheel(_listing(RELEASES), macos13)
    assert pick.notes == (
        "torch 2.13.0 needs macOS 14.0 or newer; this Mac runs macOS 13.6",
        "torch 2.12.0 needs macOS 14.0 or newer; this Mac runs macOS 13.6",
    )
    test_channel = [n for n in RELEASES if n.startswith("torch-2.12.0")]  # the test channel of 2.12 lists only 2.12
    none = pick_wheel(_listing(test_channel), macos13, where="https://download.pytorch.org/whl/test/cpu")
    assert none.wheel is None
    assert none.message == (
        "no torch wheel on https://download.pytorch.org/whl/test/cpu fits cp312 on macOS 13.6 arm64: the newest "
        "release, 2.12.0, needs macOS 14.0 or newer (this Mac runs macOS 13.6; PyTorch publishes no wheel for it "
        "from that release on)"
    )
    pinned = pick_wheel(_listing(RELEASES), macos13, version="2.12.0")
    assert pinned.message is not None and "torch 2.12.0 needs macOS 14.0 or newer" in pinned.message
    # An interpreter the release has no wheel for at all is still told which ones it has.
    py39 = pick_wheel(_listing(test_channel), _mac((3, 9), (15, 0)), version="2.12.0")
    assert py39.message == "no torch 2.12.0 wheel for cp39 on macOS 15.0 arm64; this release has cp310 to cp314"


def test_release_candidates_and_nightlies_by_their_real_names() -> None:
    rc = pick_wheel(
        _listing(["torch-2.8.0-cp312-none-macosx_11_0_arm64.whl"]), _mac((3, 12), (15, 5)), allow_prereleases=False
    )
    assert (
        rc.wheel is not None and str(rc.wheel.version) == "2.8.0"
    )  # an RC carries the final version: nothing marks it
    nightly = _listing(["torch-2.11.0.dev20260128-cp311-cp311-macosx_11_0_arm64.whl"])
    pick = pick_wheel(nightly, _mac((3, 11), (15, 5)))
    assert pick.wheel is not None and pick.wheel.version.is_prerelease
    assert pick_wheel(nightly, _mac((3, 11), (15, 5)), allow_prereleases=False).wheel is None


def test_a_broken_tag_like_torch_2_10_0s_metadata_is_never_taken_for_a_fit() -> None:
    """2.10.0's installed WHEEL file says macosx_110_0_arm64: tags are computed, and such a tag means macOS 110."""
    assert not any(t.platform.startswith("macosx_110") for t in supported_tags(_mac((3, 12), (26, 0))))
    assert (
        pick_wheel(_listing(["torch-2.10.0-cp312-none-macosx_110_0_arm64.whl"]), _mac((3, 12), (26, 0))).wheel is None
    )


# Item 3: the 10.16 and 16.0 aliases.


def _probe(mac_ver: str, py: str = "3.12.4") -> dict:
    return {
        "version": py,
        "implementation": "cpython",
        "free_threaded": False,
        "platform": "darwin",
        "machine": "arm64",
        "mac_ver": mac_ver,
        "libc": None,
        "pip": False,
        "torch": {"version": "2.7.1"},
    }


def _captured(name: str) -> str:
    path = REAL_MAC / "sw_vers" / name
    if not path.is_file():
        pytest.skip(f"{path} is not present in this checkout")
    return path.read_text()


def test_an_alias_is_replaced_by_the_hosts_real_version_from_sw_vers() -> None:
    text = _captured("sw_vers_uname_brand_m1_macos26.3_beta_25D5087f__celeste-ios_TVOS_PORT_PLAN.txt")
    sw_vers = text.split("$ sw_vers", 1)[1].split("$ uname", 1)[0]

    def run(argv: list[str], timeout: float) -> CommandResult:
        return CommandResult(tuple(argv), 0, sw_vers, "")

    host = read_host_macos(run)
    assert host == "26.3"
    target = target_from_probe(_probe("10.16"), host)
    assert target.macos == (26, 3) and target.macos_reported == "10.16" and not target.macos_assumed
    assert "reports macOS 10.16, a compatibility alias; wheel tags are computed for macOS 26.3" in str(
        target.macos_note()
    )
    assert pick_wheel(_listing(RELEASES), target).wheel is not None
    # Without the correction no torch wheel fits: packaging offers no macosx_11_0 tag to "10.16".
    assert (
        pick_wheel(_listing(RELEASES), Target((3, 12), "cpython", False, "darwin", "arm64", macos=(10, 16))).wheel
        is None
    )


def test_sw_vers_under_the_compat_switch_falls_back_to_the_kernel() -> None:
    answers = {"sw_vers": "ProductName:\tmacOS\nProductVersion:\t10.16\nBuildVersion:\t21H1320\n", "sysctl": "12.7.6\n"}

    def run(argv: list[str], timeout: float) -> CommandResult:
        return CommandResult(tuple(argv), 0, answers[argv[0]], "")

    assert read_host_macos(run) == "12.7.6"
    assert read_host_macos(lambda argv, timeout: CommandResult(tuple(argv), None, "", "not found")) is None


def test_aliases_without_a_host_version() -> None:
    tahoe = target_from_probe(_probe("16.0"))
    assert tahoe.macos == (26, 0) and not tahoe.macos_assumed  # 16.0 is only ever macOS 26
    unknown = target_from_probe(_probe("10.16"))
    assert unknown.macos == (11, 0) and unknown.macos_assumed and "could not be read" in str(unknown.macos_note())
    plain = target_from_probe(_probe("15.3.1"))
    assert plain.macos == (15, 3) and plain.macos_note() is None


@pytest.fixture
def index_2_12(tmp_path: Path) -> str:
    wheel = build_wheel(
        tmp_path / "built", "torch", "2.12.0", "cp312-cp312-macosx_14_0_arm64", fake_torch_files("2.12.0")
    )
    write_index(tmp_path / "idx", [wheel])
    return (tmp_path / "idx" / "simple").as_uri()


def test_the_plan_uses_the_corrected_version_and_says_so(index_2_12: str) -> None:
    request = InstallRequest(python=Path(sys.executable), index_url=index_2_12, installer="uv")
    plan = plan_install(request, probe=lambda _p: _probe("10.16"), host_macos=lambda: "15.4")
    assert isinstance(plan, InstallPlan)
    assert (
        plan.wheel.filename == "torch-2.12.0-cp312-cp312-macosx_14_0_arm64.whl"
        and plan.target == "cp312 on macOS 15.4 arm64"
    )
    assert any("compatibility alias" in n for n in plan.notes)
    asked: list[bool] = []

    def host() -> str | None:
        asked.append(True)
        return None

    plan_install(request, probe=lambda _p: _probe("15.4"), host_macos=host)
    assert asked == []  # the host is only asked when the Python reports an alias


# Item 5: the retry suggestion is the command the user ran.


@pytest.mark.parametrize(
    ("flags", "tail"),
    [
        ({"dry_run": True}, "--python /u/.venv/bin/python --dry-run"),
        ({"yes": True}, "--python /u/.venv/bin/python --yes"),
        ({}, "--python /u/.venv/bin/python"),
        (
            {"dry_run": True, "as_json": True, "allow_unhashed": True},
            "--python /u/.venv/bin/python --allow-unhashed --dry-run --json",
        ),
    ],
)
def test_the_retry_suggestion_repeats_the_users_command(flags: dict, tail: str) -> None:
    request = InstallRequest(
        python=Path("/u/.venv/bin/python"), channel="nightly", companions=("torchvision",), **flags
    )
    command = request.retry_command()
    assert command == f"mpsup install-rc --channel nightly --with torchvision {tail}"


def test_paths_with_spaces_are_quoted_in_the_suggestion() -> None:
    assert InstallRequest(python=Path("/My Env/bin/python")).retry_command().endswith("--python '/My Env/bin/python'")


# Item 1: a release candidate and its final share the version; the hash tells them apart.


def _recorded_rc(home: Path, sha: str, channel: str = "test") -> Path:
    prefix = home / "envs" / "torch-2.8.0-cp312"
    prefix.mkdir(parents=True)
    (prefix / ".mpsup-build").write_text("")
    (prefix / "mpsup-env.json").write_text(
        json.dumps(
            {
                "name": prefix.name,
                "mode": "side-by-side",
                "prefix": str(prefix),
                "python": str(prefix / "bin" / "python"),
                "torch_version": "2.8.0",
                "channel": channel,
                "created_at": "2025-07-18T10:00:00+00:00",
                "wheel": {
                    "filename": "torch-2.8.0-cp312-none-macosx_11_0_arm64.whl",
                    "sha256": sha,
                    "sha256_from": "index",
                    "seen_at": "2025-07-18T09:59:00+00:00",
                },
            }
        )
    )
    return prefix


@pytest.fixture
def final_index(tmp_path: Path) -> tuple[str, str]:
    """The stable index after the release: the same file name as the candidate, another build."""
    wheel = build_wheel(tmp_path / "built", "torch", "2.8.0", "cp312-none-macosx_11_0_arm64", fake_torch_files("2.8.0"))
    write_index(tmp_path / "idx", [wheel])
    return (tmp_path / "idx" / "simple").as_uri(), hashlib.sha256(wheel.read_bytes()).hexdigest()


def _mac_probe() -> dict:
    return {**_probe("15.5"), "torch": {"version": "2.7.1"}}


def test_an_installed_candidate_is_named_as_one_and_the_final_is_offered(
    mpsup_home: Path, final_index: tuple[str, str]
) -> None:
    index, final_sha = final_index
    rc = _recorded_rc(mpsup_home, "c0ffee" * 10 + "abcd")
    request = InstallRequest(python=Path(sys.executable), channel="stable", index_url=index, installer="uv")
    plan = plan_install(request, probe=lambda _p: _mac_probe())
    assert isinstance(plan, InstallPlan)
    assert plan.prefix == rc.with_name(f"torch-2.8.0-cp312-{final_sha[:8]}")
    assert plan.supersedes == {"name": rc.name, "prefix": str(rc), "channel": "test", "sha256": "c0ffee" * 10 + "abcd"}
    note = plan.notes[0]
    assert note.startswith(
        "the installed torch 2.8.0 (torch-2.8.0-cp312: test channel, sha256 c0ffeec0ffee..., listed 2025-07-18) "
        "was a release candidate:"
    )
    assert f"as another build (sha256 {final_sha[:12]}...), the final release" in note
    assert note.endswith("remove the old one with: mpsup install-rc --remove torch-2.8.0-cp312")
    # The same build again is simply installed already.
    (rc / "mpsup-env.json").write_text((rc / "mpsup-env.json").read_text().replace("c0ffee" * 10 + "abcd", final_sha))
    again = plan_install(request, probe=lambda _p: _mac_probe())
    assert isinstance(again, NothingToDo) and "already installed" in again.message


def test_a_later_candidate_on_the_test_channel_is_told_apart_too(
    mpsup_home: Path, final_index: tuple[str, str]
) -> None:
    index, _sha = final_index
    _recorded_rc(mpsup_home, "ab" * 32)
    plan = plan_install(
        InstallRequest(python=Path(sys.executable), index_url=index, installer="uv"), probe=lambda _p: _mac_probe()
    )
    assert isinstance(plan, InstallPlan)
    assert "was an earlier candidate" in plan.notes[0] and "a later candidate or the final" in plan.notes[0]


def test_a_version_shared_by_two_builds_must_be_named(mpsup_home: Path) -> None:
    from mpsup.envs.resolve import resolve_environment

    rc = _recorded_rc(mpsup_home, "ab" * 32)
    final = rc.with_name("torch-2.8.0-cp312-12345678")
    final.mkdir()
    (final / "mpsup-env.json").write_text(
        (rc / "mpsup-env.json").read_text().replace(rc.name, final.name).replace('"test"', '"stable"')
    )
    with pytest.raises(UserError, match=re.escape("(torch-2.8.0-cp312, torch-2.8.0-cp312-12345678); name one of them")):
        resolve_environment("2.8.0", "--candidate")
    assert resolve_environment(final.name, "--candidate") == final / "bin" / "python"


def test_two_digit_minor_releases_count_as_newer(tmp_path: Path) -> None:
    """2.10.0 is newer than 2.9.1 (compared as strings, once, it was not: "nothing newer is published")."""
    wheel = build_wheel(
        tmp_path / "built", "torch", "2.10.0", "cp312-none-macosx_11_0_arm64", fake_torch_files("2.10.0")
    )
    write_index(tmp_path / "idx", [wheel])
    probe = {**_probe("15.5"), "torch": {"version": "2.9.1"}}
    plan = plan_install(
        InstallRequest(python=Path(sys.executable), index_url=(tmp_path / "idx" / "simple").as_uri(), installer="uv"),
        probe=lambda _p: probe,
    )
    assert isinstance(plan, InstallPlan) and plan.to_version == "2.10.0"


# -- an index page has a deadline of its own, not only each read ---------------------------------------------------


def test_an_index_page_trickled_a_byte_at_a_time_hits_the_pages_deadline(monkeypatch: pytest.MonkeyPatch) -> None:
    """A loopback server that sends one byte every 0.2 s never trips the 5 s per-read timeout; the page's own
    deadline (2 s here, 120 s by default) does, and the wait is said while it lasts."""
    import http.server
    import time

    from mpsup import waits
    from mpsup.envs.index import IndexUnreachable, default_fetcher, list_project_files
    from tests.pkgindex import _serving

    class Trickle(http.server.BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: object) -> None:
            pass

        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "text/html")
            self.end_headers()
            try:
                for _ in range(150):  # 30 s at most: the client is long gone by then
                    self.wfile.write(b"<")
                    self.wfile.flush()
                    time.sleep(0.2)
            except (BrokenPipeError, ConnectionResetError):
                pass

    monkeypatch.setattr(waits, "NOTICE_S", 0.3)
    said: list[str] = []
    waits.set_notice(said.append)
    try:
        with _serving(Trickle) as url:
            t0 = time.monotonic()
            with pytest.raises(IndexUnreachable, match=r"the page was not read in 2 s \(\d+ bytes so far\)"):
                list_project_files(f"{url}/simple", "torch", default_fetcher(timeout=5, deadline_s=2.0))
            took = time.monotonic() - t0
    finally:
        waits.set_notice(None)
    assert 2.0 <= took < 4.5
    assert said[0] == f"waiting for the index page {url}/simple/torch/: 0 s so far, giving up at 2 s"


@pytest.mark.parametrize("stage", ["status line", "headers"])
def test_an_index_server_trickling_its_status_line_or_headers_hits_the_pages_deadline(
    monkeypatch: pytest.MonkeyPatch, stage: str
) -> None:
    """Connecting and the response head have only the per-read timeout (5 s here): a server sending one byte of
    its status line or headers every 0.2 s must still be given up at the page's deadline (2 s here)."""
    import http.server
    import time

    from mpsup.envs.index import IndexUnreachable, default_fetcher, list_project_files
    from tests.pkgindex import _serving

    head = b"HTTP/1.0 200 OK\r\n" if stage == "headers" else b""

    class TrickleHead(http.server.BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: object) -> None:
            pass

        def do_GET(self) -> None:
            try:
                self.wfile.write(head)
                self.wfile.flush()
                filler = b"HTTP/1.0 200 OK" if stage == "status line" else b"X-Slow: " + b"a" * 200
                for byte in filler[:40]:  # 8 s at most: the client is long gone by then
                    self.wfile.write(bytes([byte]))
                    self.wfile.flush()
                    time.sleep(0.2)
            except (BrokenPipeError, ConnectionResetError):
                pass

    with _serving(TrickleHead) as url:
        t0 = time.monotonic()
        with pytest.raises(IndexUnreachable, match=r"the page was not read in 2 s \(the server had not finished"):
            list_project_files(f"{url}/simple", "torch", default_fetcher(timeout=5, deadline_s=2.0))
        took = time.monotonic() - t0
    assert 2.0 <= took < 4.0
