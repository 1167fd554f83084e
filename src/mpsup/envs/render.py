"""How install-rc shows its plan, its progress (stderr) and its result.

Everything shown through rich that mpsup did not write itself (paths, index URLs and file names,
notes quoting them, record fields) goes through `safe`: rich would read `[...]` in it as markup.
"""

from __future__ import annotations

import shlex
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from rich.console import Console, RenderableType
from rich.progress import (
    BarColumn,
    DownloadColumn,
    Progress,
    ProgressColumn,
    SpinnerColumn,
    Task,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
    TransferSpeedColumn,
)
from rich.table import Table

from mpsup.envs.plan import InstallPlan
from mpsup.render import safe


def human_size(size: int | None) -> str:
    if size is None:
        return "size not given by the index"
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if size >= scale:
            return f"{size / scale:.1f} {unit}"
    return f"{size} B"


def _sha_text(plan: InstallPlan) -> str:
    if plan.wheel.sha256:
        return f"sha256 {plan.wheel.sha256[:12]}... checked"
    return "sha256 not given by the index; accepted by --allow-unhashed, computed from the download and recorded"


def render_plan(plan: InstallPlan, console: Console) -> None:
    t = Table(
        title=f"Plan: torch {safe(plan.baseline_torch or '(none)')} -> {safe(plan.to_version)} ({plan.mode})",
        show_header=False,
        title_justify="left",
    )
    t.add_column(style="bold")
    t.add_column(overflow="fold")
    t.add_row("from", safe(f"{plan.baseline_python}  (torch {plan.baseline_torch or 'not installed'})"))
    t.add_row(
        "to", safe(f"torch {plan.to_version}" + (f" with {', '.join(plan.companions)}" if plan.companions else ""))
    )
    where = str(plan.prefix) + (
        "  (a new environment; yours is not touched)"
        if plan.mode == "side-by-side"
        else "  (upgraded in place; its package list is saved first for --rollback)"
    )
    t.add_row("into", safe(where))
    t.add_row("channel", safe(plan.channel))
    t.add_row("index", safe(plan.index_label))
    t.add_row("wheel", safe(f"{plan.wheel.filename}  ({human_size(plan.wheel.size)}; {_sha_text(plan)})"))
    t.add_row("for", safe(plan.target))
    if plan.clone_lines:
        t.add_row("clone", f"{len(plan.clone_lines)} packages from your environment (the torch family left out)")
    for i, cmd in enumerate(plan.commands()):
        t.add_row("command" if i == 0 else "", safe(shlex.join(cmd)))
    for note in plan.notes:
        t.add_row("note", safe(note))
    console.print(t)


def render_installed(result: Any, console: Console) -> None:
    rec = result.record
    console.print(
        f"[green]✓[/] torch {safe(rec.torch_version)} is installed and verified in {safe(rec.prefix)} "
        f"({result.elapsed_s:.0f} s; MPS built: {'yes' if rec.mps_built else 'no'}, available: "
        f"{'yes' if rec.mps_available else 'no'})",
        highlight=False,
        soft_wrap=True,
    )
    if rec.wheel.get("sha256_from") == "download":
        console.print(
            "The index gave no sha256; the wheel's, computed from the download, is recorded: "
            f"{safe(rec.wheel.get('sha256'))}",
            highlight=False,
            soft_wrap=True,
        )
    if rec.mode == "side-by-side":
        # bench's baseline defaults to mpsup's own Python: name the user's when it is another one.
        baseline = (
            ""
            if Path(rec.baseline_python).absolute() == Path(sys.executable).absolute()
            else f"--baseline {rec.baseline_python} "
        )
        console.print(
            f"Compare it with your environment: [bold]{safe(f'mpsup bench {baseline}--candidate {rec.name}')}[/] "
            "then [bold]mpsup report[/]",
            highlight=False,
            soft_wrap=True,
        )
    else:
        console.print(
            f"Undo with: [bold]{safe(f'mpsup install-rc --rollback --python {rec.python}')}[/]",
            highlight=False,
            soft_wrap=True,
        )


def _listed(wheel: Any) -> str:
    if not isinstance(wheel, dict):
        return ""
    when = wheel.get("upload_time") or wheel.get("seen_at")
    return str(when)[:10] if when else ""


def _sha_short(wheel: Any) -> str:
    sha = wheel.get("sha256") if isinstance(wheel, dict) else None
    if not isinstance(sha, str) or not sha:
        return "not recorded"
    return sha[:12] + (" (computed)" if wheel.get("sha256_from") == "download" else "")


def render_environments(docs: list[dict[str, Any]], console: Console) -> None:
    t = Table(title=f"{len(docs)} recorded environments")
    for col in ("name", "torch", "python", "channel", "sha256", "listed", "mode", "created", "path"):
        t.add_column(col, overflow="fold")
    for d in docs:
        wheel = d.get("wheel")
        cells = (
            d.get("name"),
            d.get("torch_version"),
            d.get("python_version", ""),
            d.get("channel", ""),
            _sha_short(wheel),
            _listed(wheel),
            d.get("mode"),
            str(d.get("created_at", ""))[:16].replace("T", " "),
            d.get("prefix", d.get("python")),
        )
        t.add_row(*(safe(c if c is not None else "") for c in cells))
    console.print(t)


class _DownloadOnly(ProgressColumn):
    """Shows the wrapped column on the download bar only; step lines keep just spinner, text and time."""

    def __init__(self, inner: ProgressColumn) -> None:
        super().__init__()
        self._inner = inner

    def render(self, task: Task) -> RenderableType:
        return self._inner.render(task) if task.fields.get("kind") == "download" else ""


class RichInstallProgress:
    """Steps as a spinner line, the download as a byte bar; all on stderr."""

    def __init__(self, progress: Progress) -> None:
        self._progress = progress
        self._step: TaskID | None = None
        self._download: TaskID | None = None

    def step(self, text: str) -> None:
        if self._step is not None:
            self._progress.update(self._step, completed=1, total=1)
        self._step = self._progress.add_task(safe(text), total=None)

    def download(self, done: int, total: int | None) -> None:
        if self._download is None:
            self._download = self._progress.add_task("download", total=total, kind="download")
        self._progress.update(self._download, completed=done, total=total)

    def finish(self) -> None:
        if self._step is not None:
            self._progress.update(self._step, completed=1, total=1)


@contextmanager
def install_progress(console: Console) -> Iterator[RichInstallProgress]:
    download_only = (_DownloadOnly(c) for c in (BarColumn(), DownloadColumn(), TransferSpeedColumn()))
    columns = (
        SpinnerColumn(finished_text="[green]✓[/]"),
        TextColumn("{task.description}"),
        *download_only,
        TimeElapsedColumn(),
    )
    with Progress(*columns, console=console, transient=False) as progress:
        reporter = RichInstallProgress(progress)
        yield reporter
        reporter.finish()
