"""How install-rc shows its plan, its progress (stderr) and its result.

Everything shown through rich that mpsup did not write itself (paths, index URLs and file names,
notes quoting them, record fields) goes through `safe`: rich would read `[...]` in it as markup.
"""

from __future__ import annotations

import shlex
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from rich import box
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

from mpsup.console import NARROW, emit_json, safe, stderr_console, stdout_console, warning_line
from mpsup.envs import command
from mpsup.envs import events as ev
from mpsup.envs.plan import InstallPlan
from mpsup.progress import Event


def human_size(size: int | None) -> str:
    if size is None:
        return "size not given by the index"
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if size >= scale:
            return f"{size / scale:.1f} {unit}"
    return f"{size} B"


def _sha_text(plan: InstallPlan) -> str:
    if plan.wheel.sha256:
        return f"sha256 {plan.wheel.sha256[:12]}..., checked after the download"  # a plan has downloaded nothing
    return "sha256 not given by the index; accepted by --allow-unhashed, computed from the download and recorded"


def render_plan(plan: InstallPlan, console: Console) -> None:
    narrow = console.width < NARROW
    t = Table(
        title=f"Plan: torch {safe(plan.baseline_torch or '(none)')} -> {safe(plan.to_version)} ({plan.mode})",
        show_header=False,
        title_justify="left",
        # Narrow: no frame (four more columns for the paths), and "$ " marks where each wrapped command starts.
        box=None if narrow else box.HEAVY_HEAD,
        padding=(0, 1),
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
        t.add_row("command" if i == 0 else "", ("$ " if narrow else "") + safe(shlex.join(cmd)))
    for note in plan.notes:
        t.add_row("note", safe(note))
    console.print(t)


def render_installed(done: command.Installed, console: Console) -> None:
    result, rec = done.result, done.result.record
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
        console.print(
            f"Compare it with your environment: [bold]{safe(done.next_command)}[/] then [bold]mpsup report[/]",
            highlight=False,
            soft_wrap=True,
        )
    else:
        console.print(f"Undo with: [bold]{safe(done.next_command)}[/]", highlight=False, soft_wrap=True)


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


def _cells(d: dict[str, Any]) -> dict[str, str]:
    wheel = d.get("wheel")
    cells = {
        "name": d.get("name"),
        # An MLX environment (install-rc --mlx) has no torch: its column names the MLX it holds.
        "torch": f"(MLX {d.get('mlx_version')})" if d.get("stack") == "mlx" else d.get("torch_version"),
        "python": d.get("python_version", ""),
        "channel": d.get("channel", ""),
        "sha256": _sha_short(wheel),
        "listed": _listed(wheel),
        "mode": d.get("mode"),
        "created": str(d.get("created_at", ""))[:16].replace("T", " "),
        "path": d.get("prefix", d.get("python")),
    }
    return {k: safe(v if v is not None else "") for k, v in cells.items()}


def render_environments(docs: list[dict[str, Any]], console: Console) -> None:
    if console.width < NARROW:
        _render_environments_stacked(docs, console)
        return
    t = Table(title=f"{len(docs)} recorded environments")
    for col in ("name", "torch", "python", "channel", "sha256", "listed", "mode", "created", "path"):
        t.add_column(col, overflow="fold")
    for d in docs:
        t.add_row(*_cells(d).values())
    console.print(t)


def _render_environments_stacked(docs: list[dict[str, Any]], console: Console) -> None:
    """Nine columns do not fit 80: a heading line per environment, the rest indented below it."""
    console.print(f"{len(docs)} recorded environments", style="italic", highlight=False)
    for d in docs:
        c = _cells(d)
        facts = (f"torch {c['torch']}", c["python"] and f"Python {c['python']}", c["channel"])
        console.print(f"[bold]{c['name']}[/]: " + ", ".join(v for v in facts if v), highlight=False)
        t = Table.grid()
        t.add_column(width=2)
        t.add_column(overflow="fold")
        t.add_row("", ", ".join(v for v in (c["mode"], c["created"] and f"created {c['created']}") if v))
        t.add_row("", f"sha256 {c['sha256']}" + (f", listed {c['listed']}" if c["listed"] else ""))
        t.add_row("", c["path"])
        console.print(t)


class _DownloadOnly(ProgressColumn):
    """Shows the wrapped column on the download bar only; step lines keep just spinner, text and time."""

    def __init__(self, inner: ProgressColumn) -> None:
        super().__init__()
        self._inner = inner

    def render(self, task: Task) -> RenderableType:
        return self._inner.render(task) if task.fields.get("kind") == "download" else ""


def step_text(event: Event) -> str:
    """The line an install step shows; a download is a bar, not a line, and an event of another kind is refused."""
    match event:
        case ev.Fetching(filename=filename):
            return f"Fetching {filename}"
        case ev.CreatingVenv(base_python=python):
            return f"Creating a virtual environment from {python}"
        case ev.Installing(version=version, installer=installer, cloned=cloned):
            clone = f" and {cloned} packages from your environment" if cloned else ""
            return f"Installing torch {version} with {installer}{clone}"
        case ev.Verifying(in_place=in_place):
            return f"Verifying the {'upgraded' if in_place else 'new'} environment"
        case ev.MovingIntoPlace(name=name):
            return f"Moving it into place as {name}"
        case ev.SavedPackages(count=count, path=path):
            return f"Saved {count} packages to {path}"
        case ev.Upgrading(python=python, version=version, installer=installer):
            return f"Upgrading {python} to torch {version} with {installer}"
        case ev.RestoringSaved():
            return "The upgrade failed; putting the saved packages back"
    # An event no case names would vanish from the terminal: a programming error, refused loudly.
    raise TypeError(f"install-rc has no line for the event {type(event).__name__}")


class RichInstallProgress:
    """A Progress for the install's events: steps as a spinner line, the download as a byte bar; all on stderr."""

    def __init__(self, progress: Progress) -> None:
        self._progress = progress
        self._step: TaskID | None = None
        self._download: TaskID | None = None

    def __call__(self, event: Event) -> None:
        if isinstance(event, ev.Downloaded):
            self._downloaded(event.done, event.total)
            return
        text = step_text(event)
        if self._step is not None:
            self._progress.update(self._step, completed=1, total=1)
        self._step = self._progress.add_task(safe(text), total=None)

    def _downloaded(self, done: int, total: int | None) -> None:
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


def terminal_hooks(as_json: bool) -> command.Hooks:
    """Spinner, progress and question on stderr; the plan too under --json, where stdout holds one JSON document."""
    return command.Hooks(
        busy=stderr_console.status,
        show_plan=lambda plan: render_plan(plan, stderr_console if as_json else stdout_console),
        ask=_ask,
        progress=lambda: install_progress(stderr_console),
    )


def _ask(question: str) -> bool:
    from rich.prompt import Confirm

    return Confirm.ask(safe(question), console=stderr_console, default=False)


def render_result(result: command.InstallRcResult, *, as_json: bool) -> None:
    """The one place install-rc's outcome is shown; the plan itself was shown by the hooks, before the question."""
    if isinstance(result, command.ListResult):
        for problem in result.problems:
            warning_line(f"skipped {problem}")
    if isinstance(result, command.Declined):
        stderr_console.print("Nothing was changed.")
    if as_json:
        if (doc := result.to_json()) is not None:  # a "no" leaves stdout empty
            emit_json(doc)
        return
    out = stdout_console
    match result:
        case command.ListResult(environments=docs):
            render_environments(docs, out)
        case command.RemoveResult(removed=removed):
            for d in removed:
                in_place = d.get("mode") == "in-place"
                what = "record (your environment itself was not touched)" if in_place else "environment"
                out.print(safe(f"Removed the {what} {d['name']} (torch {d.get('torch_version')})"), highlight=False)
        case command.RolledBack(target=target, result=rolled):
            text = (
                f"Restored {target}: reinstalled {len(rolled.reinstalled)}, removed {len(rolled.removed)} packages "
                f"(saved set {rolled.saved})"
            )
            out.print(safe(text), highlight=False, soft_wrap=True)
        case command.NothingNew(nothing=nothing):
            out.print(safe(nothing.message), highlight=False, soft_wrap=True)
        case command.Installed():
            render_installed(result, out)
