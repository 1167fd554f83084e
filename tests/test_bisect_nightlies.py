"""mpsup bisect --nightlies: nightly builds listed from a local index (PEP 503 on 127.0.0.1), installed by
install-rc's machinery into throwaway environments only when the bisect probes them, removed at the end.

Most tests replace the paired run (command._Session.measure) by a fake that calls every build from the fifth
on slower, so that what is installed, reused and removed is checked in seconds with real venvs, real
installers and tiny fake torch wheels. One test measures for real: the wheels are shims of this venv's torch,
the fifth and later ones computing each torch.nn.functional.linear twice (pkgindex.slow_linear).

pip and uv are shielded from this machine's configuration (PIP_CONFIG_FILE=/dev/null, UV_NO_CONFIG=1) and
pointed at the local index, so nothing leaves the machine."""

from __future__ import annotations

import hashlib
import json
import math
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from mpsup.bisect import command
from mpsup.bisect.command import BisectRequest, Step
from mpsup.bisect.events import Installed, Released, Reused, ThrowawaysRemoved
from mpsup.bisect.logic import BAD, GOOD, Figure, Measure
from mpsup.bisect.nightlies import parse_endpoint, select_builds
from mpsup.envs.index import IndexFile
from mpsup.envs.tags import target_from_probe
from mpsup.errors import OperationFailed, UserError
from mpsup.progress import Event
from tests.conftest import run_cli
from tests.pkgindex import LINUX_PROBE, build_wheel, fake_torch_files, serve, shim_torch_files, write_index

pytestmark = pytest.mark.slow

WORKLOAD = "linear/896x896/t16"
# Nine nightlies, 1 to 9 November; the 6th has a wheel for Python 3.9 on Linux only: eight builds to bisect.
DAYS = [f"202611{d:02d}" for d in range(1, 10)]
NO_WHEEL_DAY = "20261106"
BUILDS = [f"2.16.0.dev{d}" for d in DAYS if d != NO_WHEEL_DAY]
FIRST_BAD = 4  # the fifth build, 2.16.0.dev20261105
UV = shutil.which("uv", path=str(Path(sys.executable).parent)) or shutil.which("uv")
needs_uv = pytest.mark.skipif(UV is None, reason="uv is not installed (it comes with the test extra)")


def _rev(version: str) -> str:
    return hashlib.sha1(version.encode()).hexdigest()  # a git revision per build, for the compare link


@pytest.fixture(scope="module")
def index(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    """fake: probe-only torch wheels, with builds outside the range and one without a wheel for this Python;
    broken: the same, but the fourth build's wheel is not a zip; shim: the real torch under each version."""
    root = tmp_path_factory.mktemp("nightlies")
    built = root / "built"
    fake = [
        build_wheel(built / "fake", "torch", v, files=fake_torch_files(v, git_version=_rev(v)))
        for v in ("2.16.0.dev20261031", *BUILDS, "2.16.0.dev20261110")
    ]
    fake.append(build_wheel(built / "fake", "torch", f"2.16.0.dev{NO_WHEEL_DAY}", "cp39-cp39-manylinux_2_17_x86_64"))
    write_index(root / "fake", fake)
    broken = [w for w in fake if "20261104" not in w.name]
    bad_wheel = built / "broken" / "torch-2.16.0.dev20261104-py3-none-any.whl"
    bad_wheel.parent.mkdir(parents=True)
    bad_wheel.write_bytes(b"this is not a zip archive")
    write_index(root / "broken", [*broken, bad_wheel])
    shims = [
        build_wheel(built / "shim", "torch", v, files=shim_torch_files(v, slow=i >= FIRST_BAD, git_version=_rev(v)))
        for i, v in enumerate(BUILDS)
    ]
    write_index(root / "shim", shims)
    # Hostile: a page that links one wheel in the range over plain http to another host.
    hostile = root / "hostile" / "simple" / "torch"
    hostile.mkdir(parents=True)
    (hostile / "index.html").write_text(
        "".join(
            f'<a href="{"http://example.com/x/" if v.endswith("03") else "../../../fake/files/"}'
            f'torch-{v}-py3-none-any.whl#sha256={"0" * 64}">x</a>\n'
            for v in BUILDS
        )
    )
    with serve(root) as url:
        yield {name: f"{url}/{name}/simple" for name in ("fake", "broken", "shim", "hostile")}


@pytest.fixture(scope="module")
def bare_python(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The user's interpreter for most tests: a venv without torch or pip, so probing it takes no time."""
    folder = tmp_path_factory.mktemp("user") / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(folder)], check=True)
    return folder / "bin" / "python"


