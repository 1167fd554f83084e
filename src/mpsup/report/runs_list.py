"""`report --list`: the stored runs, as --run, --baseline and --candidate take them."""

from __future__ import annotations

from rich import box
from rich.console import Console
from rich.table import Table

from mpsup.console import NARROW, safe
from mpsup.runs.select import StoredRun


def render_run_list(rows: list[StoredRun], out: Console) -> None:
    """`report --list` on a terminal: what --run, --baseline and --candidate take, newest last."""
    if not rows:
        out.print(
            "No stored runs yet: `mpsup bench` records one (add --candidate VERSION to pair two torches, or --aa "
            "to pair this torch with itself).",
            highlight=False,
        )
        return
    narrow = out.width < NARROW
    t = Table(
        title=f"{len(rows)} stored run{'s' * (len(rows) != 1)}",
        title_justify="left",
        box=None if narrow else box.HEAVY_HEAD,
        pad_edge=not narrow,
        header_style="bold",
    )
    t.add_column("id", no_wrap=True)  # what --run, --baseline and --candidate take: never cut
    # Narrow, the id's own timestamp says when, and the torch pair gets the room ("2.13.0…" told nothing).
    columns = ("mode", "device", "torch", "n") if narrow else ("created", "mode", "device", "torch", "n")
    for c in columns:
        t.add_column(c, no_wrap=c != "torch", overflow="fold", justify="right" if c == "n" else "left")
    if not narrow:
        t.add_column("model", overflow="fold")
    for r in rows:
        # A file renamed by hand: --run takes its name; the id written inside is shown beside it.
        inside = f" (record id {r.record_id})" if r.record_id and r.record_id != r.id else ""
        cells = [
            safe(r.id + inside),
            *([] if narrow else [safe(_when(r.created_at))]),
            safe(r.mode) + (" (partial)" if r.partial else ""),
            safe(r.device),
            safe(_torches(r.torch, r.mode)),
            str(r.workloads),
        ]
        t.add_row(*cells, *([] if narrow else [safe(r.model or "")]))
    out.print(t)
    if narrow and any(r.model for r in rows):
        out.print("Model paths: 100+ columns or --list --json.", highlight=False)


def _when(created: object) -> str:
    # 2026-12-03T12:04:07Z -> 2026-12-03 12:04: minutes tell runs apart; the id carries the rest.
    text = str(created or "")
    return text[:16].replace("T", " ") if len(text) >= 16 else text


def _torches(versions: list[str | None], mode: str | None) -> str:
    """`2.13.0 (A/A)` for an A/A run; a paired run of one version (two wrappers, two settings) is no A/A."""
    names = [str(v) for v in versions]
    if mode == "aa" and len(set(names)) == 1:
        return f"{names[0]} (A/A)"
    return " -> ".join(names)
