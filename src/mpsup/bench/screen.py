"""The finished run on screen: one section after another, by default one screen, with `--details` every table."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from rich.console import Console

from mpsup.bench.figures import model_forward_estimate, model_role_shares, run_figures
from mpsup.bench.guidance import (
    NEXT_LINES,
    figure_lines,
    paired_next,
    paired_note,
    precision_lines,
    roofline_lines,
    time_lines,
)
from mpsup.bench.phase_table import render_phases
from mpsup.bench.run_view import RunView
from mpsup.bench.screen_text import name_list, plural, print_lines, print_wrapped
from mpsup.bench.tables import is_measured, part_tables, smoke_cell, smoke_table, top_workloads
from mpsup.console import printable, safe
from mpsup.host.moved import run_conditions
from mpsup.runs.schema import Environment, RunRecord, SmokeResult, WorkloadRun, as_record
from mpsup.units import fmt_bytes, fmt_time

# The sections a finished run prints, in order. Each takes the run and the console and prints its
# part (or nothing): a new section is one function and one entry in these tuples.
Section = Callable[[RunView, Console], None]


def render_run(
    record: Mapping[str, Any], console: Console, details: bool = False, *, selected: int | None = None
) -> None:
    """The finished run. By default one screen: what ran, what did not pass, what the figures say and
    the few workloads that take the time (`bench` prints ~650 lines of tables otherwise, with the
    summary scrolled in last); `details` prints every table. `selected`: how many workloads the run set
    out to measure, which a stopped run's record cannot tell (it holds those that finished)."""
    view = RunView(as_record(record, "the run record"), record, selected)
    for section in DETAIL_SECTIONS if details else MAIN_SECTIONS:
        section(view, console)


def _header(view: RunView, console: Console) -> None:
    """Which torch ran, paired as `A -> B`: the candidate's torch is what the run is about."""
    run = view.run
    envs = run.environments
    if any(e.stack == "mlx" for e in envs):
        # An MLX environment has no torch: beside one, each side is named by its stack (`torch 2.13.0 -> MLX 0.32.4`).
        names = [f"MLX {e.extra.get('mlx_version')}" if e.stack == "mlx" else f"torch {e.torch_version}" for e in envs]
        stacks = " -> ".join(safe(n) for n in names)
    else:
        stacks = "torch " + " -> ".join(safe(e.torch_version) for e in envs)
    stacks += " (A/A)" if run.mode == "aa" else ""
    console.print(
        f"[bold]{stacks}[/] on {safe(envs[0].device_name)} ({safe(run.device)}{_threads(envs)}) · run {safe(run.id)}"
    )


def _threads(envs: Sequence[Environment]) -> str:
    """The torch workers' CPU threads as the header's tail. An MLX worker sets no torch thread count (its record
    holds none), so beside one the count is said to be torch's."""
    counts = [e.extra.get("threads") for e in envs if e.stack != "mlx"]
    if not counts or counts[0] is None:
        return ""
    if len(set(counts)) > 1:
        return f", {' -> '.join(safe(c) for c in counts)} CPU threads"
    owner = "torch on " if len(counts) < len(envs) else ""
    return f", {owner}{safe(plural(counts[0], 'CPU thread'))}"


def _what_ran(view: RunView, console: Console) -> None:
    console.print(_ran_sentence(view), highlight=False)