def _shield(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, index_url: str, uv: bool) -> dict[str, str]:
    """The user's installer configuration, as far as these tests go: only the local index. Returned too, for
    a CLI run's environment."""
    env = {
        "PIP_CONFIG_FILE": "/dev/null",
        "PIP_INDEX_URL": index_url,
        "UV_INDEX_URL": index_url,
        "UV_NO_CONFIG": "1",
        "UV_CACHE_DIR": str(tmp_path / "uv-cache"),
        # uv on PATH makes it the installer (auto); without it, pip
        "PATH": f"{Path(UV).parent}:/usr/bin:/bin" if uv and UV else "/usr/bin:/bin",
    }
    for var in ("PIP_FIND_LINKS", "PIP_EXTRA_INDEX_URL", "PIP_NO_INDEX", "PIP_CERT"):
        monkeypatch.delenv(var, raising=False)
    for var, value in env.items():
        monkeypatch.setenv(var, value)
    return env


def _fake_measure(first_bad: int, stop_at_step: int | None = None) -> Callable[..., str | None]:
    """The paired run, replaced: builds from `first_bad` on are called slower; Ctrl-C in step `stop_at_step`."""

    def measure(self: Any, action: Measure) -> str | None:
        if stop_at_step is not None and len(self.steps) + 1 == stop_at_step:
            raise KeyboardInterrupt
        bad = action.index >= first_bad
        figure = Figure(WORKLOAD, "slower" if bad else "same", *((0.5, 0.45, 0.55) if bad else (1.0, 0.97, 1.03)))
        self.steps.append(Step(action.index, action.attempt, 0.05, None, BAD if bad else GOOD, (figure,), 0.0))
        return None

    return measure


def _request(python: Path, index_url: str, **kw: Any) -> BisectRequest:
    fields: dict[str, Any] = {
        "environments": ("20261101", "2.16.0.dev20261109"),
        "nightlies": True,
        "index_url": index_url,
        "python": python,
        "only": WORKLOAD,
        "device": "cpu",
        "budget": 0.05,
    }
    return BisectRequest(**(fields | kw))


def _venvs(home: Path) -> list[Path]:
    """Every environment under the data dir, by its pyvenv.cfg."""
    return sorted(p.parent for p in home.rglob("pyvenv.cfg")) if home.is_dir() else []


def _events(log: list[Event], kind: type[Installed | Released | Reused]) -> list[str]:
    return [event.version for event in log if isinstance(event, kind)]


# -- what the user types, and which builds -------------------------------------------------------------------------


def test_endpoints_are_dates_or_versions_and_anything_else_is_one_line() -> None:
    assert parse_endpoint("20261101", "GOOD").key == "20261101"
    assert parse_endpoint("2026-11-01", "GOOD").key == "20261101"
    assert parse_endpoint("2.16.0.dev20261101", "GOOD").key == "2.16.0.dev20261101"
    assert parse_endpoint("2.16.0dev20261101", "GOOD").key == "2.16.0.dev20261101"  # PEP 440 normalises it
    for typed, why in (("20261341", "not a date"), ("yesterday", "nightly version"), ("x" * 500, "nightly version")):
        with pytest.raises(UserError, match=why):
            parse_endpoint(typed, "GOOD")


