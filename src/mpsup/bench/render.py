"""Bench output: progress on stderr, tables per part, and the JSON summary."""

from __future__ import annotations

import re
import textwrap
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from rich import box
from rich.cells import cell_len
from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table
from rich.text import Text

from mpsup.bench.figures import RunFigures, model_forward_estimate, model_role_shares, run_figures
from mpsup.bench.phase_table import render_phases, status_text
from mpsup.console import COMMAND_PREFIX, NARROW, emit_json, error_line, printable, safe
from mpsup.model.coverage import census, phase_figures
from mpsup.model.phases import phase_shape
from mpsup.stats import geometric_mean
from mpsup.units import fmt_bytes, fmt_rate, fmt_span, fmt_time

if TYPE_CHECKING:
    from collections.abc import Mapping

    from mpsup.bench.command import BenchPlan, BenchResult, PhaseCensus

PART_TITLES = {
    "linear": "BF16 linear layers of real models",
    "moe": "MoE grouped matmul vs per-expert loop",
    "fp8": "FP8",
    "pad": "Constant padding (Wan2.2 VAE decoder)",
    "int8": "INT8 matmul (torch._int_mm)",
    "conv3d": "3D convolutions (Wan2.2 VAE)",
    "roofline": "Roofline probes",
    "model": "Your model's workloads",
}


def is_narrow(console: Console) -> bool:
    return console.width < NARROW


def plural(n: int, noun: str) -> str:
    """`1 workload`, `2 workloads`: a count and its noun, agreeing."""
    return f"{n} {noun}{'' if n == 1 else 's'}"


def compact_shape(kind: str, params: dict[str, Any]) -> str:
    """A workload's size in a few characters: a linear layer as `tokens x in->out`, a tensor as `AxBxC`."""
    p = params
    if kind == "model_phase":
        return phase_shape(p)
    if {"tokens", "in_features", "out_features"} <= p.keys():
        text = f"{p['tokens']}x{p['in_features']}->{p['out_features']}"
        if "experts" in p:
            text += f" {p['experts']}e top{p.get('top_k', '?')}"
        return text
    if {"tokens", "num_embeddings", "embedding_dim"} <= p.keys():
        return f"{p['tokens']} of {p['num_embeddings']}x{p['embedding_dim']}"
    if "shape" in p:
        return "x".join(str(d) for d in p["shape"]) + (
            f" pad {','.join(str(x) for x in p['pad'])}" if "pad" in p else ""
        )
    if "input_shape" in p and "weight_shape" in p:
        return "x".join(map(str, p["input_shape"])) + " * " + "x".join(map(str, p["weight_shape"]))
    if "bytes" in p:
        return fmt_bytes(p["bytes"])
    if "numel" in p:
        return f"{p['numel']} el" + (f" {p['direction']}" if "direction" in p else "")
    if "n" in p:
        return f"{p['n']}x{p['n']}"
    if "grid" in p:
        return f"grid {p['grid']}"
    return ", ".join(f"{k}={v}" for k, v in p.items() if k not in ("kernel", "method") and not isinstance(v, dict))


def print_workload_list(workloads: list[Any], console: Console) -> None:
    """`bench --list`: one line per workload; names are never cut (they are what --only takes)."""
    rows = [[w.name, w.dtype, compact_shape(w.kind, w.params), str(w.count), ",".join(w.tags)] for w in workloads]
    # Narrow, the count and tags stay wherever they fit: a model's list is short-named, and its counts and
    # roles are what it is for (docs/models.md). They fit if every other column fits whole and leaves the
    # shape room for every layer's shape: a phase's shape is a phrase and may fold.
    layer_shapes = [r[2] for r, w in zip(rows, workloads, strict=True) if w.kind != "model_phase"]
    narrow = is_narrow(console)
    head = ["name", "dtype", "shape", "count", "tags"]
    tagged = not narrow or _columns_fit([head, *rows], console.width, fold=2, floor=_widest(["shape", *layer_shapes]))
    t = Table(
        title=plural(len(workloads), "workload"), title_justify="left", box=None, pad_edge=False, header_style="bold"
    )
    t.add_column(head[0], no_wrap=True, min_width=max((len(w.name) for w in workloads), default=4))
    t.add_column(head[1], no_wrap=True)
    t.add_column(head[2], no_wrap=not narrow, overflow="fold")
    if tagged:
        t.add_column(head[3], justify="right", no_wrap=narrow)
        t.add_column(head[4], no_wrap=narrow)
    if not narrow:
        t.add_column("source", overflow="fold")
    for w, row in zip(workloads, rows, strict=True):
        cells = row if tagged else row[:3]
        t.add_row(*(safe(c) for c in [*cells, *([] if narrow else [w.source])]))
    console.print(t)
    if narrow:
        what = "Sources" if tagged else "Tags and sources"
        console.print(f"{what}: run with COLUMNS={NARROW} or more, or --list --json.", highlight=False)


def _widest(cells: list[str]) -> int:
    return max((cell_len(printable(c)) for c in cells), default=0)


def _columns_fit(rows: list[list[str]], width: int, fold: int, floor: int) -> bool:
    """Whether a table of `rows` (its header among them; no box, one space of padding a side between columns)
    fits `width` with every column whole but column `fold`, which is given what is left and needs `floor`."""
    widths = [_widest(list(column)) for column in zip(*rows, strict=True)]
    return sum(widths) - widths[fold] + floor + 2 * (len(widths) - 1) <= width


