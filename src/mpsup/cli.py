"""The command line: parse options, call one core function, render what it returns."""

from __future__ import annotations

import sys
from enum import StrEnum
from pathlib import Path
from typing import Annotated

import typer

from mpsup.errors import OperationFailed, UserError
from mpsup.render import emit_json, error_line, stderr_console, stdout_console

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    help="Does the next PyTorch make your model faster on your Mac's GPU? Check, install, measure, report.",
    pretty_exceptions_enable=False,
)

JsonOpt = Annotated[bool, typer.Option("--json", help="Print one JSON document on stdout.")]
PythonOpt = Annotated[
    Path | None, typer.Option("--python", help="Target interpreter (default: the one running mpsup).")
]


@app.callback()
def _root() -> None:
    """mpsup: measure whether a PyTorch upgrade helps your model on your Mac's GPU."""


@app.command()
def doctor(
    python: PythonOpt = None,
    as_json: JsonOpt = False,
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="Show each check's details.")] = False,
    save_snapshot: Annotated[
        Path | None, typer.Option("--save-snapshot", help="Write everything the checks read to FILE.")
    ] = None,
    from_snapshot: Annotated[
        Path | None, typer.Option("--from-snapshot", help="Run the checks on a saved snapshot instead.")
    ] = None,
) -> None:
    """Is this Mac and this Python ready for a PyTorch MPS upgrade?"""
    from mpsup.doctor.render import render_doctor
    from mpsup.doctor.run import diagnose
    from mpsup.host.snapshot import capture, load_snapshot, save_snapshot as write_snapshot

    if from_snapshot is not None and python is not None:
        raise UserError("--from-snapshot and --python cannot be combined: a snapshot already names its Python")
    if from_snapshot is not None:
        snapshot = load_snapshot(from_snapshot)
    else:
        if python is not None and not python.exists():
            raise UserError(f"{python}: no such interpreter")
        with stderr_console.status("Reading this machine and its Python..."):
            snapshot = capture(python)
    if save_snapshot is not None:
        write_snapshot(snapshot, save_snapshot)
        stderr_console.print(f"snapshot written to {save_snapshot}")
    report = diagnose(snapshot)
    if as_json:
        emit_json(report.to_json())
    else:
        render_doctor(report, stdout_console, verbose=verbose)
    raise typer.Exit(1 if report.failed else 0)


class DeviceChoice(StrEnum):
    mps = "mps"
    cuda = "cuda"
    cpu = "cpu"


def _default_device() -> str:
    return "mps" if sys.platform == "darwin" else "cpu"


def _parse_tokens(text: str | None) -> tuple[int, ...] | None:
    if text is None:
        return None
    try:
        values = tuple(int(t) for t in text.split(",") if t.strip())
    except ValueError:
        raise UserError(f"--tokens {text!r}: expected comma-separated positive integers, e.g. 1,512") from None
    if not values or any(v <= 0 or v > 1_000_000 for v in values):
        raise UserError(f"--tokens {text!r}: expected comma-separated positive integers, e.g. 1,512")
    return values


def _resolve_python(value: str, flag: str) -> Path:
    from mpsup.envs.resolve import resolve_environment

    return resolve_environment(value, flag)


@app.command()
def bench(
    device: Annotated[DeviceChoice | None, typer.Option("--device", help="mps (default on a Mac), cuda or cpu.")] = None,
    budget: Annotated[float, typer.Option("--budget", min=0.001, help="Seconds per workload and environment.")] = 1.0,
    only: Annotated[str | None, typer.Option("--only", help="Glob(s) on name, kind, part or tag; comma-separated; re:REGEX.")] = None,
    python: PythonOpt = None,
    tokens: Annotated[str | None, typer.Option("--tokens", help="Decode and prefill sizes, e.g. 1,512.")] = None,
    threads: Annotated[int | None, typer.Option("--threads", min=1, help="CPU threads in the worker (recorded).")] = None,
    list_only: Annotated[bool, typer.Option("--list", help="Print the workloads without running them.")] = False,
    smoke: Annotated[bool, typer.Option("--smoke/--no-smoke", help="Run the feature smoke tests first.")] = True,
    baseline: Annotated[str | None, typer.Option("--baseline", help="Baseline interpreter or venv (default: --python).")] = None,
    candidate: Annotated[str | None, typer.Option("--candidate", help="Candidate interpreter, venv, or recorded version.")] = None,
    aa: Annotated[bool, typer.Option("--aa", help="Pair the baseline with itself: the noise floor.")] = False,
    as_json: JsonOpt = False,
) -> None:
    """Smoke-test new MPS features and time the bundled suite (or --model's layers) on the GPU."""
    from mpsup.bench.policy import SamplingPolicy
    from mpsup.bench.render import bench_progress, render_run, run_summary
    from mpsup.bench.run import run_bench
    from mpsup.bench.runner import BenchOptions, EnvSpec
    from mpsup.bench.suite import build_suite
    from mpsup.bench.workloads import select

    dev = device.value if device else _default_device()
    workloads = select(build_suite(dev, _parse_tokens(tokens)), only)
    if list_only:
        if as_json:
            emit_json([w.to_json() for w in workloads])
        else:
            _print_workload_list(workloads)
        return
    if aa and candidate:
        raise UserError("--aa pairs the baseline with itself; it cannot be combined with --candidate")
    base_py = _resolve_python(baseline, "--baseline") if baseline else (python or Path(sys.executable))
    if python is not None and not python.exists():
        raise UserError(f"{python}: no such interpreter")
    envs = [EnvSpec("baseline", base_py)]
    mode = "single"
    if candidate:
        envs.append(EnvSpec("candidate", _resolve_python(candidate, "--candidate")))
        mode = "paired"
    elif aa:
        envs.append(EnvSpec("baseline-2", base_py))
        mode = "aa"
    options = BenchOptions(device=dev, policy=SamplingPolicy(budget_s=budget), threads=threads, smoke=smoke)
    with bench_progress(stderr_console) as on_event:
        record, path = run_bench(envs, workloads, options, mode=mode, progress=on_event)
    if as_json:
        emit_json(run_summary(record, str(path) if path else None))
    else:
        render_run(record, stdout_console)
        stdout_console.print(f"Run record: {path}")
    if record.get("interrupted"):
        raise typer.Exit(130)
    failed = any(w["status"] in ("crash", "error") for w in record["workloads"]) or any(
        e.get("status") in ("fail", "crash") for s in record.get("smoke", []) for e in s["envs"].values()
    )
    raise typer.Exit(1 if failed else 0)


def _print_workload_list(workloads: list) -> None:
    from rich.table import Table

    t = Table(title=f"{len(workloads)} workloads")
    for col in ("name", "kind", "dtype", "shape", "tags", "source"):
        t.add_column(col, overflow="fold")
    for w in workloads:
        shape = ", ".join(f"{k}={v}" for k, v in w.params.items() if k not in ("kernel", "method"))
        t.add_row(w.name, w.kind, w.dtype, shape, ",".join(w.tags), w.source)
    stdout_console.print(t)


def main() -> None:
    # Typer's standalone mode turns usage errors into exit 2 with click's message; our own
    # errors carry their exit code and one line of text.
    try:
        app()
    except (UserError, OperationFailed) as exc:
        error_line(str(exc))
        sys.exit(exc.exit_code)