def _files(*specs: tuple[str, str]) -> list[IndexFile]:
    return [IndexFile(f"torch-{v}-{tag}.whl", f"https://i.example/f/torch-{v}-{tag}.whl", "0" * 64) for v, tag in specs]


def test_the_builds_are_the_dev_builds_between_the_ends_with_a_wheel_for_this_python() -> None:
    target = target_from_probe(LINUX_PROBE)  # CPython 3.11 on Linux x86_64
    linux = "cp311-cp311-manylinux_2_28_x86_64"
    files = _files(
        ("2.16.0.dev20261031+cpu", linux),
        ("2.16.0.dev20261101+cpu", linux),
        ("2.16.0.dev20261101", "cp311-none-macosx_14_0_arm64"),  # the Mac wheel of the same build
        ("2.16.0.dev20261102+cpu", "cp39-cp39-manylinux_2_28_x86_64"),  # none for 3.11: left out, and said
        ("2.16.0.dev20261103+cpu", linux),
        ("2.16.0", linux),  # a release listed among nightlies is no nightly between them
        ("2.16.0.dev20261104+cpu", linux),
        ("2.17.0.dev20261105+cpu", linux),  # the version line moved on: still in date order
        ("2.17.0.dev20261106+cpu", linux),
    )
    sel = select_builds(
        files, target, parse_endpoint("20261101", "GOOD"), parse_endpoint("2.17.0.dev20261105", "BAD"), "I"
    )
    assert sel.versions == (
        "2.16.0.dev20261101+cpu",
        "2.16.0.dev20261103+cpu",
        "2.16.0.dev20261104+cpu",
        "2.17.0.dev20261105+cpu",
    )
    assert sel.skipped == ("2.16.0.dev20261102",)

    def refused(good: str, bad: str, match: str, listing: list[IndexFile] = files) -> None:
        with pytest.raises(UserError, match=match):
            select_builds(listing, target, parse_endpoint(good, "GOOD"), parse_endpoint(bad, "BAD"), "I")

    refused("20261201", "20261104", "GOOD 20261201: no nightly dated 20261201 on I")
    refused("20261101", "2.16.0.dev20261199", "BAD 2.16.0.dev20261199: torch 2.16.0.dev20261199 is not listed")
    refused("20261104", "20261101", "not older than BAD")
    refused("20261104", "20261104", "not older than BAD")
    refused("20261102", "20261104", "GOOD 2.16.0.dev20261102: no torch .* wheel for cp311")
    # a wheel in the range linked over plain http is refused before anything is installed
    http = [*files, IndexFile(f"torch-2.16.0.dev20261102-{linux}.whl", "http://evil.example/t.whl", "0" * 64)]
    refused("20261101", "20261104", "plain http is refused", http)


@pytest.mark.parametrize(
    ("which", "good", "bad", "match"),
    [
        ("fake", "2.16.0.dev20261199", "20261109", "GOOD 2.16.0.dev20261199: torch 2.16.0.dev20261199 is not listed"),
        ("fake", "20261101", "20261201", "BAD 20261201: no nightly dated 20261201"),
        ("fake", "20261109", "20261101", "not older than BAD"),
        ("hostile", "20261101", "20261108", "plain http is refused"),
        ("unreachable", "20261101", "20261109", "cannot read the index"),
    ],
)
def test_bad_input_is_one_line_and_installs_nothing(
    which: str, good: str, bad: str, match: str, index, bare_python: Path, mpsup_home: Path
) -> None:
    url = "http://127.0.0.1:9/simple" if which == "unreachable" else index[which]
    with pytest.raises(UserError, match=match):
        command.run(_request(bare_python, url, environments=(good, bad)))
    assert not (mpsup_home / "bisect-envs").exists() and not (mpsup_home / "bisect").exists()


