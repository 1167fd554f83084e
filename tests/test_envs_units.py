"""install-rc's pure parts: target tags, index pages, wheel choice, installer settings and reports."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from packaging.tags import Tag, sys_tags

from mpsup.envs.discover import pick_wheel
from mpsup.envs.execute import check_space, space_needed
from mpsup.envs.index import IndexFile, check_index_url, parse_html_page, parse_json_page
from mpsup.envs.installer import InstallArgs, clone_lines, install_commands, parse_pip_config_list, parse_pip_report
from mpsup.envs.plan import InstallPlan, PlannedWheel, is_root_refused
from mpsup.envs.tags import Target, supported_tags, target_from_probe
from mpsup.errors import OperationFailed, UserError
from mpsup.probe import PROBE_SCRIPT
from tests.pkgindex import LINUX_PROBE

MAC_311 = Target((3, 11), "cpython", False, "darwin", "arm64", macos=(15, 1))


def test_tags_from_the_probe_equal_what_this_interpreter_supports() -> None:
    """Computed from probe facts alone, the tag set is exactly packaging's own for the running Python."""
    probe = json.loads(
        subprocess.run([sys.executable, str(PROBE_SCRIPT)], capture_output=True, text=True, check=True).stdout
    )
    assert set(supported_tags(target_from_probe(probe))) == set(sys_tags())


def test_mac_tags_take_pytorch_wheels_and_refuse_intel_and_older_pythons() -> None:
    tags = set(supported_tags(MAC_311))
    assert Tag("cp311", "none", "macosx_14_0_arm64") in tags  # how PyTorch names its macOS wheels
    assert Tag("cp311", "cp311", "macosx_11_0_arm64") in tags
    assert Tag("cp311", "none", "macosx_14_0_x86_64") not in tags
    assert Tag("cp311", "none", "macosx_16_0_arm64") not in tags  # built for a newer macOS than this one
    assert Tag("cp312", "cp312", "macosx_14_0_arm64") not in tags
    free_threaded = set(supported_tags(Target((3, 14), "cpython", True, "darwin", "arm64", macos=(15, 0))))
    assert Tag("cp314", "cp314t", "macosx_14_0_arm64") in free_threaded
    assert not any(t.abi == "abi3" for t in free_threaded)


def test_probe_facts_become_a_target() -> None:
    target = target_from_probe(
        {
            "version": "3.12.4",
            "implementation": "cpython",
            "free_threaded": False,
            "platform": "darwin",
            "machine": "arm64",
            "mac_ver": "15.3.1",
            "libc": None,
        }
    )
    assert target == Target((3, 12), "cpython", False, "darwin", "arm64", macos=(15, 3))
    assert target.describe() == "cp312 on macOS 15.3 arm64"
    linux = target_from_probe({"version": "3.11.7", "platform": "linux", "machine": "x86_64", "libc": "glibc 2.36"})
    assert linux.glibc == (2, 36) and linux.macos is None


def test_html_page_links_hashes_and_attributes() -> None:
    page = """<html><body>
    <a href="/whl/test/torch-2.16.0rc1-cp311-none-macosx_14_0_arm64.whl#sha256=ABCDEF0123456789abcdef0123456789abcdef0123456789abcdef0123456789"
       data-requires-python="&gt;=3.10">torch-2.16.0rc1-cp311-none-macosx_14_0_arm64.whl</a>
    <a href="../../files/torch-2.15.0-py3-none-any.whl" data-yanked="">torch-2.15.0-py3-none-any.whl</a>
    <a>no href</a></body></html>"""
    files = parse_html_page(page, "https://download.pytorch.org/whl/test/torch/")
    assert files[0] == IndexFile(
        "torch-2.16.0rc1-cp311-none-macosx_14_0_arm64.whl",
        "https://download.pytorch.org/whl/test/torch-2.16.0rc1-cp311-none-macosx_14_0_arm64.whl",
        "abcdef0123456789abcdef0123456789abcdef0123456789abcdef0123456789",
        None,
        ">=3.10",
        False,
    )
    assert files[1].url == "https://download.pytorch.org/whl/files/torch-2.15.0-py3-none-any.whl"
    assert files[1].yanked and files[1].sha256 is None
    assert len(files) == 2


