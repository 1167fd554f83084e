"""Bench's terminal output shows names and paths it did not write literally: never as rich markup."""

from __future__ import annotations

import dataclasses
import inspect
import typing

from rich.console import Console

from mpsup.bench import events as ev
from mpsup.bench.progress_bar import bench_progress
from mpsup.bench.screen import render_run
from mpsup.progress import Event


def _record() -> dict:
    env = {"status": "ok", "median": 1e-3, "ci_low": 9e-4, "ci_high": 1.1e-3, "samples": [1e-3] * 6, "memory": {}}
    return {
        "schema": "mpsup.run/1",
        "id": "run[/x]",
        "device": "cpu",
        "partial": True,
        "interrupted": True,
        "signal": "SIGTERM",
        "environments": [
            {"label": "baseline", "torch_version": "2.13[dev]", "device_name": "CPU [bold]x[/bold]", "threads": 2}
        ],
        "smoke": [{"feature": "fp8_cast", "envs": {"baseline": {"status": "fail", "message": "bad [/red] value"}}}],
        "workloads": [
            {
                "name": "models/[old] llama/q_proj",
                "source": "ckpt/[/x].safetensors",
                "part": "model",
                "kind": "linear",
                "status": "ok",
                "count": 1,
                "envs": {"baseline": env},
            },
            {
                "name": "layer[/]",
                "source": "s",
                "part": "model",
                "kind": "linear",
                "status": "error",
                "reason": "RuntimeError: [link=x]boom",
                "count": 1,
                "envs": {"baseline": {"status": "error"}},
            },
        ],
        "model": {
            "path": "models/[old] llama",
            "format": "safetensors",
            "linear_weight_bytes": 0,
            "fp8_weight_bytes": 0,
        },
        "hygiene": {"changed": ["on_battery changed [/]"]},
    }


def test_render_run_shows_hostile_text_literally():
    main = Console(record=True, width=300, color_system=None)
    render_run(_record(), main)  # the one-screen view: the same text, fewer places
    shown = main.export_text()
    for text in ("models/[old] llama/q_proj", "layer[/]", "[link=x]boom", "bad [/red] value", "run[/x]"):
        assert text in shown, text
    console = Console(record=True, width=300, color_system=None)
    render_run(_record(), console, details=True)  # `[/x]` once raised a MarkupError here
    out = console.export_text()
    for text in (
        "models/[old] llama/q_proj",
        "ckpt/[/x].safetensors",
        "layer[/]",
        "run[/x]",
        "2.13[dev]",
        "CPU [bold]x[/bold]",
        "bad [/red] value",
        "[link=x]boom",
        "models/[old] llama",
        "on_battery changed [/]",
    ):
        assert text in out, text
    assert "Interrupted (SIGTERM)" in out


def test_progress_shows_a_hostile_workload_name():
    console = Console(record=True, width=300, color_system=None, force_terminal=False)
    with bench_progress(console) as on_event:
        on_event(ev.BenchStarted(total=1))
        on_event(ev.WorkloadStarted("w[/x]"))
    assert "w[/x]" in console.export_text()


def test_progress_shows_an_eta_and_keeps_smoke_steps_apart():
    from mpsup.bench.progress_bar import fmt_eta

    console = Console(record=True, width=200, color_system=None, force_terminal=False)
    with bench_progress(console) as on_event:
        on_event(ev.BenchStarted(total=3, smoke=2))
        on_event(ev.SmokeStepDone("fp8_cast", "baseline", "pass"))
        on_event(ev.SmokeStepDone("fp8_cast", "candidate", "pass"))  # one step, not two
        on_event(ev.WorkloadStarted("linear/a", 125.0))
        on_event(ev.WorkloadDone("linear/a", "ok"))
    text = console.export_text()
    assert "smoke" in text and "1/2" in text
    assert "workloads" in text and "1/3" in text
    assert "ETA ~2 min" in text
    assert fmt_eta(0.2) == "~1 s" and fmt_eta(45) == "~45 s" and fmt_eta(600) == "~10 min"


