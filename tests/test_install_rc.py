"""install-rc end to end: real venvs, real pip, a real PEP 503 index on 127.0.0.1 serving wheels built here.

pip is shielded from this machine's global configuration (PIP_CONFIG_FILE=/dev/null) and pointed at
the local index as if it were the user's own configured index, so nothing leaves the machine.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from packaging.tags import sys_tags

from tests.conftest import run_cli
from tests.pkgindex import Gate, build_wheel, fake_torch_files, serve, write_index

pytestmark = pytest.mark.slow

THIS_TAG = str(next(iter(sys_tags())))  # fits this interpreter by definition
PY_TAG = f"cp{sys.version_info[0]}{sys.version_info[1]}"


def _torch(out: Path, version: str, tag: str = "py3-none-any") -> Path:
    return build_wheel(out, "torch", version, tag, fake_torch_files(version))


@pytest.fixture(scope="module")
def companion_gate() -> Gate:
    """Holds the companion's download from the index named "slow" until the test that asked for it releases it."""
    return Gate("/slow/files/torchvision")


@pytest.fixture(scope="module")
def indexes(tmp_path_factory: pytest.TempPathFactory, companion_gate: Gate):
    """Several indexes under one server: good, bad hash, broken wheel, nothing newer."""
    root = tmp_path_factory.mktemp("index")
    built = root / "built"
    stable = _torch(built, "2.15.0")
    rc = _torch(built, "2.16.0rc1", THIS_TAG)
    unfitting_newer = [
        _torch(built, "2.17.0rc1", "cp311-none-macosx_14_0_arm64"),
        _torch(built, "2.17.0rc1", "cp39-cp39-manylinux_2_17_x86_64"),
    ]
    vision = build_wheel(
        built,
        "torchvision",
        "0.31.0rc1",
        files={"torchvision/__init__.py": "__version__ = '0.31.0rc1'\n"},
        requires=("torch==2.16.0rc1",),
    )
    extra = build_wheel(built, "extra-pkg", "1.0", files={"extra_pkg/__init__.py": ""})
    write_index(root / "good", [stable, rc, *unfitting_newer, vision, extra])
    write_index(root / "badhash", [stable, rc, extra], sha_override={rc.name: "0" * 64})
    broken = built / "broken" / rc.name
    broken.parent.mkdir()
    broken.write_bytes(b"this is not a zip archive")
    write_index(root / "broken", [stable, broken, extra])
    write_index(root / "old", [stable, extra])
    write_index(root / "slow", [stable, rc, vision])
    with serve(root, companion_gate) as url:
        yield {name: f"{url}/{name}/simple" for name in ("good", "badhash", "broken", "old", "slow")} | {"root": root}


@pytest.fixture(scope="module")
def pip_overrides(indexes) -> dict[str, str | None]:
    """The user's pip configuration, as far as these tests are concerned: only the local index."""
    return {
        "PIP_CONFIG_FILE": "/dev/null",
        "PIP_INDEX_URL": indexes["good"],
        "PIP_FIND_LINKS": None,
        "PIP_EXTRA_INDEX_URL": None,
        "PIP_NO_INDEX": None,
        "PIP_CERT": None,
        "PATH": "/usr/bin:/bin",
    }  # no uv on PATH: pip is the installer unless a test asks for uv


@pytest.fixture
def pip_env(pip_overrides: dict[str, str | None], monkeypatch: pytest.MonkeyPatch) -> None:
    for var, value in pip_overrides.items():
        if value is None:
            monkeypatch.delenv(var, raising=False)
        else:
            monkeypatch.setenv(var, value)


def _baseline(path: Path, overrides: dict[str, str | None], *packages: str) -> Path:
    env = {k: v for k, v in os.environ.items() if overrides.get(k, v) is not None} | {
        k: v for k, v in overrides.items() if v
    }
    subprocess.run([sys.executable, "-m", "venv", str(path)], check=True)
    py = path / "bin" / "python"
    if packages:
        subprocess.run(
            [py, "-m", "pip", "install", "-q", "--disable-pip-version-check", *packages], check=True, env=env
        )
    return py


def _freeze(py: Path) -> list[str]:
    out = subprocess.run([py, "-m", "pip", "freeze"], capture_output=True, text=True, check=True).stdout
    return sorted(ln for ln in out.splitlines() if ln.strip())