@contextmanager
def bench_progress(console: Console) -> Iterator[Any]:
    """Smoke steps and workloads as two bars: the workload bar's total is what `--list` shows for the
    same options. The ETA covers every pass still planned (the runner's events carry it)."""
    progress = Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        TextColumn("{task.fields[count]}"),
        TimeElapsedColumn(),
        TextColumn("{task.fields[eta]}"),
        TextColumn("{task.fields[current]}"),
        console=console,
        transient=False,
    )
    tasks: dict[str, Any] = {}
    # The bar moves per visit (a paired workload gets two, in two pairs of processes); the count shows
    # workloads whose visits are all done, out of what --list shows.
    state: dict[str, Any] = {"visits": 1, "total": 0, "visits_done": 0, "first_done": 0, "workloads_done": 0}

    def count() -> str:
        return f"{state['workloads_done']}/{state['total']}"

    def visit_done(task: Any, visits: int = 1, workloads: int = 0) -> None:
        state["visits_done"] += visits
        state["workloads_done"] += workloads
        # Never quite full while running: a full bar stops rich's clock, and leftover visits may follow.
        done = min(state["visits_done"] / state["visits"], state["total"] - 1e-3)
        progress.update(task, completed=done, count=count())

    def on_event(event: str, info: dict[str, Any]) -> None:
        if event == "start":
            # Shown only once measuring starts: an error before then stays one line, not a line and an empty bar.
            progress.start()
            state.update(visits=max(1, int(info.get("visits") or 1)), total=int(info["total"]))
            if info.get("smoke"):
                n = info["smoke"]
                tasks["smoke"] = progress.add_task("smoke", total=n, current="", eta="", count=f"0/{n}")
            tasks["bench"] = progress.add_task("workloads", total=info["total"], current="", eta="", count=count())
            return
        if event == "smoke":
            if "smoke" in tasks and info.get("env") in (None, "baseline"):
                progress.advance(tasks["smoke"])
                task = progress.tasks[tasks["smoke"]]
                progress.update(
                    tasks["smoke"], current=safe(info.get("feature", "")), count=f"{task.completed:g}/{task.total:g}"
                )
            return
        task = tasks.get("bench")
        if task is None:
            return
        extra: dict[str, Any] = {"eta": f"ETA {fmt_eta(info['eta_s'])}"} if info.get("eta_s") is not None else {}
        if event == "workload":
            state["name"] = safe(info["name"])
            progress.update(task, current=state["name"], **extra)
        elif event == "sample":
            # Inside one slow workload: which side, how many samples so far and what one request took.
            what = "warmup" if info.get("warmup") else "samples"
            current = f"{state.get('name', '')}: {safe(info.get('env', ''))} {what} {info.get('samples', 0)}"
            progress.update(task, current=f"{current} ({fmt_time(float(info.get('took_s', 0.0)))} a request)")
        elif event == "done":
            state["first_done"] += 1
            visit_done(task, workloads=1 if state["visits"] == 1 else 0)
        elif event == "visited":
            visit_done(task, workloads=1)
        elif event == "second-visits":
            if state["visits"] > 1:
                # Workloads that failed on their first visit get no second one: they are done now.
                skipped = max(0, state["first_done"] - int(info["count"]))
                visit_done(task, skipped, skipped)
        elif event == "more":
            state["total"] = int(info.get("total") or state["total"])
            progress.update(task, total=state["total"], count=count())
        elif event == "restart":
            progress.update(task, current="more time for the widest intervals: new workers", **extra)
        elif event == "extend":
            state["name"] = safe(info["name"])  # a later visit's slow samples are this workload's
            progress.update(task, current="more time: " + state["name"], **extra)

    try:
        yield on_event
    finally:
        if "bench" in tasks and state["total"] and state["workloads_done"] >= state["total"]:
            # The last frame stays on screen: no time left to estimate, nothing current.
            progress.update(tasks["bench"], completed=state["total"], eta="", current="done")
        progress.stop()


def fmt_eta(seconds: float) -> str:
    """`~45 s`, `~3 min`: an estimate, shown as one."""
    s = max(0.0, float(seconds))
    if s < 90:
        return f"~{max(1, round(s))} s"
    return f"~{round(s / 60)} min"


def _rate(env: dict[str, Any]) -> str:
    med = env.get("median")
    if not med:
        return "-"
    flops, moved = env.get("flops_per_call"), env.get("bytes_per_call")
    parts = []
    if flops:
        parts.append(fmt_rate(flops / med, "FLOP/s"))
    if moved:
        parts.append(fmt_rate(moved / med, "B/s"))
    return ", ".join(parts) or "-"


def _memory(env: dict[str, Any]) -> str:
    # The workload's own peak or nothing: peak_rss is the worker process's high-water mark and
    # driver_allocated one reading at teardown, so neither says what this workload took.
    m = env.get("memory") or {}
    return fmt_bytes(m.get("peak_allocated") or m.get("workload_peak"))


# The sections a finished run prints, in order. Each takes the record and the console and prints its
# part (or nothing): a new section is one function and one entry in these tuples.
Section = Callable[[dict[str, Any], Console], None]

TOP_WORKLOADS = 5  # the main view's workloads: those that take the most time


