"""The command line: parse options, call one core function, render what it returns."""

from __future__ import annotations

import functools
import os
import sys
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, NoReturn

import typer

from mpsup.errors import OperationFailed, UserError
from mpsup.render import emit_json, error_line, safe, stderr_console, stdout_console

if TYPE_CHECKING:
    from mpsup.envs.plan import InstallRequest

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    help="Does the next PyTorch make your model faster on your Mac's GPU? Check, install, measure, report.",
    pretty_exceptions_enable=False,
)

# A flag takes no value: without an empty metavar, typer's help shows `<bool>` beside each one.
_flag = functools.partial(typer.Option, metavar="")

JsonOpt = Annotated[bool, _flag("--json", help="Print one JSON document on stdout.")]
PythonOpt = Annotated[
    Path | None, typer.Option("--python", help="Target interpreter (default: the one running mpsup).")
]


def _print_version(value: bool) -> None:
    if value:
        from mpsup import __version__

        stdout_console.print(f"mpsup {__version__}", highlight=False)
        raise typer.Exit()


@app.callback()
def _root(
    version: Annotated[
        bool, _flag("--version", help="Print mpsup's version and exit.", callback=_print_version, is_eager=True)
    ] = False,
) -> None:
    """mpsup: measure whether a PyTorch upgrade helps your model on your Mac's GPU."""


@app.command()
def doctor(
    python: PythonOpt = None,
    as_json: JsonOpt = False,
    verbose: Annotated[bool, _flag("--verbose", "-v", help="Show each check's details.")] = False,
    save_snapshot: Annotated[
        Path | None, typer.Option("--save-snapshot", help="Write everything the checks read to FILE.")
    ] = None,
    from_snapshot: Annotated[
        Path | None, typer.Option("--from-snapshot", help="Run the checks on a saved snapshot instead.")
    ] = None,
) -> None:
    """Is this Mac and this Python ready for a PyTorch MPS upgrade?"""
    from mpsup.doctor.command import DoctorRequest
    from mpsup.doctor.command import run as run_doctor
    from mpsup.doctor.render import render_doctor

    result = run_doctor(DoctorRequest(python, save_snapshot, from_snapshot), busy=stderr_console.status)
    if result.snapshot_written is not None:
        stderr_console.print(f"snapshot written to {safe(result.snapshot_written)}")
    if as_json:
        emit_json(result.report.to_json())
    else:
        render_doctor(result.report, stdout_console, verbose=verbose)
    raise typer.Exit(result.exit_code)


class DeviceChoice(StrEnum):
    mps = "mps"
    cuda = "cuda"
    cpu = "cpu"


