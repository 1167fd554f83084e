"""install-rc's progress as typed events: every event the install can send has its line (or the download bar)
in the terminal renderer, an event it does not know is refused, and a download reports its bytes."""

from __future__ import annotations

import dataclasses
import hashlib
import http.server
import inspect
import io
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from mpsup.envs import events as ev
from mpsup.envs import execute
from mpsup.envs.download import fetch_wheel
from mpsup.envs.plan import InstallPlan
from mpsup.envs.render import install_progress, step_text
from mpsup.progress import Event
from tests.test_envs_relocation import NEW, _fake_venv, _plan
from tests.test_envs_relocation import index as index  # the fixture: a local index with one torch wheel

EVENT_CLASSES = [
    cls
    for _, cls in inspect.getmembers(ev, inspect.isclass)
    if issubclass(cls, Event) and cls is not Event and cls.__module__ == ev.__name__
]

SAMPLE_FIELDS: dict[str, Any] = {
    "filename": "torch-2.16.0-cp312-none-macosx_11_0_arm64.whl",
    "done": 5,
    "total": 10,
    "base_python": Path("/u/venv/bin/python"),
    "version": "2.16.0",
    "installer": "uv",
    "cloned": 3,
    "in_place": True,
    "name": "torch-2.16.0-cp312",
    "count": 41,
    "path": Path("/data/rollback/set.txt"),
    "python": Path("/u/venv/bin/python"),
}


def sample(cls: type[Event]) -> Event:
    return cls(**{f.name: SAMPLE_FIELDS[f.name] for f in dataclasses.fields(cls)})


def test_the_events_module_defines_the_install_events() -> None:
    assert len(EVENT_CLASSES) == 9
    assert all(dataclasses.is_dataclass(cls) and cls.__dataclass_params__.frozen for cls in EVENT_CLASSES)  # type: ignore[attr-defined]


@pytest.mark.parametrize("cls", EVENT_CLASSES, ids=lambda c: c.__name__)
def test_every_event_is_rendered(cls: type[Event]) -> None:
    out = io.StringIO()
    with install_progress(Console(file=out, width=200, force_terminal=False)) as progress:
        progress(sample(cls))
    text = out.getvalue()
    if cls is ev.Downloaded:
        assert "download" in text
    else:
        assert step_text(sample(cls)) in text


def test_step_lines_say_what_happens() -> None:
    assert step_text(ev.Fetching("t.whl")) == "Fetching t.whl"
    assert step_text(ev.CreatingVenv(Path("/u/bin/python"))) == "Creating a virtual environment from /u/bin/python"
    assert step_text(ev.Installing("2.16.0", "pip")) == "Installing torch 2.16.0 with pip"
    assert (
        step_text(ev.Installing("2.16.0", "uv", cloned=3))
        == "Installing torch 2.16.0 with uv and 3 packages from your environment"
    )
    assert step_text(ev.Verifying(in_place=False)) == "Verifying the new environment"
    assert step_text(ev.Verifying(in_place=True)) == "Verifying the upgraded environment"
    assert step_text(ev.MovingIntoPlace("torch-2.16.0-cp312")) == "Moving it into place as torch-2.16.0-cp312"
    assert step_text(ev.SavedPackages(41, Path("/r/s.txt"))) == "Saved 41 packages to /r/s.txt"
    assert (
        step_text(ev.Upgrading(Path("/u/bin/python"), "2.16.0", "pip"))
        == "Upgrading /u/bin/python to torch 2.16.0 with pip"
    )
    assert step_text(ev.RestoringSaved()) == "The upgrade failed; putting the saved packages back"


def test_an_event_the_renderer_does_not_know_is_refused() -> None:
    class Unheard(Event):
        pass

    with pytest.raises(TypeError, match="Unheard"):
        step_text(Unheard())
    with install_progress(Console(file=io.StringIO())) as progress, pytest.raises(TypeError, match="Unheard"):
        progress(Unheard())


@pytest.fixture
def served_wheel(tmp_path: Path) -> Iterator[tuple[str, bytes]]:
    body = bytes(range(256)) * 9000  # over two of the download's 1 MiB chunks
    (tmp_path / "torch-2.16.0-cp312-none-any.whl").write_bytes(body)

    class Quiet(http.server.SimpleHTTPRequestHandler):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, directory=str(tmp_path), **kwargs)

        def log_message(self, *args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Quiet)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/torch-2.16.0-cp312-none-any.whl", body
    finally:
        server.shutdown()
        server.server_close()


def test_a_download_reports_its_bytes_as_events(served_wheel: tuple[str, bytes], tmp_path: Path) -> None:
    url, body = served_wheel
    seen: list[Event] = []
    fetched = fetch_wheel(
        url,
        url.rsplit("/", 1)[-1],
        hashlib.sha256(body).hexdigest(),
        tmp_path / "downloads",
        progress=seen.append,
    )
    assert fetched.path.read_bytes() == body
    assert all(isinstance(e, ev.Downloaded) and e.total == len(body) for e in seen)
    done = [e.done for e in seen if isinstance(e, ev.Downloaded)]
    assert len(done) == 3 and done == sorted(done) and done[-1] == len(body)


def test_a_side_by_side_install_reports_each_step_in_order(
    index: str, mpsup_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The venv, the installer and the check are stand-ins (tests/test_envs_relocation.py): the steps are real.
    monkeypatch.setattr(execute, "create_venv", _fake_venv)
    monkeypatch.setattr(execute, "_install", lambda *_a: None)
    monkeypatch.setattr(execute, "verify", lambda _plan, _py, _probe: {**NEW, "companions": {}})
    plan = _plan(index)
    assert isinstance(plan, InstallPlan)
    seen: list[Event] = []
    seams = execute.Seams(progress=seen.append, probe=lambda _p: NEW, free_bytes=lambda _p: 1 << 40)
    execute.install_side_by_side(plan, seams)
    assert seen == [
        ev.Fetching(plan.wheel.filename),
        ev.CreatingVenv(plan.baseline_python),
        ev.Installing(plan.to_version, plan.installer, 0),
        ev.Verifying(in_place=False),
        ev.MovingIntoPlace(plan.prefix.name),
    ]