@pytest.fixture(scope="module")
def shared_baseline(tmp_path_factory: pytest.TempPathFactory, pip_overrides) -> Path:
    """A user's environment for the tests that must leave it as it was (each checks that it did)."""
    return _baseline(tmp_path_factory.mktemp("shared") / "user-env", pip_overrides, "torch==2.15.0", "extra-pkg==1.0")


@pytest.fixture
def baseline(shared_baseline: Path, pip_env) -> Path:
    return shared_baseline


@pytest.fixture
def own_baseline(tmp_path: Path, pip_overrides, pip_env) -> Path:
    """A user's environment that the test may change (in-place upgrades)."""
    return _baseline(tmp_path / "user-env", pip_overrides, "torch==2.15.0", "extra-pkg==1.0")


def _envs(home: Path) -> list[str]:
    envs = home / "envs"
    return sorted(p.name for p in envs.iterdir()) if envs.is_dir() else []


def test_dry_run_picks_the_fitting_candidate_and_changes_nothing(baseline: Path, indexes, mpsup_home: Path) -> None:
    before = _freeze(baseline)
    res = run_cli("install-rc", "--python", str(baseline), "--index-url", indexes["good"], "--dry-run", "--json")
    assert res.returncode == 0, res.stderr
    doc = json.loads(res.stdout)
    plan = doc["plan"]
    assert doc["dry_run"] is True
    # 2.17.0rc1 is newer but has no wheel for this interpreter: 2.16.0rc1 is the pick, and the plan says why.
    assert plan["to_version"] == "2.16.0rc1"
    assert plan["wheel"]["filename"].endswith(f"{THIS_TAG}.whl")
    assert plan["baseline_torch"] == "2.15.0"
    assert any("2.17.0rc1 has no wheel" in n for n in plan["notes"])
    assert plan["commands"][-1][:3] == [plan["python"], "-m", "pip"]
    assert _envs(mpsup_home) == [] and not (mpsup_home / "cache").exists()
    assert _freeze(baseline) == before