def test_json_page_with_sizes() -> None:
    doc = {
        "meta": {"api-version": "1.1"},
        "name": "torch",
        "files": [
            {
                "filename": "torch-2.16.0rc1-cp311-none-macosx_14_0_arm64.whl",
                "url": "https://files.example/t.whl",
                "hashes": {"sha256": "aa" * 32},
                "requires-python": ">=3.10",
                "size": 74_000_000,
                "yanked": False,
            },
            {"filename": "broken entry"},
        ],
    }
    files = parse_json_page(json.dumps(doc), "https://index.example/simple/torch/")
    assert files == [
        IndexFile(
            "torch-2.16.0rc1-cp311-none-macosx_14_0_arm64.whl",
            "https://files.example/t.whl",
            "aa" * 32,
            74_000_000,
            ">=3.10",
            False,
        )
    ]


@pytest.mark.parametrize(
    "url",
    [
        "https://download.pytorch.org/whl/test/cpu",
        "file:///srv/simple",
        "http://127.0.0.1:8080/simple",
        "http://localhost/simple",
        "http://[::1]:9000/simple",
    ],
)
def test_safe_index_urls(url: str) -> None:
    check_index_url(url)


@pytest.mark.parametrize(
    "url", ["http://download.pytorch.org/whl/test/cpu", "http://192.168.1.5/simple", "ftp://x/simple", "simple"]
)
def test_unsafe_index_urls_are_refused(url: str) -> None:
    with pytest.raises(UserError):
        check_index_url(url)


def _files(*names: str, requires_python: str | None = None) -> list[IndexFile]:
    return [IndexFile(n, f"https://x/{n}", None, None, requires_python) for n in names]


RELEASES = _files(
    "torch-2.15.0-cp311-none-macosx_14_0_arm64.whl",
    "torch-2.15.0-cp312-none-macosx_14_0_arm64.whl",
    "torch-2.16.0rc1-cp311-none-macosx_14_0_arm64.whl",
    "torch-2.16.0rc1-cp311-cp311-manylinux_2_28_x86_64.whl",
    "torch-2.16.0rc1-cp312-none-macosx_14_0_arm64.whl",
    "torch-2.16.0rc1-cp313-none-macosx_14_0_arm64.whl",
    "torch-2.16.0rc1-cp314-none-macosx_14_0_arm64.whl",
    "torch-2.16.0rc1-cp314-cp314t-macosx_14_0_arm64.whl",
    "torch-2.17.0.dev20261201-cp312-none-macosx_14_0_arm64.whl",
    "torch-2.16.0rc1.tar.gz",
    "not a wheel.whl",
)


def test_pick_prefers_the_newest_fitting_release_and_says_what_it_skipped() -> None:
    pick = pick_wheel(RELEASES, MAC_311)
    assert pick.wheel is not None and pick.wheel.file.filename == "torch-2.16.0rc1-cp311-none-macosx_14_0_arm64.whl"
    assert pick.notes == ("torch 2.17.0.dev20261201 has no wheel for cp311 on macOS 15.1 arm64 (it has cp312)",)
    stable = pick_wheel(RELEASES, MAC_311, allow_prereleases=False)
    assert stable.wheel is not None and str(stable.wheel.version) == "2.15.0"


def test_pick_explains_an_interpreter_without_wheels() -> None:
    py310 = Target((3, 10), "cpython", False, "darwin", "arm64", macos=(15, 0))
    pick = pick_wheel(RELEASES, py310, version="2.16.0rc1", where="the test index")
    assert pick.wheel is None
    assert (
        pick.message
        == "no torch 2.16.0rc1 wheel for cp310 on macOS 15.0 arm64; this release has cp311 to cp314, cp314t"
    )
    intel = Target((3, 11), "cpython", False, "darwin", "x86_64", macos=(15, 0))
    message = pick_wheel(RELEASES, intel).message or ""
    assert message.startswith(
        "no torch wheel on the index fits cp311 on macOS 15.0 x86_64; the newest release, 2.17.0.dev20261201, has wheels only for macosx_14_0_arm64"
    )


def test_pick_of_a_missing_version_lists_what_is_there() -> None:
    pick = pick_wheel(RELEASES, MAC_311, version="2.18.0", where="https://x/simple")
    assert (
        pick.message == "torch 2.18.0 is not on https://x/simple (newest there: 2.17.0.dev20261201, 2.16.0rc1, 2.15.0)"
    )


def test_pick_honours_requires_python() -> None:
    files = _files("torch-2.16.0rc1-py3-none-any.whl", requires_python=">=3.12")
    assert pick_wheel(files, MAC_311).wheel is None