def render_run(record: dict[str, Any], console: Console, details: bool = False, *, selected: int | None = None) -> None:
    """The finished run. By default one screen: what ran, what did not pass, what the figures say and
    the few workloads that take the time (`bench` prints ~650 lines of tables otherwise, with the
    summary scrolled in last); `details` prints every table. `selected`: how many workloads the run set
    out to measure, which a stopped run's record cannot tell (it holds those that finished)."""
    view = record if selected is None else {**record, "selected": selected}
    for section in DETAIL_SECTIONS if details else MAIN_SECTIONS:
        section(view, console)


def _header(record: dict[str, Any], console: Console) -> None:
    """Which torch ran, paired as `A -> B`: the candidate's torch is what the run is about."""
    envs = record["environments"]
    # An MLX environment has no torch: it is named by its stack (`torch 2.13.0 -> MLX 0.32.4`).
    sides = [f"MLX {e.get('mlx_version')}" if e.get("stack") == "mlx" else e.get("torch_version") for e in envs]
    torch = " -> ".join(safe(v) for v in sides) + (" (A/A)" if record.get("mode") == "aa" else "")
    counts = [e.get("threads") for e in envs]
    threads = (
        ""
        if counts[0] is None
        else f", {safe(plural(counts[0], 'CPU thread'))}"
        if len(set(counts)) == 1
        else f", {' -> '.join(safe(c) for c in counts)} CPU threads"
    )
    console.print(
        f"[bold]torch {torch}[/] on {safe(envs[0].get('device_name'))} "
        f"({safe(record['device'])}{threads}) · run {safe(record['id'])}"
    )


def _what_ran(record: dict[str, Any], console: Console) -> None:
    console.print(_ran_sentence(record), highlight=False)


def _ran_sentence(record: dict[str, Any]) -> str:
    """What ran and how much of it was measured. The whole-model phases are workloads like the rest (the progress
    bar and `--list` count them), said apart; a stopped run says how far it got, out of what was selected."""
    envs = record["environments"]
    ws = record["workloads"]
    phases = sum(1 for w in ws if w.get("part") == "phase")
    measured = sum(1 for w in ws if all(_measured(w, e["label"]) for e in envs))
    smoke = record.get("smoke") or []
    how = (
        "one environment"
        if len(envs) == 1
        else f"{' and '.join(safe(e['label']) for e in envs)} interleaved"
        + (" (the baseline against itself)" if record.get("mode") == "aa" else "")
    )
    # A finished run ran what was selected; a stopped one, part of it.
    selected = record.get("selected") if record.get("partial") else None
    what = f"{len(ws)} of {plural(selected, 'workload')}" if selected else plural(len(ws), "workload")
    ops = sum(1 for w in ws if w.get("part") == "op")
    if phases:
        parts = [plural(len(ws) - phases - ops, "layer"), plural(phases, "whole-model phase")]
        if ops:
            parts.append(f"{plural(ops, 'op')} of the phases, replayed")
        what += f" ({', '.join(parts)})"
    ran = f"{plural(len(smoke), 'smoke test')} and " if smoke else ""
    unmeasured = f", {len(ws) - measured} not (below)" if measured < len(ws) else ""
    if not record.get("partial"):
        return f"Ran {ran}{what} in {how}: {measured} measured{unmeasured}."
    if record.get("interrupted"):
        stopped = f"Interrupted ({safe(record.get('signal', 'SIGINT'))})"
    else:
        stopped = f"Stopped early ({safe(record['failure'])})" if record.get("failure") else "Stopped early"
    return f"{stopped}: {ran}{what} ran in {how}, {measured} measured{unmeasured}; the partial record is kept."


def _measured(w: dict[str, Any], label: str) -> bool:
    return bool(w["envs"].get(label, {}).get("median"))


def _smoke_table(record: dict[str, Any], console: Console) -> None:
    envs = record["environments"]
    if not record.get("smoke"):
        return
    t = Table(title="Smoke tests (device vs CPU reference)", title_justify="left")
    t.add_column("feature")
    for e in envs:
        t.add_column(safe(e["label"]))
    for s in record["smoke"]:
        cells = []
        for e in envs:
            r = s["envs"].get(e["label"], {})
            style = {"pass": "green", "fail": "red", "crash": "red", "unsupported": "yellow", "fallback": "yellow"}.get(
                r.get("status"), ""
            )
            msg = safe(smoke_cell(r))
            cells.append(f"[{style}]{msg}[/]" if style else msg)
        t.add_row(safe(s["feature"]), *cells)
    console.print(t)