def test_cli_bad_input_exits_2_with_one_line(index, bare_python: Path, mpsup_home: Path) -> None:
    base = ["bisect", "--nightlies", "--only", WORKLOAD, "--device", "cpu", "--python", str(bare_python)]
    res = run_cli(*base, "20261101", "20261201", "--index-url", index["fake"], "--json")
    assert res.returncode == 2 and "Traceback" not in res.stderr
    # one line, naming the build and what the index has instead
    assert [ln for ln in res.stderr.splitlines() if ln.strip()] == [
        f"mpsup: BAD 20261201: no nightly dated 20261201 on {index['fake']} (it lists 11 torch build(s), "
        "2.16.0.dev20261031 to 2.16.0.dev20261110)"
    ]
    assert json.loads(res.stdout)["exit_code"] == 2
    three = run_cli(*base, "20261101", "20261105", "20261109")
    assert three.returncode == 2 and "--nightlies takes two builds" in three.stderr
    keep = run_cli("bisect", sys.executable, sys.executable, "--only", WORKLOAD, "--keep-envs")
    assert keep.returncode == 2 and "--keep-envs goes with --nightlies" in keep.stderr
    http = run_cli(*base, "20261101", "20261109", "--index-url", "http://example.com/simple")
    assert http.returncode == 2 and "plain http is refused" in http.stderr
    assert not (mpsup_home / "bisect-envs").exists()


def test_a_models_whole_phase_is_refused_the_throwaway_environments_hold_torch_alone() -> None:
    from dataclasses import replace

    from mpsup.bench.command import BenchRequest, prepare

    plan = prepare(BenchRequest(device="cpu", only=WORKLOAD, smoke=False))
    command.check_torch_only(plan)  # a layer: fine
    phase = replace(plan.workloads[0], name="model/prefill", kind="model_phase")
    with pytest.raises(UserError, match="model/prefill runs the model whole"):
        command.check_torch_only(replace(plan, workloads=(phase,)))


# -- installs: lazily, reused, removed ------------------------------------------------------------------------------