def _ran_sentence(view: RunView) -> str:
    """What ran and how much of it was measured. The whole-model phases are workloads like the rest (the progress
    bar and `--list` count them), said apart; a stopped run says how far it got, out of what was selected."""
    run = view.run
    labels = run.labels
    ws = run.workloads
    phases = sum(1 for w in ws if w.part == "phase")
    measured = sum(1 for w in ws if all(is_measured(w, label) for label in labels))
    how = (
        "one environment"
        if len(labels) == 1
        else f"{' and '.join(safe(label) for label in labels)} interleaved"
        + (" (the baseline against itself)" if run.mode == "aa" else "")
    )
    # A finished run ran what was selected; a stopped one, part of it.
    selected = view.selected if run.partial else None
    what = f"{len(ws)} of {plural(selected, 'workload')}" if selected else plural(len(ws), "workload")
    ops = sum(1 for w in ws if w.part == "op")
    if phases:
        parts = [plural(len(ws) - phases - ops, "layer"), plural(phases, "whole-model phase")]
        if ops:
            parts.append(f"{plural(ops, 'op')} of the phases, replayed")
        what += f" ({', '.join(parts)})"
    ran = f"{plural(len(run.smoke), 'smoke test')} and " if run.smoke else ""
    unmeasured = f", {len(ws) - measured} not (below)" if measured < len(ws) else ""
    if not run.partial:
        return f"Ran {ran}{what} in {how}: {measured} measured{unmeasured}."
    if run.interrupted:
        stopped = f"Interrupted ({safe(run.extra.get('signal', 'SIGINT'))})"
    else:
        stopped = f"Stopped early ({safe(run.failure)})" if run.failure else "Stopped early"
    return f"{stopped}: {ran}{what} ran in {how}, {measured} measured{unmeasured}; the partial record is kept."


@dataclass(frozen=True)
class _Failed:
    """Why one environment did not pass a smoke test or measure a workload."""

    status: str | None
    message: str | None
    needs_metal: bool  # the worker's `needs_metal` field: a Metal kernel asked of a device that is not MPS

    @property
    def cell(self) -> str:
        return smoke_cell(self.status, self.message)


def _failed_smoke(view: RunView) -> tuple[int, list[str], dict[str, list[str]]]:
    """How many smoke tests passed, those that need Metal off a Mac, and the rest under their reasons."""
    labels, off_mac = view.run.labels, view.run.device != "mps"
    passed = 0
    metal: list[str] = []
    groups: dict[str, list[str]] = {}  # reason -> the smoke tests it stopped
    for s in view.run.smoke:
        results = {label: s.envs.get(label) or SmokeResult() for label in labels}
        failed = {
            label: _Failed(r.status, r.message, r.extra.get("needs_metal") is True)
            for label, r in results.items()
            if r.status != "pass"
        }
        if not failed:
            passed += 1
        elif off_mac and any(f.needs_metal for f in failed.values()):
            metal.append(s.feature)
        else:
            _add_reasons(groups, f"smoke {s.feature}", failed, len(labels))
    return passed, metal, groups


def _unmeasured_lines(view: RunView) -> list[str]:
    """One line per reason a workload was not measured; the too slow ones, and off a Mac the Metal kernels
    (one workload per kernel), each in one line of their own."""
    labels, off_mac = view.run.labels, view.run.device != "mps"
    metal = 0
    groups: dict[str, list[str]] = {}  # reason -> the workloads it stopped
    slow: list[WorkloadRun] = []
    for w in view.run.workloads:
        if w.status == "too_slow":
            slow.append(w)
            continue
        unmeasured = {
            label: _Failed(
                w.status if w.status != "ok" else (env.status or "?"), w.reason, env.extra.get("needs_metal") is True
            )
            for label in labels
            for env in [w.env(label)]
            if not env.median
        }
        if not unmeasured:
            continue
        if off_mac and any(f.needs_metal for f in unmeasured.values()):
            metal += 1
        else:
            _add_reasons(groups, w.name, unmeasured, len(labels))
    lines = [f"{name_list(stopped)}: {why}" for why, stopped in groups.items()]
    if slow:
        lines.append(_too_slow_line(slow, view.run))
    if metal:
        lines.append(f"Metal kernels, {plural(metal, 'workload')}: unsupported off a Mac")
    return lines