def _not_passing(record: dict[str, Any], console: Console) -> None:
    """Smoke tests that did not pass, then workloads not measured, each under its own heading, each reason whole
    (wrapped, never cut), one line per reason. Off a Mac the Metal kernels cannot run, which says nothing about
    this torch: their smoke test is named in the smoke heading, their workloads (one per kernel) are one line."""
    envs = record["environments"]
    smoke = record.get("smoke") or []
    off_mac = record.get("device") != "mps"
    metal_smoke: list[str] = []
    metal = 0
    smoke_groups: dict[str, list[str]] = {}  # reason -> the smoke tests it stopped
    groups: dict[str, list[str]] = {}  # reason -> the workloads it stopped
    passed = 0
    for s in smoke:
        results = {e["label"]: s["envs"].get(e["label"], {}) for e in envs}
        failed = {label: r for label, r in results.items() if r.get("status") != "pass"}
        if not failed:
            passed += 1
        elif off_mac and any(_needs_metal(r) for r in failed.values()):
            metal_smoke.append(s["feature"])
        else:
            _add_reasons(smoke_groups, f"smoke {s['feature']}", failed, len(envs))
    slow: list[dict[str, Any]] = []
    for w in record["workloads"]:
        if w["status"] == "too_slow":
            slow.append(w)
            continue
        unmeasured = {
            e["label"]: {
                "status": w["status"] if w["status"] != "ok" else env.get("status", "?"),
                "message": w.get("reason"),
            }
            for e in envs
            for env in [w["envs"].get(e["label"], {})]
            if not env.get("median")
        }
        if not unmeasured:
            continue
        if off_mac and any(_needs_metal(r) for r in unmeasured.values()):
            metal += 1
        else:
            _add_reasons(groups, w["name"], unmeasured, len(envs))
    lines = [f"{_names(stopped)}: {why}" for why, stopped in groups.items()]
    if slow:
        lines.append(_too_slow_line(slow, record))
    if metal:
        lines.append(f"Metal kernels, {plural(metal, 'workload')}: unsupported off a Mac")
    if smoke:
        off = f"; {_names(metal_smoke)} cannot run off a Mac" if metal_smoke else ""
        rest = ((";" if off else ",") + " the rest:") if smoke_groups else "."
        _print_wrapped(console, f"Smoke tests (device vs CPU reference): {passed} of {len(smoke)} pass{off}{rest}")
        for why, stopped in smoke_groups.items():
            _print_wrapped(console, f"{_names(stopped)}: {why}", bullet=True, style="yellow")
        if lines:
            # Without it the workloads' lines would read as more of the smoke tests that did not pass.
            console.print("Workloads not measured:", highlight=False)
    for line in lines:
        _print_wrapped(console, line, bullet=True, style="yellow")


# A `...` span is a name, an option or a command to copy: wrapping keeps it on one line, in one piece.
_SPAN = re.compile(r"`[^`\n]*`")
_HELD = "\x00"  # stands for a space inside a span while wrapping; printable() leaves none in the text


def _print_wrapped(console: Console, text: str, *, bullet: bool = False, style: str = "") -> None:
    """Plain text (no markup; names pass through printable here), wrapped at the console's width with a hanging
    indent, at spaces alone: never cut mid-word, nor inside a `...` span (rich's wrapping would cut both, and its
    grid pads every line to the full width). Printed as soft-wrapped lines: no newline beyond the wrap's own."""
    held = _SPAN.sub(lambda m: m.group().replace(" ", _HELD), printable(text))
    first, rest = ("- ", "  ") if bullet else ("", "")
    wrapped = textwrap.fill(
        held,
        width=max(20, console.width),
        initial_indent=first,
        subsequent_indent=rest,
        break_on_hyphens=False,
        break_long_words=False,
    )
    console.print(Text(wrapped.replace(_HELD, " "), style=style), soft_wrap=True)


def _too_slow_line(slow: list[dict[str, Any]], record: dict[str, Any]) -> str:
    """Every workload the budget had no room for, in one line: how slow, which, and the budget that takes them."""
    if len(slow) == 1:
        return f"{slow[0]['name']}: {slow[0].get('reason') or 'too slow for this budget; skipped'}"
    calls = [float(w["call_s"]) for w in slow if isinstance(w.get("call_s"), (int, float))]
    span = f" ({fmt_time(min(calls))} to {fmt_time(max(calls))} a call here)" if calls else ""
    needed = [float(w["budget_needed_s"]) for w in slow if isinstance(w.get("budget_needed_s"), (int, float))]
    hint = "`--only NAME` measures one"
    if needed:
        hint = f"`--budget {max(needed):g}` measures them all, {hint}"
    budget = (record.get("options") or {}).get("budget_s")
    at = f" at --budget {budget:g}" if isinstance(budget, (int, float)) else ""
    return f"{_names([w['name'] for w in slow])}: too slow to measure{at}{span}; skipped ({hint})"


def _add_reasons(groups: dict[str, list[str]], what: str, failed: dict[str, dict[str, Any]], envs: int) -> None:
    """`what` under its reason; paired, with the environment's label where the two differ."""
    cells = {label: smoke_cell(r) for label, r in failed.items()}
    if len(set(cells.values())) == 1 and len(cells) == envs:
        groups.setdefault(next(iter(cells.values())), []).append(what)
        return
    for label, cell in cells.items():
        groups.setdefault(cell, []).append(what + (f" ({label})" if envs > 1 else ""))


def _needs_metal(result: dict[str, Any]) -> bool:
    return "Metal kernels need the mps device" in str(result.get("message") or "")


def _names(names: list[str]) -> str:
    """`linear/a, linear/b`, or `moe/* (12)` when many share a first path segment: a reason's line stays short."""
    if len(names) <= 3:
        return ", ".join(names)
    heads = {n.split("/", 1)[0] for n in names}
    return (
        f"{next(iter(heads))}/* ({len(names)})"
        if len(heads) == 1
        else f"{', '.join(names[:2])} and {len(names) - 2} more"
    )