def test_pip_config_list_env_wins_over_files() -> None:
    text = (
        "global.cert='/etc/ssl/certs/ca-certificates.crt'\nglobal.index-url='https://mirror.example/simple'\n"
        ":env:.cert='/corp/ca.pem'\ninstall.extra-index-url='https://extra.example/simple'\nnot a setting\n"
    )
    assert parse_pip_config_list(text) == {
        "cert": "/corp/ca.pem",
        "index-url": "https://mirror.example/simple",
        "extra-index-url": "https://extra.example/simple",
    }


def test_pip_report_gives_url_version_and_hash() -> None:
    report = {
        "version": "1",
        "install": [
            {
                "metadata": {"name": "torch", "version": "2.14.1"},
                "download_info": {
                    "url": "file:///opt/files/torch-2.14.1-cp311-cp311-manylinux_2_28_x86_64.whl",
                    "archive_info": {"hash": "sha256=" + "ab" * 32},
                },
            }
        ],
    }
    (pick,) = parse_pip_report(json.dumps(report))
    assert (pick.name, pick.version, pick.sha256) == ("torch", "2.14.1", "ab" * 32)


def test_clone_leaves_out_the_torch_family_only() -> None:
    frozen = [
        "transformers==4.57.0",
        "torch==2.15.0",
        "torchvision==0.30.0",
        "Torch-Audio==2.15.0",
        "triton==3.5.0",
        "nvidia-cublas-cu12==12.8",
        "diffusers @ git+https://github.com/huggingface/diffusers@abc",
        "-e git+https://example/me/mylib.git@123#egg=mylib",
        "torchmetrics==1.4",
    ]
    assert clone_lines(frozen) == [
        "transformers==4.57.0",
        "Torch-Audio==2.15.0",
        "diffusers @ git+https://github.com/huggingface/diffusers@abc",
        "-e git+https://example/me/mylib.git@123#egg=mylib",
        "torchmetrics==1.4",
    ]


def test_install_commands_keep_the_checked_wheel_apart_from_the_indexes() -> None:
    args = InstallArgs(
        "torch==2.16.0rc1", Path("/w"), ("torchvision",), None, "https://download.pytorch.org/whl/test/cpu", True
    )
    first, second = install_commands("pip", Path("/env/bin/python"), args)
    assert first[-5:] == ["--no-index", "--no-deps", "--find-links", "/w", "torch==2.16.0rc1"]
    assert second[3:] == [
        "install",
        "--no-input",
        "--disable-pip-version-check",
        "torch==2.16.0rc1",
        "torchvision",
        "--pre",
        "--extra-index-url",
        "https://download.pytorch.org/whl/test/cpu",
    ]
    uv_first, uv_second = install_commands("uv", Path("/env/bin/python"), args, uv="/usr/bin/uv")
    assert uv_first[:5] == ["/usr/bin/uv", "pip", "install", "--python", "/env/bin/python"]
    assert "--prerelease" in uv_second and "--pre" not in uv_second


def _plan(tmp_path: Path, size: int | None) -> InstallPlan:
    return InstallPlan(
        "side-by-side",
        "test",
        "https://x/simple",
        "https://x/simple",
        Path("/usr/bin/python3"),
        "2.15.0",
        "cp311 on macOS 15.1 arm64",
        "darwin",
        "2.16.0rc1",
        PlannedWheel("torch.whl", "https://x/t.whl", None, size),
        (),
        "pip",
        "uv",
        tmp_path / "envs" / "torch-2.16.0rc1-cp311",
        tmp_path / "envs" / "x" / "bin" / "python",
        tmp_path / "cache" / "torch.whl",
    )


def test_space_check_refuses_before_downloading(tmp_path: Path) -> None:
    plan = _plan(tmp_path, 80_000_000)
    assert space_needed(plan) == 80_000_000 * 5 + 300 * 2**20
    with pytest.raises(OperationFailed, match="GiB free"):
        check_space(plan, free_bytes=lambda _p: 200 * 2**20)
    check_space(plan, free_bytes=lambda _p: 10 * 2**30)
    assert space_needed(_plan(tmp_path, None)) > 1 * 2**30  # no size from the index: assume a torch-sized wheel


def test_root_is_refused_on_macos_only() -> None:
    assert is_root_refused("darwin", 0, allow_root=False)
    assert not is_root_refused("darwin", 0, allow_root=True)
    assert not is_root_refused("darwin", 501, allow_root=False)
    assert not is_root_refused("linux", 0, allow_root=False)