def _not_passing(view: RunView, console: Console) -> None:
    """Smoke tests that did not pass, then workloads not measured, each under its own heading, each reason whole
    (wrapped, never cut), one line per reason. Off a Mac the Metal kernels cannot run, which says nothing about
    this torch: their smoke test is named in the smoke heading, their workloads (one per kernel) are one line."""
    smoke = view.run.smoke
    lines = _unmeasured_lines(view)
    if smoke:
        passed, metal_smoke, smoke_groups = _failed_smoke(view)
        off = f"; {name_list(metal_smoke)} cannot run off a Mac" if metal_smoke else ""
        rest = ((";" if off else ",") + " the rest:") if smoke_groups else "."
        print_wrapped(console, f"Smoke tests (device vs CPU reference): {passed} of {len(smoke)} pass{off}{rest}")
        for why, stopped in smoke_groups.items():
            print_wrapped(console, f"{name_list(stopped)}: {why}", bullet=True, style="yellow")
        if lines:
            # Without it the workloads' lines would read as more of the smoke tests that did not pass.
            console.print("Workloads not measured:", highlight=False)
    for line in lines:
        print_wrapped(console, line, bullet=True, style="yellow")


def _too_slow_line(slow: list[WorkloadRun], run: RunRecord) -> str:
    """Every workload the budget had no room for, in one line: how slow, which, and the budget that takes them."""
    if len(slow) == 1:
        return f"{slow[0].name}: {slow[0].reason or 'too slow for this budget; skipped'}"
    calls = [float(c) for w in slow if isinstance(c := w.extra.get("call_s"), (int, float))]
    span = f" ({fmt_time(min(calls))} to {fmt_time(max(calls))} a call here)" if calls else ""
    needed = [float(n) for w in slow if isinstance(n := w.extra.get("budget_needed_s"), (int, float))]
    hint = "`--only NAME` measures one"
    if needed:
        hint = f"`--budget {max(needed):g}` measures them all, {hint}"
    budget = run.options.get("budget_s")
    at = f" at --budget {budget:g}" if isinstance(budget, (int, float)) else ""
    return f"{name_list([w.name for w in slow])}: too slow to measure{at}{span}; skipped ({hint})"


def _add_reasons(groups: dict[str, list[str]], what: str, failed: Mapping[str, _Failed], envs: int) -> None:
    """`what` under its reason; paired, with the environment's label where the two differ."""
    cells = {label: f.cell for label, f in failed.items()}
    if len(set(cells.values())) == 1 and len(cells) == envs:
        groups.setdefault(next(iter(cells.values())), []).append(what)
        return
    for label, cell in cells.items():
        groups.setdefault(cell, []).append(what + (f" ({label})" if envs > 1 else ""))


def _phases(view: RunView, console: Console) -> None:
    render_phases(dict(view.doc), console)  # the model whole comes first: it is the answer; the layers explain it


def _answers(view: RunView, console: Console) -> None:
    """How far the float64 reference got (`mpsup report` gives the verdicts): what it compared, and where its
    share of the run ran out, how long the rest would take and the option that buys it."""
    docs = [
        w for w in view.doc.get("workloads") or [] if isinstance(w, Mapping) and isinstance(w.get("numerics"), Mapping)
    ]
    if not docs:
        return
    compared = [w for w in docs if w["numerics"].get("status") == "compared"]
    phases = sum(1 for w in compared if w.get("part") == "phase")
    total_phases = sum(1 for w in docs if w.get("part") == "phase")
    ops = len(compared) - phases
    summary = view.doc.get("numerics_pass")
    summary = summary if isinstance(summary, Mapping) else {}
    took = summary.get("spent_s")
    line = (
        f"Answers against float64: {phases} of {plural(total_phases, 'phase')} and {plural(ops, 'other workload')} "
        "compared" + (f" in {fmt_time(float(took))}" if isinstance(took, int | float) else "")
    )
    skipped = summary.get("skipped_for_share")
    if isinstance(skipped, int) and skipped > 0:
        more, share = summary.get("skipped_estimate_s"), summary.get("share_for_all")
        line += (
            f"; {plural(skipped, 'workload')} not, for lack of time (the reference's share: "
            f"{float(summary.get('share') or 0):.0%} of the run)"
        )
        if isinstance(more, int | float) and isinstance(share, int | float):
            line += f": about {fmt_time(float(more))} more would judge them all (--reference-share {share:g})"
    print_wrapped(console, line + "; `mpsup report` gives the verdicts.")