def _part_tables(record: dict[str, Any], console: Console) -> None:
    envs = record["environments"]
    parts: dict[str, list[dict[str, Any]]] = {}
    for w in record["workloads"]:
        parts.setdefault(w.get("part", "other"), []).append(w)
    for part, ws in parts.items():
        if part != "phase":  # shown whole by render_phases
            console.print(_part_table(part, ws, envs, is_narrow(console)))
    linear = [
        w["envs"][envs[0]["label"]]["median"]
        for w in record["workloads"]
        if w.get("part") == "linear" and w["envs"].get(envs[0]["label"], {}).get("median")
    ]
    if linear:
        whose = f" ({safe(envs[0]['label'])})" if len(envs) > 1 else ""
        console.print(
            f"Suite geometric mean time over {len(linear)} linear shapes{whose}: {fmt_time(geometric_mean(linear))}"
        )


def _top_workloads(record: dict[str, Any], console: Console) -> None:
    """The few workloads that take the most time (count x median): where a change would show most."""
    envs = record["environments"]
    label = envs[0]["label"]
    timed = [
        (w, w.get("count", 1) * w["envs"][label]["median"])
        for w in record["workloads"]
        # A phase holds its layers, and an op replayed from a phase is a piece of one: `mpsup report` ranks those.
        if w.get("part") not in ("phase", "op") and _measured(w, label)
    ]
    total = sum(t for _, t in timed)
    if not timed or not total:
        return
    top = sorted(timed, key=lambda wt: -wt[1])[:TOP_WORKLOADS]
    headers = [
        "workload",
        *([safe(e["label"]) for e in envs] if len(envs) > 1 else ["median"]),
        "+-95%",
        "rate",
        "share",
    ]
    rows = [
        [
            safe(w["name"]),
            *[fmt_time(w["envs"].get(e["label"], {}).get("median")) for e in envs],
            _half_width(w["envs"][label]),
            _rate_narrow(w["envs"][label]),
            f"{spent / total:.0%}",
        ]
        for w, spent in top
    ]
    # Names are what --only takes and are never cut: where the row is too wide, the rate goes, then the interval.
    for drop in ("rate", "+-95%"):
        widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(headers)]
        if sum(widths) + 2 * (len(widths) - 1) <= console.width:
            break
        i = headers.index(drop)
        headers.pop(i)
        for r in rows:
            r.pop(i)
    # A model's phases are workloads too, but not among these: say which kind these are.
    kind = "layer workload" if any(w.get("part") == "phase" for w in record["workloads"]) else "workload"
    # A line of its own, not the table's title: rich wraps a title at the table's width, however wide the console.
    console.print(
        f"The one measured {kind}"
        if len(timed) == 1
        else f"The {len(top)} of {len(timed)} measured {kind}s that take the most time",
        highlight=False,
    )
    t = Table(box=None, pad_edge=False, header_style="bold")
    for i, h in enumerate(headers):
        t.add_column(h, justify="left" if i == 0 else "right", no_wrap=True)
    for r in rows:
        t.add_row(*r)
    console.print(t)


def _half_width(env: dict[str, Any]) -> str:
    med, low, high = env.get("median"), env.get("ci_low"), env.get("ci_high")
    if not med or low is None or high is None:
        return "n/a"
    return f"{max(med - low, high - med) / med:.1%}"


def _where_the_rest_is(record: dict[str, Any], console: Console) -> None:
    # A finished single run's tables cannot be shown again (report takes paired runs): say where its figures are.
    _print_wrapped(console, "Every table: `mpsup bench --details`; this run's figures: the record below.")
    if len(record["environments"]) > 1 and not record.get("partial"):  # a stopped run suggests nothing to run
        console.print("The comparison, with plots:", highlight=False)
        print_lines([f"  mpsup report --run {safe(record['id'])} --format html -o report.html"], console)


def print_lines(lines: list[str], console: Console) -> None:
    """Lines of rich markup. A command to copy (a line that is an indented `mpsup ...`) is printed whole on its
    line, however narrow the terminal: wrapped by rich it would paste as two commands; a terminal only folds it
    on screen."""
    for line in lines:
        console.print(line, highlight=False, soft_wrap=line.startswith(COMMAND_PREFIX))


def _meaning_main(record: dict[str, Any], console: Console) -> None:
    """What the figures say (roofline, where the time goes), before the workloads that take the time."""
    # Not after a stop: "no roofline probe in this selection" would be wrong where the run never reached it.
    if len(record["environments"]) == 1 and record.get("mode") == "single" and not record.get("model"):
        f = run_figures(record)
        print_lines((roofline_lines(f) if not record.get("partial") else []) + time_lines(f), console)


def _trust(record: dict[str, Any], console: Console) -> None:
    """How far the figures above can be trusted, and which are not the comparison."""
    if len(record["environments"]) > 1:
        lines = [paired_note(record)]
    elif record.get("mode") == "single" and not record.get("model"):
        lines = precision_lines(run_figures(record))
    else:
        lines = []
    print_lines(lines, console)


def _next_lines(record: dict[str, Any]) -> list[str]:
    """What to run next; nothing after a stopped run, whose first line already says what it holds: its figures
    are not the ones an upgrade should be judged by."""
    if record.get("partial"):
        return []
    if len(record["environments"]) > 1:
        return paired_next(record)
    if record.get("mode") == "single" and not record.get("model"):
        return NEXT_LINES
    return []


def _next(record: dict[str, Any], console: Console) -> None:
    print_lines(_next_lines(record), console)