@needs_uv
def test_only_the_probed_builds_are_installed_and_nothing_is_left(
    index, bare_python: Path, mpsup_home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _shield(monkeypatch, tmp_path, index["fake"], uv=True)
    monkeypatch.setattr(command._Session, "measure", _fake_measure(FIRST_BAD))
    seen: list[list[Path]] = []
    wheels: list[Path] = []
    log: list[Event] = []

    def progress(event: Event) -> None:
        log.append(event)
        if isinstance(event, Installed):
            seen.append(_venvs(mpsup_home))
            wheels.extend(mpsup_home.rglob("*.whl"))  # downloaded, then deleted once the environment holds it

    result = command.run(_request(bare_python, index["fake"]), progress)
    assert result.done is not None and result.done.status == "found" and result.exit_code == 0
    assert result.environments[result.done.first_bad] == "2.16.0.dev20261105"
    assert result.environments[result.done.last_good] == "2.16.0.dev20261104"
    assert result.compare_url() == (
        f"https://github.com/pytorch/pytorch/compare/{_rev('2.16.0.dev20261104')}...{_rev('2.16.0.dev20261105')}"
    )
    # the ends, then the midpoints the bisect probed; never the builds it did not need
    probed = [BUILDS[i] for i in (0, 7, 3, 5, 4)]
    assert _events(log, Installed) == probed and len(probed) <= math.log2(len(BUILDS)) + 2
    assert [s.index for s in result.steps] == [7, 3, 5, 4]
    # never more than the good build and the one being measured: each other one goes once its step is called
    assert [len(s) for s in seen] == [1, 2, 2, 2, 2]
    assert _events(log, Released) == [BUILDS[i] for i in (7, 3, 5)]
    assert wheels == []
    assert all(p.parent.parent == mpsup_home / "bisect-envs" for p in seen[-1])
    t = result.throwaway
    assert t is not None and t.state == "removed" and t.installed == tuple(probed) and t.left == ()
    assert t.builds == 8 and t.skipped == ("2.16.0.dev20261106",)
    # nothing installed outlives the bisect: no environment, no wheel, not even the folder
    assert _venvs(mpsup_home) == [] and not (mpsup_home / "bisect-envs").exists()
    assert list(mpsup_home.rglob("*.whl")) == [] and not (mpsup_home / "envs").exists()
    assert not (mpsup_home / "downloads").exists()  # not install-rc's cache either: fetched beside the builds
    doc = result.to_json()
    assert doc["nightlies"]["installed"] == probed and doc["first_bad"]["git_version"] == _rev(BUILDS[4])
    journal = json.loads(Path(doc["journal"]).read_text())
    assert [e["index"] for e in journal["nightlies"]["installs"]] == [0, 7, 3, 5, 4]
    assert journal["environments"] == BUILDS and journal["status"] == "done"


@needs_uv
def test_an_interrupted_bisect_keeps_its_installs_and_resume_reuses_them(
    index, bare_python: Path, mpsup_home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _shield(monkeypatch, tmp_path, index["fake"], uv=True)
    monkeypatch.setattr(command._Session, "measure", _fake_measure(FIRST_BAD, stop_at_step=3))
    first: list[Event] = []
    stopped = command.run(_request(bare_python, index["fake"]), first.append)
    # Ctrl-C in step 3 (build 6 of 8, just installed): exit 130, the four installs kept for the rerun, and said so
    assert stopped.interrupted == "SIGINT" and stopped.exit_code == 130 and stopped.paired_runs == 2
    assert _events(first, Installed) == [BUILDS[i] for i in (0, 7, 3, 5)]
    t = stopped.throwaway
    # the good build and the one whose step was stopped; the two whose steps were called are gone already
    assert t is not None and t.state == "kept-for-resume" and len(t.left) == 2 == len(_venvs(mpsup_home))
    assert _events(first, Released) == [BUILDS[7], BUILDS[3]]

    monkeypatch.setattr(command._Session, "measure", _fake_measure(FIRST_BAD))
    again: list[Event] = []
    done = command.run(BisectRequest(resume=True), again.append)
    assert done.done is not None and done.done.status == "found" and done.resumed_steps == 2
    assert done.environments[done.done.first_bad] == BUILDS[FIRST_BAD]
    # the good build and build 6 were reused as they were; only build 5 was new
    assert _events(again, Reused) == [BUILDS[0], BUILDS[5]] and _events(again, Installed) == [BUILDS[4]]
    t = done.throwaway
    assert t is not None and t.state == "removed" and t.reused == (BUILDS[0], BUILDS[5])
    assert t.installed == tuple(BUILDS[i] for i in (0, 7, 3, 5, 4))  # each once over both runs
    assert _venvs(mpsup_home) == [] and not (mpsup_home / "bisect-envs").exists()


@needs_uv
def test_a_failed_install_removes_what_the_bisect_installed(
    index, bare_python: Path, mpsup_home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _shield(monkeypatch, tmp_path, index["broken"], uv=True)
    monkeypatch.setattr(command._Session, "measure", _fake_measure(FIRST_BAD))
    log: list[Event] = []
    with pytest.raises(OperationFailed, match="install failed"):
        command.run(_request(bare_python, index["broken"]), log.append)
    # the ends were installed and measured; the fourth build's wheel is no zip: everything goes, the step stays
    assert _events(log, Installed) == [BUILDS[0], BUILDS[7]]
    assert _events(log, Released) == [BUILDS[7]]  # its step called, before the failed install
    assert [event.removed for event in log if isinstance(event, ThrowawaysRemoved)] == [1]
    assert _venvs(mpsup_home) == [] and not (mpsup_home / "bisect-envs").exists()
    (journal,) = (mpsup_home / "bisect").glob("*.json")
    assert len(json.loads(journal.read_text())["steps"]) == 1


def test_pip_with_the_users_configuration_and_keep_envs(
    index, mpsup_home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without uv, pip installs, reading the index the user's configuration names; --keep-envs keeps the builds
    and says where; the same bisect rerun without it removes them."""
    _shield(monkeypatch, tmp_path, index["fake"], uv=False)
    monkeypatch.setattr(command._Session, "measure", _fake_measure(1))
    req = _request(Path(sys.executable), index["fake"], environments=("20261101", "20261102"), keep_envs=True)
    kept = command.run(req)
    assert kept.done is not None and kept.done.status == "found" and kept.paired_runs == 1
    t = kept.throwaway
    assert t is not None and t.state == "kept" and t.installed == tuple(BUILDS[:2])
    envs = _venvs(mpsup_home)
    assert [str(p) for p in envs] == list(t.left) and len(envs) == 2
    for prefix in envs:
        record = json.loads((prefix / "mpsup-env.json").read_text())
        assert record["installer"] == "pip" and record["channel"] == "nightly"
        out = subprocess.run(
            [prefix / "bin" / "python", "-c", "import torch; print(torch.__version__)"],
            text=True,
            capture_output=True,
            check=True,
        )
        assert out.stdout.strip() in BUILDS[:2]
    assert sorted(p.name for p in t.folder.iterdir()) == sorted(p.name for p in envs)  # no wheel, no leftover
    from mpsup.bisect.render import throwaway_lines

    assert any(f"Kept (--keep-envs): 2 environment(s) in {t.folder}" in ln for ln in throwaway_lines(t))
    # the finished bisect again, without --keep-envs: its answer from the journal, and the builds removed
    again = command.run(_request(Path(sys.executable), index["fake"], environments=("20261101", "20261102")))
    assert again.resumed_steps == 1 and again.throwaway is not None and again.throwaway.state == "removed"
    assert _venvs(mpsup_home) == []


# -- a real bisect -------------------------------------------------------------------------------------------------


@needs_uv
def test_cli_bisects_real_builds_over_nightlies(
    index, mpsup_home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Eight shims of this venv's torch; from the fifth on each F.linear computes its product twice, about half
    as fast on any CPU. The bisect measures it through bench, as the list path does."""
    env = _shield(monkeypatch, tmp_path, index["shim"], uv=True)
    args = ["bisect", "--nightlies", BUILDS[0], DAYS[-1], "--index-url", index["shim"], "--device", "cpu"]
    res = run_cli(*args, "--only", WORKLOAD, "--budget", "0.05", "--json", env=env)
    assert res.returncode in (0, 3), res.stderr[-3000:]
    doc = json.loads(res.stdout)
    measured = {s["index"] for s in doc["steps"]}
    installed = doc["nightlies"]["installed"]
    # lazily: the good build and exactly the builds a step measured, each once
    assert sorted(installed) == sorted({BUILDS[0], *(BUILDS[i] for i in measured)})
    assert len(installed) == len(set(installed)) == len(measured) + 1  # each once
    assert "installing torch 2.16.0.dev20261101 with uv" in res.stderr
    if res.returncode == 0:
        assert doc["status"] == "found" and doc["first_bad"]["environment"] == BUILDS[FIRST_BAD]
        assert doc["last_good"]["environment"] == BUILDS[FIRST_BAD - 1]
        assert doc["first_bad"]["torch"] == BUILDS[FIRST_BAD] and doc["first_bad"]["git_version"] == _rev(BUILDS[4])
        assert doc["compare_url"].endswith(f"{_rev(BUILDS[3])}...{_rev(BUILDS[4])}")
        if doc["paired_runs"] == 4:  # every call clear
            assert len(installed) == 5 <= math.log2(8) + 2
    assert doc["nightlies"]["state"] == "removed" and doc["nightlies"]["left"] == []
    assert _venvs(mpsup_home) == [] and not (mpsup_home / "bisect-envs").exists()