def _on_the_cpu(view: RunView, console: Console) -> None:
    """Layers whose build or first call ran an op on the CPU (no MPS kernel): their time is partly the CPU's.
    A whole model's phases say theirs in the phase table."""
    lines = []
    for w in view.run.workloads:
        if w.kind == "model_phase":
            continue
        for label, env in w.envs.items():
            ops = env.extra.get("fallback_ops")
            if isinstance(ops, list) and ops:
                lines.append(f"{w.name} ({label}): {', '.join(str(op) for op in ops[:8])}")
    if lines:
        console.print("Timed partly on the CPU (ops without an MPS kernel):", highlight=False)
        for line in lines:
            print_wrapped(console, printable(line), bullet=True, style="yellow")


def _model_lines(view: RunView, console: Console) -> None:
    """The model's time estimated from its layer workloads alone, with its interval and its shares by role. The
    whole-model phases are apart (their own table above): they are the model measured whole, not one more layer."""
    model = view.run.model
    if model is None:
        return
    label, doc = view.first, dict(view.doc)
    fwd = model_forward_estimate(doc, label)
    whole = [
        (w.name, w.env(label).median) for w in view.run.workloads if w.kind == "end_to_end" and w.env(label).median
    ]
    what = f"[bold]{safe(model.path)}[/] ({safe(model.format)})"
    if whole:  # a .pt2 export or a module:function: its forward is measured, eager and compiled apart
        timed = "; ".join(f"{safe(name)} {fmt_time(med)}" for name, med in whole)
        console.print(f"{what}: forward measured end to end: {timed}")
    elif fwd and fwd["estimate"]:
        span = f" (95% CI {fmt_time(fwd['low'])} - {fmt_time(fwd['high'])})" if fwd["low"] is not None else ""
        shares = ", ".join(f"{safe(k)} {v:.0%}" for k, v in model_role_shares(doc, label))
        console.print(
            f"{what}: estimated forward time {fmt_time(fwd['estimate'])}{span} from its layers, "
            f"summed over every token count measured; share by kind: {shares}"
        )
    else:
        console.print(f"{what}: no layer workload measured, so no forward time estimated from its layers")
    facts = model.extra
    if facts.get("linear_weight_bytes"):  # none where no weights were read (a config.json alone, an export)
        console.print(
            f"Linear weights: {fmt_bytes(facts['linear_weight_bytes'])} now, "
            f"{fmt_bytes(facts['fp8_weight_bytes'])} as float8_e4m3fn"
        )
    if facts.get("not_measured"):
        console.print(f"{plural(len(facts['not_measured']), 'tensor')} not measured (see the run record for why)")


def _meaning_main(view: RunView, console: Console) -> None:
    """What the figures say (roofline, where the time goes), before the workloads that take the time."""
    # Not after a stop: "no roofline probe in this selection" would be wrong where the run never reached it.
    if not view.paired and view.single_suite:
        f = run_figures(dict(view.doc))
        print_lines((roofline_lines(f) if not view.run.partial else []) + time_lines(f), console)


def _trust(view: RunView, console: Console) -> None:
    """How far the figures above can be trusted, and which are not the comparison."""
    if view.paired:
        lines = [paired_note(view.run)]
    elif view.single_suite:
        lines = precision_lines(run_figures(dict(view.doc)))
    else:
        lines = []
    print_lines(lines, console)