def _closing_details(record: dict[str, Any], console: Console) -> None:
    if len(record["environments"]) > 1:
        lines = [paired_note(record)]
    elif record.get("mode") == "single" and not record.get("model"):
        lines = figure_lines(record)
    else:
        lines = []
    print_lines(lines + _next_lines(record), console)


def _model_lines(record: dict[str, Any], console: Console) -> None:
    """The model's time estimated from its layer workloads alone, with its interval and its shares by role. The
    whole-model phases are apart (their own table above): they are the model measured whole, not one more layer."""
    model = record.get("model")
    if not model:
        return
    label = record["environments"][0]["label"]
    fwd = model_forward_estimate(record, label)
    whole = [
        (w["name"], w["envs"].get(label, {}).get("median"))
        for w in record["workloads"]
        if w.get("kind") == "end_to_end" and w["envs"].get(label, {}).get("median")
    ]
    if whole:  # a .pt2 export or a module:function: its forward is measured, eager and compiled apart
        timed = "; ".join(f"{safe(name)} {fmt_time(med)}" for name, med in whole)
        console.print(f"[bold]{safe(model['path'])}[/] ({safe(model['format'])}): forward measured end to end: {timed}")
    elif fwd and fwd["estimate"]:
        span = f" (95% CI {fmt_time(fwd['low'])} - {fmt_time(fwd['high'])})" if fwd["low"] is not None else ""
        shares = ", ".join(f"{safe(k)} {v:.0%}" for k, v in model_role_shares(record, label))
        console.print(
            f"[bold]{safe(model['path'])}[/] ({safe(model['format'])}): estimated forward time "
            f"{fmt_time(fwd['estimate'])}{span} from its layers, "
            f"summed over every token count measured; share by kind: {shares}"
        )
    else:
        console.print(
            f"[bold]{safe(model['path'])}[/] ({safe(model['format'])}): no layer workload measured, "
            "so no forward time estimated from its layers"
        )
    if model.get("linear_weight_bytes"):  # none where no weights were read (a config.json alone, an export)
        console.print(
            f"Linear weights: {fmt_bytes(model['linear_weight_bytes'])} now, "
            f"{fmt_bytes(model['fp8_weight_bytes'])} as float8_e4m3fn"
        )
    if model.get("not_measured"):
        console.print(f"{plural(len(model['not_measured']), 'tensor')} not measured (see the run record for why)")


def _stopped(record: dict[str, Any], console: Console) -> None:
    """`--details` has no summary line at the top: a stopped run says there, at the end, how far it got."""
    if record.get("partial"):
        console.print(f"[yellow]{_ran_sentence(record)}[/]", highlight=False)


def _conditions(record: dict[str, Any], console: Console) -> None:
    for change in record.get("hygiene", {}).get("changed", []):
        console.print(f"[yellow]Conditions changed during the run: {safe(change)}[/]")


def _phases(record: dict[str, Any], console: Console) -> None:
    render_phases(record, console)  # the model whole comes first: it is the answer; the layers explain it


def _on_the_cpu(record: dict[str, Any], console: Console) -> None:
    """Layers whose build or first call ran an op on the CPU (no MPS kernel): their time is partly the CPU's.
    A whole model's phases say theirs in the phase table."""
    lines = []
    for w in record["workloads"]:
        if w.get("kind") == "model_phase":
            continue
        for label, env in w.get("envs", {}).items():
            ops = env.get("fallback_ops")
            if isinstance(ops, list) and ops:
                lines.append(f"{w['name']} ({label}): {', '.join(str(op) for op in ops[:8])}")
    if lines:
        console.print("Timed partly on the CPU (ops without an MPS kernel):", highlight=False)
        for line in lines:
            _print_wrapped(console, printable(line), bullet=True, style="yellow")


MAIN_SECTIONS: tuple[Section, ...] = (
    _header,
    _what_ran,
    _not_passing,
    _on_the_cpu,
    _phases,
    _model_lines,
    _meaning_main,
    _top_workloads,
    _trust,
    _where_the_rest_is,
    _next,
    _conditions,
)
DETAIL_SECTIONS: tuple[Section, ...] = (
    _header,
    _smoke_table,
    _phases,
    _part_tables,
    _on_the_cpu,
    _closing_details,
    _model_lines,
    _stopped,
    _conditions,
)


def smoke_cell(result: dict[str, Any]) -> str:
    """`unsupported: Metal kernels need...`, not `unsupported: Unsupported: Metal kernels need...`."""
    status = str(result.get("status", "?"))
    return status if status == "pass" else status_text(status, result.get("message"))


def _rate_narrow(env: dict[str, Any]) -> str:
    # One figure fits: the one that bounds this workload (bytes for low arithmetic intensity, FLOP otherwise).
    med, flops, moved = env.get("median"), env.get("flops_per_call"), env.get("bytes_per_call")
    if not med or not (flops or moved):
        return "-"
    if flops and (not moved or flops / moved > 50):
        return fmt_rate(flops / med, "FLOP/s")
    return fmt_rate(moved / med, "B/s")