def test_a_paired_run_counts_a_workload_once_both_visits_are_done():
    first_pass: list[Event] = [ev.BenchStarted(total=3, visits=2)]
    for name in ("a", "b", "c"):
        first_pass += [ev.WorkloadStarted(name, 10.0), ev.WorkloadDone(name, "ok")]
    middle = [
        *first_pass,
        ev.SecondVisitsPlanned(2),  # c failed on its first visit: no second one, done now
        ev.WorkersRestarting(5.0),
        ev.VisitStarted("a", 5.0),
        ev.SecondVisitDone("a"),
    ]
    end = [*middle, ev.VisitStarted("b", 2.0), ev.SecondVisitDone("b")]

    def shown(events: list[Event]) -> str:
        # A console that is no terminal draws the bar once, when it stops: one run per state.
        console = Console(record=True, width=200, color_system=None, force_terminal=False)
        with bench_progress(console) as on_event:
            for event in events:
                on_event(event)
        return console.export_text()

    assert "0/3" in shown(first_pass)  # before: 3/3 with half the time still to come
    assert "2/3" in shown(middle)
    assert "3/3" in shown(end)


def test_every_part_of_the_suite_has_a_title():
    from mpsup.bench.suite import build_suite
    from mpsup.bench.tables import PART_TITLES

    for device in ("mps", "cuda", "cpu"):
        parts = {w.part for w in build_suite(device, None)}
        assert parts <= PART_TITLES.keys(), parts - PART_TITLES.keys()


def _example(annotation: object) -> object:
    """A value of a field's type (the first of a union's non-None members)."""
    kinds = [a for a in typing.get_args(annotation) if a is not type(None)] or [annotation]
    return {str: "linear/a", int: 1, float: 2.0, bool: False}[kinds[0]]  # type: ignore[index]


def test_every_bench_event_has_a_rendering_and_an_unknown_one_raises():
    """Each event class of bench/events.py is drawn by the run's bar or by `--list`'s progress; both raise on
    an event they do not know."""
    from mpsup.bench.listing import census_progress

    classes = [c for _, c in inspect.getmembers(ev, inspect.isclass) if issubclass(c, Event) and c is not Event]
    assert len(classes) >= 11
    console = Console(record=True, width=200, color_system=None, force_terminal=False)

    class Unknown(Event):
        pass

    with bench_progress(console) as bar:
        bar(ev.BenchStarted(total=2, smoke=1, visits=2))
        renderers = [bar, census_progress(console)]
        for cls in [*classes, Unknown]:
            hints = typing.get_type_hints(cls)
            event = cls(**{f.name: _example(hints[f.name]) for f in dataclasses.fields(cls)})
            drawn = 0
            for render in renderers:
                try:
                    render(event)
                    drawn += 1
                except TypeError as exc:
                    assert f"no rendering for {cls.__name__}" in str(exc)
            assert drawn == (0 if cls is Unknown else 1), cls.__name__
    assert "op census of 1 phase(s) on the linear/a device" in console.export_text()


def test_a_two_argument_callback_gets_each_event_by_its_class_name_and_fields():
    """What bench.command.run does with a caller's callback: one argument gets the event, two get its name and
    fields (bisect hands bench a callback of either shape)."""
    from mpsup.bench.command import as_progress

    named: list[tuple[str, dict]] = []
    as_progress(lambda name, fields: named.append((name, fields)))(ev.WorkloadStarted("linear/a", 3.0))
    assert named == [("WorkloadStarted", {"name": "linear/a", "eta_s": 3.0})]
    typed: list[Event] = []
    as_progress(typed.append)(ev.WorkloadDone("linear/a", "ok"))
    assert typed == [ev.WorkloadDone("linear/a", "ok")]