@app.command()
def bench(
    device: Annotated[
        DeviceChoice | None, typer.Option("--device", help="mps (default on a Mac), cuda or cpu.")
    ] = None,
    budget: Annotated[float, typer.Option("--budget", min=0.001, help="Seconds per workload and environment.")] = 1.0,
    only: Annotated[
        str | None, typer.Option("--only", help="Glob(s) on name, kind, part or tag; comma-separated; re:REGEX.")
    ] = None,
    python: PythonOpt = None,
    tokens: Annotated[str | None, typer.Option("--tokens", help="Decode and prefill sizes, e.g. 1,512.")] = None,
    threads: Annotated[
        int | None, typer.Option("--threads", min=1, help="CPU threads in the worker (recorded).")
    ] = None,
    list_only: Annotated[bool, _flag("--list", help="Print the workloads without running them.")] = False,
    smoke: Annotated[bool, _flag("--smoke/--no-smoke", help="Run the feature smoke tests first.")] = True,
    baseline: Annotated[
        str | None, typer.Option("--baseline", help="Baseline interpreter or venv (default: --python).")
    ] = None,
    candidate: Annotated[
        str | None, typer.Option("--candidate", help="Candidate interpreter, venv, or recorded version.")
    ] = None,
    aa: Annotated[bool, _flag("--aa", help="Pair the baseline with itself: the noise floor.")] = False,
    model: Annotated[
        Path | None, typer.Option("--model", help="A checkpoint, model folder, .pt2 export, or module:function.")
    ] = None,
    resolution: Annotated[
        str | None, typer.Option("--resolution", help="Diffusion models: image size, e.g. 1024 or 832x480.")
    ] = None,
    dtype: Annotated[
        str | None, typer.Option("--dtype", help="Override the checkpoint's dtype: bf16, fp16, fp32.")
    ] = None,
    compile_too: Annotated[
        bool, _flag("--compile", help="With a .pt2 or module:function, also time it under torch.compile.")
    ] = False,
    as_json: JsonOpt = False,
) -> None:
    """Smoke-test new MPS features and time the bundled suite (or --model's layers) on the GPU."""
    from mpsup.bench import command
    from mpsup.bench.render import bench_progress, print_workload_list, render_run, run_summary

    request = command.BenchRequest(
        device=device.value if device else None,
        budget=budget,
        only=only,
        python=python,
        tokens=tokens,
        threads=threads,
        smoke=smoke,
        baseline=baseline,
        candidate=candidate,
        aa=aa,
        model=model,
        dtype=dtype,
        compile_too=compile_too,
        resolution=resolution,
    )
    plan = command.prepare(request)
    for note in (plan.model_doc or {}).get("notes", []):
        stderr_console.print(f"assumed: {safe(note)}", highlight=False, soft_wrap=True)
    for item in plan.not_measured[:5]:
        stderr_console.print(
            f"not measured: {safe(item['tensor'])}: {safe(item['reason'])}", highlight=False, soft_wrap=True
        )
    if list_only:
        if as_json:
            emit_json([w.to_json() for w in plan.workloads])
        else:
            print_workload_list(list(plan.workloads), stdout_console)
        return
    with bench_progress(stderr_console) as on_event:
        result = command.run(plan, progress=on_event, warn=_warn)
    if as_json:
        emit_json(run_summary(result.record, str(result.path) if result.path else None))
    else:
        render_run(result.record, stdout_console)
        stdout_console.print(f"Run record: {safe(result.path)}", highlight=False, soft_wrap=True)
    if result.record.get("failure") and not result.record.get("interrupted"):
        error_line(f"{result.record['failure']}; the finished measurements are in {result.path}")
    raise typer.Exit(result.exit_code)


def _warn(msg: str) -> None:
    stderr_console.print(f"[yellow]warning:[/] {safe(msg)}", highlight=False, soft_wrap=True)


class ReportFormat(StrEnum):
    terminal = "terminal"
    markdown = "markdown"
    json = "json"
    html = "html"


@app.command()
def report(
    paths: Annotated[
        list[Path] | None, typer.Argument(help="Run records or folders of them (several machines).")
    ] = None,
    run: Annotated[str | None, typer.Option("--run", help="A stored run id.")] = None,
    list_runs: Annotated[bool, _flag("--list", help="List stored runs.")] = False,
    baseline: Annotated[str | None, typer.Option("--baseline", help="Id of a single run to use as baseline.")] = None,
    candidate: Annotated[
        str | None, typer.Option("--candidate", help="Id of a single run to use as candidate.")
    ] = None,
    fmt: Annotated[
        ReportFormat, typer.Option("--format", help="terminal, markdown, json or html.")
    ] = ReportFormat.terminal,
    output: Annotated[Path | None, typer.Option("-o", "--output", help="Write the report to FILE.")] = None,
    threshold: Annotated[float, typer.Option("--threshold", min=0.0, max=1.0, help="Practical change floor.")] = 0.03,
    seed: Annotated[int, typer.Option("--seed", help="Bootstrap seed (same record, same report).")] = 0,
    fail_on_regression: Annotated[
        bool, _flag("--fail-on-regression", help="Exit 1 on regression, 3 if inconclusive.")
    ] = False,
    as_json: JsonOpt = False,
) -> None:
    """Say, with confidence intervals, whether the candidate PyTorch helps."""
    from mpsup.report.command import ReportRequest, run_report

    request = ReportRequest(
        paths=paths or [],
        run=run,
        list_runs=list_runs,
        baseline=baseline,
        candidate=candidate,
        fmt="json" if as_json else fmt.value,
        output=output,
        threshold=threshold,
        seed=seed,
        fail_on_regression=fail_on_regression,
    )
    code = run_report(request, stdout_console, stderr_console)
    if code:
        raise typer.Exit(code)