def _part_table(part: str, ws: list[dict[str, Any]], envs: list[dict[str, Any]], narrow: bool) -> Table:
    t = Table(
        title=PART_TITLES.get(part, safe(part)),
        title_justify="left",
        box=None if narrow else box.HEAVY_HEAD,
        pad_edge=not narrow,
        header_style="bold",
    )
    # The name is what --only takes: never cut (rich shrinks even no_wrap columns unless given a floor).
    t.add_column("workload", no_wrap=True, min_width=max((len(w["name"]) for w in ws), default=8))
    if not narrow:
        t.add_column("source", overflow="fold", max_width=28)
    for e in envs:
        t.add_column(safe(e["label"]) if narrow else f"{safe(e['label'])} median", justify="right", no_wrap=True)
    # Paired, the interval is the first environment's median's alone: the comparison's own interval is
    # over the rounds' ratios, which only the report shows. Narrow, on two lines: no wider than its cells.
    sep = "\n" if narrow else " "
    ci = f"95% CI{sep}({safe(envs[0]['label'])})" if len(envs) > 1 else "95% CI"
    t.add_column(ci, justify="right", no_wrap=narrow)
    t.add_column("achieved", justify="right", no_wrap=narrow)
    if not narrow:
        t.add_column("peak mem", justify="right")
    skipped: dict[str, list[str]] = {}
    for w in ws:
        first = w["envs"].get(envs[0]["label"], {})
        source = [] if narrow else [safe(w.get("source", ""))]
        if w["status"] not in ("ok",) and not first.get("median"):
            if narrow:
                skipped.setdefault(smoke_cell({"status": w["status"], "message": w.get("reason")}), []).append(
                    w["name"]
                )
                continue
            t.add_row(
                safe(w["name"]),
                *source,
                *[f"[yellow]{safe(w['status'])}[/]"] + [""] * (len(envs) - 1),
                safe(smoke_cell({"status": w["status"], "message": w.get("reason")})),
                "",
                "",
            )
            continue
        meds = [fmt_time(w["envs"].get(e["label"], {}).get("median")) for e in envs]
        ci = fmt_span(first.get("ci_low"), first.get("ci_high"))
        tail = [_rate_narrow(first)] if narrow else [_rate(first), _memory(first)]
        t.add_row(safe(w["name"]), *source, *meds, ci, *tail)
    if narrow:
        # Not measured: one line per reason under the table, not a reason squeezed into a column.
        notes = [f"[yellow]{safe(why)}[/]: {safe(', '.join(names))}" for why, names in skipped.items()]
        t.caption = "\n".join(["medians; sources, peak memory: 100+ columns or --json", *notes])
        t.caption_justify = "left"
    return t


def meaning_lines(record: dict[str, Any]) -> list[str]:
    """What a single run's figures say about this machine, and what to run next (rich markup)."""
    return figure_lines(record) + NEXT_LINES


def figure_lines(record: dict[str, Any]) -> list[str]:
    """What a single run's figures say about this machine (rich markup)."""
    f = run_figures(record)
    return roofline_lines(f) + time_lines(f) + precision_lines(f)


def roofline_lines(f: RunFigures) -> list[str]:
    if not (f.copy_bandwidth or f.matmul_rate):
        return [
            "No roofline probe in this selection; to see what the memory system and the arithmetic units can do:",
            "  mpsup bench --only 'roofline/*'",
        ]
    peaks = " and ".join(
        x
        for x in (
            f.copy_bandwidth and fmt_rate(f.copy_bandwidth, "B/s") + " copy bandwidth",
            f.matmul_rate and fmt_rate(f.matmul_rate, "FLOP/s") + " matmul",
        )
        if x
    )
    lines = [f"This machine's roofline, measured here: {peaks}."]
    if f.copy_bandwidth and f.decode_bandwidth and f.decode_bandwidth <= f.copy_bandwidth:
        lines.append(
            f"Single-token linear layers reach up to {fmt_rate(f.decode_bandwidth, 'B/s')} "
            f"({f.decode_bandwidth / f.copy_bandwidth:.0%} of that bandwidth): decoding is bound by memory traffic."
        )
    elif f.copy_bandwidth and f.decode_bandwidth:
        # Seen on a busy 2-core VM (17.6 GB/s against a 4.8 GB/s copy): "364% of that bandwidth: bound by
        # memory traffic" contradicted itself. Above the copy figure, caches or a slowed probe are at work.
        lines.append(
            f"Single-token linear layers reach up to {fmt_rate(f.decode_bandwidth, 'B/s')}, more than the copy "
            "probe: their weights partly stay in cache (or the probe was slowed), so it does not bound them."
        )
    return lines


def time_lines(f: RunFigures) -> list[str]:
    if len(f.time_shares) <= 1:
        return []
    return ["Where the time goes: " + ", ".join(f"{safe(k)} {v:.0%}" for k, v in f.time_shares) + "."]


def precision_lines(f: RunFigures) -> list[str]:
    if f.median_width is None or f.widest_width is None:
        return []
    return [
        f"Each median is known to +-{f.median_width:.1%} (half the workloads closer, "
        f"the widest +-{f.widest_width:.0%}) for this process, now. A single run cannot tell whether another "
        "torch, or this one tomorrow, is faster: times move by a few % between processes and with heat "
        "and load, so compare two environments interleaved, not two tables."
    ]


NEXT_LINES = [
    "[bold]Next[/], to learn whether an upgrade helps this machine:",
    "  mpsup install-rc                   # a candidate torch beside this one",
    "  mpsup bench --candidate VERSION    # times both, same workloads",
    "  mpsup report                       # the verdict",
]