def _where_the_rest_is(view: RunView, console: Console) -> None:
    # A finished single run's tables cannot be shown again (report takes paired runs): say where its figures are.
    print_wrapped(console, "Every table: `mpsup bench --details`; this run's figures: the record below.")
    if view.paired and not view.run.partial:  # a stopped run suggests nothing to run
        console.print("The comparison, with plots:", highlight=False)
        print_lines([f"  mpsup report --run {safe(view.run.id)} --format html -o report.html"], console)


def _next_lines(view: RunView) -> list[str]:
    """What to run next; nothing after a stopped run, whose first line already says what it holds: its figures
    are not the ones an upgrade should be judged by."""
    if view.run.partial:
        return []
    if view.paired:
        return paired_next(view.run)
    if view.single_suite:
        return NEXT_LINES
    return []


def _next(view: RunView, console: Console) -> None:
    print_lines(_next_lines(view), console)


def _closing_details(view: RunView, console: Console) -> None:
    if view.paired:
        lines = [paired_note(view.run)]
    elif view.single_suite:
        lines = figure_lines(dict(view.doc))
    else:
        lines = []
    print_lines(lines + _next_lines(view), console)


def _stopped(view: RunView, console: Console) -> None:
    """`--details` has no summary line at the top: a stopped run says there, at the end, how far it got."""
    if view.run.partial:
        console.print(f"[yellow]{_ran_sentence(view)}[/]", highlight=False)


def _conditions(view: RunView, console: Console) -> None:
    """The machine moved (host/moved.py's line), else what changed between the run's start and end."""
    cond = run_conditions(view.run)
    if cond.line:
        console.print(f"[yellow]The machine moved: {safe(cond.line)}[/]")
        return
    for change in view.run.hygiene.changed:
        console.print(f"[yellow]Conditions changed during the run: {safe(change)}[/]")


# The readers a device's run reads its own state with (host/machine_state.py): one of them absent is said on the
# main screen; others (a VM's missing cpufreq) only with --details.
DEVICE_READERS = ("GPU state (NVML)", "thermal pressure", "thermal state, Low Power Mode", "machine state")


def not_read_lines(run: RunRecord, *, every: bool = False) -> list[str]:
    """What was asked for or is the device's own and could not be read: the energy meter of `--energy`, the GPU's
    or the Mac's state readers (`every`: each reader not known here)."""
    lines = []
    meter = run.extra.get("energy_meter")
    if isinstance(meter, dict) and meter.get("name") is None and run.options.get("energy"):
        why = meter.get("why") or "not known why"
        lines.append(f"Energy not measured: no meter for --device {run.device} here ({why})")
    state = run.extra.get("machine_state")
    absent = state.get("absent") if isinstance(state, dict) else None
    if isinstance(absent, dict):
        shown = {k: v for k, v in absent.items() if every or k in DEVICE_READERS}
        if shown:
            lines.append("Not read during the run: " + "; ".join(f"{k}: {v}" for k, v in shown.items()))
    return lines


def _not_read(view: RunView, console: Console) -> None:
    for line in not_read_lines(view.run):
        console.print(f"[yellow]{safe(line)}[/]", highlight=False)


def _not_read_details(view: RunView, console: Console) -> None:
    for line in not_read_lines(view.run, every=True):
        console.print(f"[yellow]{safe(line)}[/]", highlight=False)


MAIN_SECTIONS: tuple[Section, ...] = (
    _header,
    _what_ran,
    _not_passing,
    _on_the_cpu,
    _phases,
    _answers,
    _model_lines,
    _meaning_main,
    top_workloads,
    _trust,
    _where_the_rest_is,
    _next,
    _conditions,
    _not_read,
)

DETAIL_SECTIONS: tuple[Section, ...] = (
    _header,
    smoke_table,
    _phases,
    _answers,
    part_tables,
    _on_the_cpu,
    _closing_details,
    _model_lines,
    _stopped,
    _conditions,
    _not_read_details,
)