def test_saying_no_shows_the_plan_first_changes_nothing_and_exits_1(
    baseline: Path, indexes, mpsup_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from mpsup.envs import command
    from mpsup.envs.plan import InstallRequest
    from mpsup.errors import UserError

    seen: list[str] = []

    def say_no(question: str) -> bool:
        seen.append(question)
        return False

    hooks = command.Hooks(show_plan=lambda plan: seen.append(f"plan {plan.to_version}"), ask=say_no)
    monkeypatch.setattr(sys.stdin, "isatty", lambda: True)  # a terminal to ask on; the hook answers no
    request = InstallRequest(python=baseline, index_url=indexes["good"])
    result = command.run(command.InstallRcRequest(request), hooks)
    assert isinstance(result, command.Declined) and result.exit_code == 1 and result.to_json() is None
    assert seen[0] == "plan 2.16.0rc1" and seen[1].startswith("Install torch 2.16.0rc1 into ")
    assert _envs(mpsup_home) == [] and not (mpsup_home / "cache").exists()
    # without a terminal the question cannot be asked: a usage error, before anything is downloaded
    monkeypatch.setattr(sys.stdin, "isatty", lambda: False)
    with pytest.raises(UserError, match="pass --yes"):
        command.run(command.InstallRcRequest(request), hooks)


def test_side_by_side_install_verifies_records_lists_and_removes(baseline: Path, indexes, mpsup_home: Path) -> None:
    before = _freeze(baseline)
    res = run_cli(
        "install-rc",
        "--python",
        str(baseline),
        "--index-url",
        indexes["good"],
        "--with",
        "torchvision",
        "--yes",
        "--json",
    )
    assert res.returncode == 0, res.stderr
    env = json.loads(res.stdout)["environment"]
    prefix = Path(env["prefix"])
    assert prefix == mpsup_home / "envs" / f"torch-2.16.0rc1-{PY_TAG}"
    assert _envs(mpsup_home) == [prefix.name]  # no temporary build left beside it
    assert env["torch_version"] == "2.16.0rc1" and env["companions"] == {"torchvision": "0.31.0rc1"}
    assert env["baseline_torch"] == "2.15.0" and env["mode"] == "side-by-side"
    out = subprocess.run(
        [env["python"], "-c", "import torch, torchvision; print(torch.__version__)"], capture_output=True, text=True
    )
    assert out.stdout.strip() == "2.16.0rc1"
    # Built under a temporary name, then moved: its scripts must point at the new place and still run.
    pip_script = prefix / "bin" / "pip"
    script = pip_script.read_text()
    assert f"{prefix}/bin/python" in script and ".building-" not in script
    assert subprocess.run([pip_script, "--version"], capture_output=True).returncode == 0
    assert f'VIRTUAL_ENV="{prefix}"' in (prefix / "bin" / "activate").read_text().replace("'", '"')
    assert ".building-" not in (prefix / "pyvenv.cfg").read_text()
    rc_wheel = indexes["root"] / "good" / "files" / env["wheel"]["filename"]
    assert (
        env["wheel"]["sha256"] == hashlib.sha256(rc_wheel.read_bytes()).hexdigest()
        and env["wheel"]["sha256_from"] == "index"
    )
    assert env["wheel"]["seen_at"] and not list((mpsup_home / "downloads").glob(".download-*"))
    assert _freeze(baseline) == before

    from mpsup.envs.resolve import resolve_environment

    assert resolve_environment("2.16.0rc1", "--candidate") == Path(env["python"])
    listed = json.loads(run_cli("install-rc", "--list", "--json").stdout)
    assert [d["torch_version"] for d in listed] == ["2.16.0rc1"]
    table = run_cli("install-rc", "--list", env={"COLUMNS": "250"}).stdout
    assert env["wheel"]["sha256"][:12] in table and " test " in table
    again = run_cli("install-rc", "--python", str(baseline), "--index-url", indexes["good"], "--yes")
    assert again.returncode == 0 and "already installed" in again.stdout
    removed = run_cli("install-rc", "--remove", "2.16.0rc1")
    assert removed.returncode == 0, removed.stderr
    assert _envs(mpsup_home) == []
    unknown = run_cli("install-rc", "--remove", "2.16.0rc1")
    assert unknown.returncode == 2 and len(unknown.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize(
    ("index", "expected"), [("badhash", "sha256 does not match"), ("broken", "pip install failed")]
)
def test_a_broken_candidate_leaves_nothing_behind(
    baseline: Path, indexes, mpsup_home: Path, index: str, expected: str
) -> None:
    before = _freeze(baseline)
    res = run_cli("install-rc", "--python", str(baseline), "--index-url", indexes[index], "--yes")
    assert res.returncode == 1
    assert expected in res.stderr
    assert "Traceback" not in res.stderr
    assert _envs(mpsup_home) == []  # neither the environment nor a temporary build
    assert _freeze(baseline) == before


def test_in_place_upgrade_restores_on_failure_and_rolls_back(own_baseline: Path, indexes, mpsup_home: Path) -> None:
    baseline = own_baseline
    before = _freeze(baseline)
    failed = run_cli("install-rc", "--python", str(baseline), "--index-url", indexes["broken"], "--in-place", "--yes")
    assert failed.returncode == 1 and "pip install failed" in failed.stderr
    assert _freeze(baseline) == before  # put back by itself
    assert _envs(mpsup_home) == []

    res = run_cli(
        "install-rc",
        "--python",
        str(baseline),
        "--index-url",
        indexes["good"],
        "--in-place",
        "--with",
        "torchvision",
        "--yes",
        "--json",
    )
    assert res.returncode == 0, res.stderr
    doc = json.loads(res.stdout)
    assert doc["environment"]["mode"] == "in-place" and Path(doc["rollback"]).is_file()
    during = _freeze(baseline)
    assert "torch==2.16.0rc1" in during and "torchvision==0.31.0rc1" in during
    assert json.loads(run_cli("install-rc", "--list", "--json").stdout)[0]["mode"] == "in-place"

    back = run_cli("install-rc", "--rollback", "--python", str(baseline.with_name("python3")), "--yes", "--json")
    assert back.returncode == 0, back.stderr
    result = json.loads(back.stdout)
    assert result["removed"] == ["torchvision"] and result["reinstalled"] == ["torch==2.15.0"]
    assert _freeze(baseline) == before
    assert json.loads(run_cli("install-rc", "--list", "--json").stdout) == []
    assert (
        run_cli("install-rc", "--rollback", "--python", str(baseline), "--yes").returncode == 2
    )  # nothing left to roll back


def test_clone_carries_the_users_packages_but_not_the_torch_family(baseline: Path, indexes, mpsup_home: Path) -> None:
    res = run_cli("install-rc", "--python", str(baseline), "--index-url", indexes["good"], "--clone", "--yes", "--json")
    assert res.returncode == 0, res.stderr
    env = json.loads(res.stdout)["environment"]
    assert env["cloned_packages"] == 1
    assert _freeze(Path(env["python"])) == ["extra-pkg==1.0", "torch==2.16.0rc1"]
    assert not list((mpsup_home / "tmp").glob("*"))  # the temporary requirements file is gone


def test_nothing_newer_says_so_and_exits_zero(baseline: Path, indexes, mpsup_home: Path) -> None:
    res = run_cli("install-rc", "--python", str(baseline), "--index-url", indexes["old"], "--yes")
    assert res.returncode == 0, res.stderr
    assert "no release candidate newer than 2.15.0" in res.stdout
    # stable asks pip itself (configured here with the local index): 2.15.0 is also its newest.
    stable = run_cli("install-rc", "--python", str(baseline), "--channel", "stable", "--json")
    assert stable.returncode == 0, stable.stderr
    assert json.loads(stable.stdout) == {
        "status": "nothing-to-do",
        "baseline_torch": "2.15.0",
        "newest": "2.15.0",
        "message": json.loads(stable.stdout)["message"],
    }
    assert _envs(mpsup_home) == []


def test_stable_channel_takes_the_wheel_pip_would_pick(baseline: Path, indexes, mpsup_home: Path) -> None:
    # A pinned version may equal the installed one side by side (a clean copy to compare against).
    res = run_cli(
        "install-rc", "--python", str(baseline), "--channel", "stable", "--version", "2.15.0", "--dry-run", "--json"
    )
    assert res.returncode == 0, res.stderr
    plan = json.loads(res.stdout)["plan"]
    assert plan["to_version"] == "2.15.0" and plan["index_url"] is None
    assert plan["wheel"]["url"].startswith(indexes["good"].removesuffix("/simple"))
    assert plan["wheel"]["sha256"] and plan["index_label"].startswith("the installer's configured index")
    assert _envs(mpsup_home) == []


def test_no_fitting_wheel_names_what_exists(baseline: Path, indexes) -> None:
    res = run_cli(
        "install-rc", "--python", str(baseline), "--index-url", indexes["good"], "--version", "2.17.0rc1", "--dry-run"
    )
    assert res.returncode == 1
    line = res.stderr.strip()
    assert len(line.splitlines()) == 1
    assert f"no torch 2.17.0rc1 wheel for {PY_TAG} on Linux" in line and "this release has" in line


def test_unreachable_index_is_one_line_with_the_command_for_later(baseline: Path, mpsup_home: Path) -> None:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again when the block ends: nothing listens there
    res = run_cli("install-rc", "--python", str(baseline), "--index-url", f"http://127.0.0.1:{port}/simple", "--yes")
    assert res.returncode == 1
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and "cannot read the package index" in lines[0]
    assert f"When online, run: mpsup install-rc --channel test --index-url http://127.0.0.1:{port}/simple" in lines[0]
    assert lines[0].endswith(f"--python {baseline} --yes")
    # A dry run is suggested as a dry run: the suggestion is the command the user ran, never one that installs.
    dry = run_cli(
        "install-rc", "--python", str(baseline), "--index-url", f"http://127.0.0.1:{port}/simple", "--dry-run"
    )
    assert dry.returncode == 1
    assert dry.stderr.strip().endswith(
        f"When online, run: mpsup install-rc --channel test --index-url http://127.0.0.1:{port}/simple "
        f"--python {baseline} --dry-run"
    )
    assert _envs(mpsup_home) == []


def test_refusals_are_usage_errors(baseline: Path, indexes) -> None:
    plain_http = run_cli(
        "install-rc", "--python", str(baseline), "--index-url", "http://example.com/simple", "--dry-run"
    )
    assert plain_http.returncode == 2 and "plain http is refused" in plain_http.stderr
    no_terminal = run_cli("install-rc", "--python", str(baseline), "--index-url", indexes["good"])
    assert no_terminal.returncode == 2 and "--yes" in no_terminal.stderr
    both = run_cli("install-rc", "--in-place", "--clone", "--python", str(baseline))
    assert both.returncode == 2
    bad_version = run_cli("install-rc", "--python", str(baseline), "--version", "two.fifteen")
    assert bad_version.returncode == 2 and "PEP 440" in bad_version.stderr


def test_uv_installs_side_by_side_too(
    baseline: Path, indexes, mpsup_home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import shutil

    uv = shutil.which("uv", path=str(Path(sys.executable).parent)) or shutil.which("uv")
    if uv is None:
        pytest.skip("uv is not installed (it comes with the test extra)")
    monkeypatch.setenv("PATH", f"{Path(uv).parent}:/usr/bin:/bin")
    monkeypatch.setenv("UV_INDEX_URL", indexes["good"])
    monkeypatch.setenv("UV_CACHE_DIR", str(tmp_path / "uv-cache"))
    monkeypatch.setenv("UV_NO_CONFIG", "1")
    before = _freeze(baseline)
    res = run_cli(
        "install-rc",
        "--python",
        str(baseline),
        "--index-url",
        indexes["good"],
        "--with",
        "torchvision",
        "--yes",
        "--json",
    )
    assert res.returncode == 0, res.stderr
    doc = json.loads(res.stdout)
    assert doc["plan"]["installer"] == "uv"  # auto picks uv when it is on PATH
    assert doc["plan"]["commands"][0][-1] == "--without-pip"
    env = doc["environment"]
    assert env["installer"] == "uv" and env["companions"] == {"torchvision": "0.31.0rc1"}
    out = subprocess.run(
        [env["python"], "-c", "import torch; print(torch.__version__)"], capture_output=True, text=True
    )
    assert out.stdout.strip() == "2.16.0rc1"
    assert not (Path(env["prefix"]) / "bin" / "pip").exists()
    assert _freeze(baseline) == before


@pytest.mark.skipif(
    not os.environ.get("MPSUP_TEST_REAL_STABLE"),
    reason="set MPSUP_TEST_REAL_STABLE=VERSION to install that torch for real from this machine's pip index (minutes, GBs)",
)
def test_real_stable_install_beside_this_environment(mpsup_home: Path) -> None:
    """The issue's acceptance run: the installer's own index, a real torch, beside the running environment."""
    version = os.environ["MPSUP_TEST_REAL_STABLE"]
    res = run_cli("install-rc", "--channel", "stable", "--version", version, "--yes", "--json")
    assert res.returncode == 0, res.stderr
    env = json.loads(res.stdout)["environment"]
    assert env["torch_version"] == version and env["baseline_torch"] != version
    out = subprocess.run(
        [env["python"], "-c", "import torch; print(torch.__version__)"], capture_output=True, text=True
    )
    assert out.stdout.strip().split("+")[0] == version


def _start_install(baseline: Path, index: str) -> subprocess.Popen[str]:
    argv = ["install-rc", "--python", str(baseline), "--index-url", index, "--with", "torchvision", "--yes"]
    return subprocess.Popen(
        [sys.executable, "-m", "mpsup", *argv],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )


def test_ctrl_c_during_the_install_leaves_nothing_behind(
    baseline: Path, indexes, companion_gate: Gate, mpsup_home: Path
) -> None:
    """Interrupted while the installer fetches a companion (the index holds that download until the Ctrl-C has
    been sent), as a terminal's Ctrl-C would."""

    before = _freeze(baseline)
    # A shell's background job (CI, `pytest &`) starts with SIGINT ignored, and a child inherits that through
    # exec: a Ctrl-C would then do nothing. A handler set here is reset to the default in the child instead.
    inherited = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        proc = _start_install(baseline, indexes["slow"])
    finally:
        signal.signal(signal.SIGINT, inherited)
    try:
        # The companion is asked for only in the second install step: the new environment is half built.
        assert companion_gate.arrived.wait(120), "the install never asked for its companion"
        assert list((mpsup_home / "envs").glob(".building-*/lib/python*/site-packages/torch"))
        os.killpg(proc.pid, signal.SIGINT)
        _out, err = proc.communicate(timeout=60)
    finally:
        companion_gate.release.set()
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 130, err  # 128 + SIGINT: stopped by the Ctrl-C, not failed nor finished
    assert "Traceback" not in err
    assert _envs(mpsup_home) == []
    assert _freeze(baseline) == before