def paired_note(record: dict[str, Any]) -> str:
    """The tables show each environment's own median over both visits, and a ratio of two such medians
    is not the comparison: the report's speedup is the median of the per-round ratios."""
    envs = record["environments"]
    base, other = safe(envs[0]["label"]), safe(envs[1]["label"])
    return (
        f"Times are each environment's own median; the 95% CI, rate and memory are {base}'s alone. "
        f"The paired figures (speedup: the median of the per-round {base} / {other} ratios, its interval, "
        "the verdict) are `mpsup report`'s."
    )


def paired_next(record: dict[str, Any]) -> list[str]:
    aa = record.get("mode") == "aa"
    return [
        (
            "[bold]Next[/], to see this machine's noise floor (an A/A run should show no change):"
            if aa
            else "[bold]Next[/], to learn whether the candidate helps this machine:"
        ),
        f"  mpsup report --run {safe(record['id'])}  # " + ("the paired figures" if aa else "the verdict"),
    ]


def run_summary(record: dict[str, Any], path: str | None) -> dict[str, Any]:
    counts: dict[str, int] = {}
    for w in record["workloads"]:
        counts[w["status"]] = counts.get(w["status"], 0) + 1
    label = record["environments"][0]["label"]
    return {
        "id": record["id"],
        "path": path,
        "mode": record["mode"],
        "device": record["device"],
        "partial": record["partial"],
        "interrupted": bool(record.get("interrupted")),
        "signal": record.get("signal"),
        "failure": record.get("failure"),
        "environments": record["environments"],
        "status_counts": counts,
        "model": record.get("model"),
        "model_forward_s": model_forward_estimate(record, label),
        "model_phases": phase_figures(record, label),
        "model_census": census(record, label),
        "smoke": {s["feature"]: {k: v["status"] for k, v in s["envs"].items()} for s in record.get("smoke", [])},
        "workloads": [
            {
                "name": w["name"],
                "kind": w["kind"],
                "status": w["status"],
                "median_s": w["envs"].get(label, {}).get("median"),
                "ci_low_s": w["envs"].get(label, {}).get("ci_low"),
                "ci_high_s": w["envs"].get(label, {}).get("ci_high"),
            }
            for w in record["workloads"]
        ],
    }


def print_plan_notes(plan: BenchPlan, console: Console) -> None:
    """What the model reader assumed and what it could not measure, before any time is spent."""
    for note in (plan.model_doc or {}).get("notes", []):
        console.print(f"assumed: {safe(note)}", highlight=False, soft_wrap=True)
    for item in plan.not_measured[:5]:
        console.print(f"not measured: {safe(item['tensor'])}: {safe(item['reason'])}", highlight=False, soft_wrap=True)
    if plan.affinity.cpus:
        console.print(f"pinned: {safe(plan.affinity.why)}", highlight=False, soft_wrap=True)


CENSUS_TOP_OPS = 8  # ops named on a phase's census line; --list --json has them all, with shapes and dtypes


def render_list(
    plan: BenchPlan, as_json: bool, console: Console, censuses: Mapping[str, PhaseCensus] | None = None
) -> None:
    """`bench --list`: the workloads, and for a model's phases the op census taken on the meta device."""
    from mpsup.bench.command import CENSUS_DEVICE

    censuses = censuses or {}
    if as_json:
        docs = []
        for w in plan.workloads:
            doc = w.to_json()
            c = censuses.get(w.name)
            if c is not None:
                doc["census_device"] = CENSUS_DEVICE
                doc["census"] = c.census
                if c.census is None:
                    doc["census_reason"] = c.reason
            docs.append(doc)
        emit_json(docs)
        return
    print_workload_list(list(plan.workloads), console)
    for w in plan.workloads:
        c = censuses.get(w.name)
        if c is not None:
            console.print(census_line(w.name, c, CENSUS_DEVICE), highlight=False, soft_wrap=True)


def census_line(name: str, c: PhaseCensus, device: str) -> str:
    """One phase's census in a line (rich markup; every name from the model passes through safe)."""
    if c.census is None:
        return f"{safe(name)}: no op census ({safe(c.reason)})"
    ops: dict[str, int] = c.census.get("ops") or {}
    top = sorted(ops.items(), key=lambda kv: (-kv[1], kv[0]))
    named = ", ".join(f"{safe(op)} {n}" for op, n in top[:CENSUS_TOP_OPS])
    more = ", ..." if len(top) > CENSUS_TOP_OPS else ""
    calls = int(c.census.get("calls") or 0)
    return f"{safe(name)}: {calls} aten calls, {len(ops)} ops ({named}{more}) on the {safe(device)} device"


def render_result(
    result: BenchResult, as_json: bool, console: Console, details: bool = False, *, selected: int | None = None
) -> None:
    """The finished run: its JSON summary or its tables, and the one line saying why it stopped early.
    `selected`: how many workloads the plan held (`len(plan.workloads)`), for a stopped run's count."""
    record = result.record
    if as_json:
        emit_json(run_summary(record, str(result.path) if result.path else None))
    else:
        render_run(record, console, details, selected=selected)
        console.print(f"Run record: {safe(result.path)}", highlight=False, soft_wrap=True)
    if record.get("failure") and not record.get("interrupted"):
        error_line(f"{record['failure']}; the finished measurements are in {result.path}")