def test_an_https_page_linking_a_plain_http_wheel_is_refused(tmp_path: Path) -> None:
    from mpsup.envs.index import Fetched
    from mpsup.envs.plan import InstallRequest, plan_install

    page = '<a href="http://mirror.example/torch-2.16.0rc1-py3-none-any.whl#sha256=' + "0" * 64 + '">t</a>'
    probe = dict(LINUX_PROBE)
    request = InstallRequest(python=Path(sys.executable), installer="uv")
    with pytest.raises(UserError, match="plain http is refused"):
        plan_install(request, fetch=lambda url: Fetched(page, url, "text/html"), probe=lambda _p: probe)


def test_builds_left_by_dead_processes_are_cleaned(mpsup_home: Path) -> None:
    import os

    from mpsup.envs.execute import _clean_stale_builds

    envs = mpsup_home / "envs"
    dead = envs / ".building-torch-2.16.0rc1-cp311-999999999"  # above any pid_max: that process is gone
    live = envs / f".building-torch-2.16.0rc1-cp312-{os.getpid()}"  # a build still in progress
    kept = envs / "torch-2.15.0-cp311"
    for folder in (dead, live, kept):
        (folder / "bin").mkdir(parents=True)
    _clean_stale_builds()
    assert sorted(p.name for p in envs.iterdir()) == sorted([live.name, kept.name])


def test_auto_installer_keeps_pip_when_pip_is_pointed_at_a_mirror_uv_would_not_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from mpsup.envs.installer import choose_installer

    for var in ("UV_INDEX_URL", "UV_DEFAULT_INDEX", "UV_INDEX", "UV_EXTRA_INDEX_URL", "UV_FIND_LINKS"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    with_uv = {"uv": "/opt/homebrew/bin/uv", "pip": True}
    assert choose_installer("auto", with_uv, {}) == ("uv", None)
    installer, why = choose_installer("auto", with_uv, {"index-url": "https://mirror.corp/simple"})
    assert installer == "pip" and why is not None and "index-url" in why
    assert choose_installer("uv", with_uv, {"index-url": "https://mirror.corp/simple"}) == ("uv", None)
    (tmp_path / "uv").mkdir()
    (tmp_path / "uv" / "uv.toml").write_text('index-url = "https://mirror.corp/simple"\n')
    assert choose_installer("auto", with_uv, {"index-url": "https://mirror.corp/simple"})[0] == "uv"
    monkeypatch.setenv("PATH", "/nonexistent")
    assert choose_installer("auto", {"uv": None, "pip": True}, {}) == ("pip", None)


def test_file_index_and_json_pages_are_read_through_the_same_door(tmp_path: Path) -> None:
    from mpsup.envs.index import Fetched, default_fetcher, list_project_files
    from tests.pkgindex import build_wheel, write_index

    wheel = build_wheel(tmp_path / "built", "torch", "2.16.0rc1")
    write_index(tmp_path / "idx", [wheel])
    files = list_project_files((tmp_path / "idx" / "simple").as_uri(), "torch", default_fetcher())
    assert [f.filename for f in files] == [wheel.name]
    assert files[0].url == (tmp_path / "idx" / "files" / wheel.name).as_uri() and files[0].sha256
    assert list_project_files((tmp_path / "idx" / "simple").as_uri(), "torchvision", default_fetcher()) == []

    doc = {
        "meta": {"api-version": "1.0"},
        "name": "torch",
        "files": [{"filename": wheel.name, "url": f"../../files/{wheel.name}", "hashes": {}}],
    }
    served = lambda url: Fetched(json.dumps(doc), url, "application/vnd.pypi.simple.v1+json")  # noqa: E731
    (f,) = list_project_files("https://mirror.example/simple", "Torch", served)
    assert f.url == f"https://mirror.example/files/{wheel.name}" and f.sha256 is None


def test_rollback_with_nothing_saved_says_so_before_asking(mpsup_home: Path) -> None:
    from mpsup.envs.command import Hooks, rollback

    asked: list[str] = []

    def ask(question: str) -> bool:
        asked.append(question)
        return True

    # With no terminal the question itself would be refused ("pass --yes"): the missing set must come first.
    with pytest.raises(UserError, match="no saved package set"):
        rollback(Path(sys.executable), False, Hooks(ask=ask))
    assert asked == []