class ChannelChoice(StrEnum):
    test = "test"
    nightly = "nightly"
    stable = "stable"


class InstallerChoice(StrEnum):
    auto = "auto"
    pip = "pip"
    uv = "uv"


@app.command("install-rc")
def install_rc(
    channel: Annotated[
        ChannelChoice, typer.Option("--channel", help="test (release candidates), nightly, or stable.")
    ] = ChannelChoice.test,
    index_url: Annotated[
        str | None, typer.Option("--index-url", help="Read this index instead (https, file, or loopback http).")
    ] = None,
    version: Annotated[str | None, typer.Option("--version", help="Install exactly this torch version.")] = None,
    with_: Annotated[
        str | None, typer.Option("--with", help="Companion packages to match, e.g. torchvision,torchaudio.")
    ] = None,
    python: PythonOpt = None,
    in_place: Annotated[
        bool, _flag("--in-place", help="Upgrade the --python environment itself (its package list is saved first).")
    ] = False,
    clone: Annotated[
        bool, _flag("--clone", help="Also install your environment's other packages in the new one.")
    ] = False,
    installer: Annotated[
        InstallerChoice, typer.Option("--installer", help="auto (uv when present), pip or uv.")
    ] = InstallerChoice.auto,
    dry_run: Annotated[bool, _flag("--dry-run", help="Show the plan and stop.")] = False,
    yes: Annotated[
        bool, _flag("--yes", "-y", help="Do not ask before installing (required without a terminal).")
    ] = False,
    allow_root: Annotated[bool, _flag("--allow-root", help="On macOS, allow running as root.")] = False,
    list_envs: Annotated[bool, _flag("--list", help="Show the recorded candidate environments.")] = False,
    remove: Annotated[
        str | None, typer.Option("--remove", help="Delete a recorded environment (by version or name).")
    ] = None,
    rollback: Annotated[
        bool, _flag("--rollback", help="Put back the packages saved before an --in-place upgrade.")
    ] = False,
    allow_unhashed: Annotated[
        bool,
        _flag(
            "--allow-unhashed",
            help="Accept a wheel the index gives no sha256 for (its hash is computed from the download and recorded).",
        ),
    ] = False,
    as_json: JsonOpt = False,
) -> None:
    """Install the PyTorch release candidate (or nightly, or newest stable) beside your environment, safely."""
    from mpsup.envs import command
    from mpsup.envs import render as env_render
    from mpsup.envs.plan import InstallRequest

    install = InstallRequest(
        python=python or Path(sys.executable),
        channel=channel.value,
        index_url=index_url,
        version=version,
        companions=command.companions(with_),
        in_place=in_place,
        clone=clone,
        installer=installer.value,
        allow_unhashed=allow_unhashed,
        dry_run=dry_run,
        yes=yes,
        as_json=as_json,
        allow_root=allow_root,
    )
    req = command.InstallRcRequest(install, list_envs=list_envs, remove=remove, rollback=rollback)
    action = command.action(req)
    if action == "list":
        listed = command.list_environments()
        for problem in listed.problems:
            stderr_console.print(f"[yellow]warning:[/] skipped {safe(problem)}", highlight=False, soft_wrap=True)
        emit_json(listed.environments) if as_json else env_render.render_environments(
            listed.environments, stdout_console
        )
    elif action == "remove":
        assert remove is not None
        _render_removed(command.remove(remove).removed, as_json)
    elif action == "rollback":
        _rollback(install.python, yes, as_json)
    else:
        _install(install, as_json)


def _render_removed(removed: list[dict[str, Any]], as_json: bool) -> None:
    if as_json:
        emit_json({"status": "removed", "environments": removed})
        return
    for doc in removed:
        what = "record (your environment itself was not touched)" if doc.get("mode") == "in-place" else "environment"
        stdout_console.print(
            safe(f"Removed the {what} {doc['name']} (torch {doc.get('torch_version')})"), highlight=False
        )


