"""`bench --list`: the workloads one a line, and for a model's phases the op census taken on the meta device."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rich.cells import cell_len
from rich.console import Console
from rich.table import Table

from mpsup.bench.events import CensusStarted
from mpsup.bench.screen_text import is_narrow, plural
from mpsup.console import NARROW, emit_json, printable, safe
from mpsup.model.phases import phase_shape
from mpsup.progress import Event, Progress
from mpsup.units import fmt_bytes

if TYPE_CHECKING:
    from collections.abc import Mapping

    from mpsup.bench.command import BenchPlan, PhaseCensus


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
    # roles are what it is for (docs/reference/models.md). They fit if every other column fits whole and leaves the
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


def census_progress(console: Console) -> Progress:
    """`--list`'s progress on `console`: one line when the op census starts (it runs a worker)."""

    def show(event: Event) -> None:
        match event:
            case CensusStarted():
                line = f"op census of {event.phases} phase(s) on the {event.device} device, in {event.python}"
                console.print(safe(line), highlight=False, soft_wrap=True)
            case _:
                raise TypeError(f"the --list progress has no rendering for {type(event).__name__}")

    return show