def _rollback(target: Path, yes: bool, as_json: bool) -> None:
    from mpsup.envs import execute

    _confirm_or_refuse(yes, safe(f"Put back the packages saved for {target}?"))
    result = execute.rollback(target)
    if as_json:
        emit_json(result.to_json())
    else:
        stdout_console.print(
            safe(
                f"Restored {target}: reinstalled {len(result.reinstalled)}, removed {len(result.removed)} packages "
                f"(saved set {result.saved})"
            ),
            highlight=False,
            soft_wrap=True,
        )


def _install(request: InstallRequest, as_json: bool) -> None:
    from mpsup.envs import execute
    from mpsup.envs import render as env_render
    from mpsup.envs.plan import NothingToDo, plan_install

    with stderr_console.status(f"Looking for torch on the {request.channel} channel..."):
        plan = plan_install(request)
    if isinstance(plan, NothingToDo):
        emit_json(plan.to_json()) if as_json else stdout_console.print(
            safe(plan.message), highlight=False, soft_wrap=True
        )
        return
    env_render.render_plan(plan, stderr_console if as_json else stdout_console)
    if request.dry_run:
        if as_json:
            emit_json({"status": "planned", "dry_run": True, "plan": plan.to_json()})
        return
    _confirm_or_refuse(request.yes, safe(f"Install torch {plan.to_version} into {plan.prefix}?"))
    do_install = execute.install_in_place if plan.mode == "in-place" else execute.install_side_by_side
    with env_render.install_progress(stderr_console) as progress:
        result = do_install(plan, progress=progress)
    if as_json:
        emit_json({**result.to_json(), "plan": plan.to_json()})
    else:
        env_render.render_installed(result, stdout_console)


def _confirm_or_refuse(yes: bool, question: str) -> None:
    """`question` is rich markup: callers escape what they did not write (paths, versions from an index)."""
    if yes:
        return
    if not sys.stdin.isatty():
        raise UserError("there is no terminal to ask for confirmation; pass --yes (or --dry-run to see the plan only)")
    from rich.prompt import Confirm

    if not Confirm.ask(question, console=stderr_console, default=False):
        stderr_console.print("Nothing was changed.")
        raise typer.Exit(1)


def main() -> None:
    # Typer's standalone mode turns usage errors into exit 2 with click's message; our own
    # errors carry their exit code and one line of text.
    was_pipe = _stdout_is_pipe()
    try:
        app()
    except (UserError, OperationFailed) as exc:
        error_line(str(exc))
        if _wants_json(sys.argv[1:]):
            # --json promises one JSON document on stdout: a failure is one too, for scripts to read.
            emit_json({"status": "error", "message": str(exc), "exit_code": exc.exit_code})
        sys.exit(exc.exit_code)
    except BrokenPipeError:
        _reader_left()
    except SystemExit as exc:
        # rich and typer both turn a broken stdout pipe into exit 1: rich's Console.on_broken_pipe marks
        # the console quiet, typer wraps the streams in a PacifyFlushWrapper. That is how we tell them from a failure.
        # A console of typer's own (help text) only leaves a trace in fd 1: our pipe became devnull.
        if exc.code == 1 and (
            stdout_console.quiet
            or type(sys.stdout).__name__ == "PacifyFlushWrapper"
            or (was_pipe and _stdout_is_devnull())
        ):
            _reader_left()
        raise


def _stdout_is_pipe() -> bool:
    import stat

    try:
        return stat.S_ISFIFO(os.fstat(1).st_mode)
    except OSError:
        return False


def _stdout_is_devnull() -> bool:
    try:
        return os.path.samestat(os.fstat(1), os.stat(os.devnull))
    except OSError:
        return False


def _reader_left() -> NoReturn:
    """The reader closed our stdout (`mpsup report | head -2`): exit 0 quietly. stdout goes to devnull so
    that the interpreter's final flush cannot raise again (Python's signal docs, "Note on SIGPIPE")."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    sys.exit(0)


def _wants_json(args: list[str]) -> bool:
    from itertools import pairwise

    return "--json" in args or "--format=json" in args or ("--format", "json") in pairwise(args)
