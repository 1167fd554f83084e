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
    from mpsup.host.snapshot import capture, load_snapshot
    from mpsup.host.snapshot import save_snapshot as write_snapshot
    from mpsup.render import safe

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
        stderr_console.print(f"snapshot written to {safe(save_snapshot)}")
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
    model: Annotated[Path | None, typer.Option("--model", help="A checkpoint, model folder, .pt2 export, or module:function.")] = None,
    dtype: Annotated[str | None, typer.Option("--dtype", help="Override the checkpoint's dtype: bf16, fp16, fp32.")] = None,
    compile_too: Annotated[bool, typer.Option("--compile", help="With a .pt2 or module:function, also time it under torch.compile.")] = False,
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
    model_doc = None
    if dtype is not None and dtype not in ("bf16", "fp16", "fp32"):
        raise UserError(f"--dtype {dtype!r}: expected bf16, fp16 or fp32")
    if model is not None and (model.suffix == ".pt2" or _is_factory(str(model))):
        workloads, model_doc = _end_to_end_workloads(str(model), compile_too)
    elif model is not None:
        from mpsup.bench.suite import default_tokens
        from mpsup.model.extract import extract_model
        from mpsup.model.load import load_model
        from mpsup.render import safe

        loaded = load_model(model)
        ex = extract_model(loaded.tensors, loaded.config, tokens=_parse_tokens(tokens) or default_tokens(dev), dtype=dtype,
                           components=loaded.components)
        if not ex.workloads:
            raise UserError(f"{model}: no layer mpsup can measure ({len(ex.not_measured)} tensors not measured)")
        workloads = select(ex.workloads, only) if only else ex.workloads
        model_doc = {**loaded.describe(), "linear_weight_bytes": ex.linear_weight_bytes,
                     "fp8_weight_bytes": ex.fp8_weight_bytes, "not_measured": ex.not_measured}
        for item in ex.not_measured[:5]:
            stderr_console.print(f"not measured: {safe(item['tensor'])}: {safe(item['reason'])}", highlight=False, soft_wrap=True)
    else:
        workloads = select(build_suite(dev, _parse_tokens(tokens)), only)
    if list_only:
        if as_json:
            emit_json([w.to_json() for w in workloads])
        else:
            _print_workload_list(workloads)
        return
    if aa and candidate:
        raise UserError("--aa pairs the baseline with itself; it cannot be combined with --candidate")
    if python is not None:
        from mpsup.bench.workerproc import check_interpreter

        python = check_interpreter(python, "--python")
    base_py = _resolve_python(baseline, "--baseline") if baseline else (python or Path(sys.executable))
    envs = [EnvSpec("baseline", base_py)]
    mode = "single"
    if candidate:
        envs.append(EnvSpec("candidate", _resolve_python(candidate, "--candidate")))
        mode = "paired"
    elif aa:
        envs.append(EnvSpec("baseline-2", base_py))
        mode = "aa"
    options = BenchOptions(device=dev, policy=SamplingPolicy(budget_s=budget), threads=threads, smoke=smoke)
    from mpsup.render import safe

    def warn(msg: str) -> None:
        stderr_console.print(f"[yellow]warning:[/] {safe(msg)}", highlight=False, soft_wrap=True)

    with bench_progress(stderr_console) as on_event:
        record, path = run_bench(envs, workloads, options, mode=mode, model=model_doc, progress=on_event, warn=warn, exiting=True)
    if as_json:
        emit_json(run_summary(record, str(path) if path else None))
    else:
        render_run(record, stdout_console)
        stdout_console.print(f"Run record: {safe(path)}", highlight=False, soft_wrap=True)
    if record.get("interrupted"):
        import signal

        raise typer.Exit(128 + signal.Signals[record.get("signal", "SIGINT")].value)
    if record.get("failure"):
        error_line(f"{record['failure']}; the finished measurements are in {path}")
        raise typer.Exit(1)
    failed = any(w["status"] in ("crash", "error") for w in record["workloads"]) or any(
        e.get("status") in ("fail", "crash") for s in record.get("smoke", []) for e in s["envs"].values()
    )
    raise typer.Exit(1 if failed else 0)


def _is_factory(text: str) -> bool:
    import os
    import re

    return bool(re.fullmatch(r"[A-Za-z_][\w.]*:[A-Za-z_]\w*", text)) and not os.path.lexists(text)  # never raises (a name too long)


def _end_to_end_workloads(target: str, compile_too: bool) -> tuple[list, dict]:
    import hashlib
    import os

    from mpsup.bench.workloads import Workload

    if target.endswith(".pt2"):
        from mpsup.model.load import pt2_fingerprint

        path = Path(target)
        fingerprint = pt2_fingerprint(path)  # a regular zip file, or one line; reads at most 2 MiB
        params = {"source": "pt2", "path": os.path.realpath(path)}
        doc = {"path": str(path), "format": "pt2", "fingerprint": fingerprint}
    else:
        params = {"source": "factory", "target": target, "cwd": str(Path.cwd())}
        doc = {"path": target, "format": "module:function", "fingerprint": hashlib.sha256(target.encode()).hexdigest()[:16]}
    doc |= {"linear_weight_bytes": 0, "fp8_weight_bytes": 0, "not_measured": []}
    variants = [("model/end-to-end", False)] + ([("model/end-to-end/compiled", True)] if compile_too else [])
    workloads = [Workload(name, "end_to_end", "model", "fp32", {**params, "compile": comp}, tags=("end-to-end",),
                          source=doc["path"], role="end-to-end") for name, comp in variants]
    return workloads, doc


def _print_workload_list(workloads: list) -> None:
    from rich.table import Table

    from mpsup.render import safe

    t = Table(title=f"{len(workloads)} workloads")
    for col in ("name", "kind", "count", "dtype", "shape", "tags", "source"):
        t.add_column(col, overflow="fold")
    for w in workloads:
        shape = ", ".join(f"{k}={v}" for k, v in w.params.items() if k not in ("kernel", "method"))
        t.add_row(*(safe(cell) for cell in (w.name, w.kind, w.count, w.dtype, shape, ",".join(w.tags), w.source)))
    stdout_console.print(t)


class ReportFormat(StrEnum):
    terminal = "terminal"
    markdown = "markdown"
    json = "json"
    html = "html"


@app.command()
def report(
    paths: Annotated[list[Path] | None, typer.Argument(help="Run records or folders of them (several machines).")] = None,
    run: Annotated[str | None, typer.Option("--run", help="A stored run id.")] = None,
    list_runs: Annotated[bool, typer.Option("--list", help="List stored runs.")] = False,
    baseline: Annotated[str | None, typer.Option("--baseline", help="Id of a single run to use as baseline.")] = None,
    candidate: Annotated[str | None, typer.Option("--candidate", help="Id of a single run to use as candidate.")] = None,
    fmt: Annotated[ReportFormat, typer.Option("--format", help="terminal, markdown, json or html.")] = ReportFormat.terminal,
    output: Annotated[Path | None, typer.Option("-o", "--output", help="Write the report to FILE.")] = None,
    threshold: Annotated[float, typer.Option("--threshold", min=0.0, max=1.0, help="Practical change floor.")] = 0.03,
    seed: Annotated[int, typer.Option("--seed", help="Bootstrap seed (same record, same report).")] = 0,
    fail_on_regression: Annotated[bool, typer.Option("--fail-on-regression", help="Exit 1 on regression, 3 if inconclusive.")] = False,
    as_json: JsonOpt = False,
) -> None:
    """Say, with confidence intervals, whether the candidate PyTorch helps."""
    from mpsup.report.command import ReportRequest, run_report

    request = ReportRequest(paths=paths or [], run=run, list_runs=list_runs, baseline=baseline, candidate=candidate,
                            fmt="json" if as_json else fmt.value, output=output, threshold=threshold, seed=seed,
                            fail_on_regression=fail_on_regression)
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
    channel: Annotated[ChannelChoice, typer.Option("--channel", help="test (release candidates), nightly, or stable.")] = ChannelChoice.test,
    index_url: Annotated[str | None, typer.Option("--index-url", help="Read this index instead (https, file, or loopback http).")] = None,
    version: Annotated[str | None, typer.Option("--version", help="Install exactly this torch version.")] = None,
    with_: Annotated[str | None, typer.Option("--with", help="Companion packages to match, e.g. torchvision,torchaudio.")] = None,
    python: PythonOpt = None,
    in_place: Annotated[bool, typer.Option("--in-place", help="Upgrade the --python environment itself (its package list is saved first).")] = False,
    clone: Annotated[bool, typer.Option("--clone", help="Also install your environment's other packages in the new one.")] = False,
    installer: Annotated[InstallerChoice, typer.Option("--installer", help="auto (uv when present), pip or uv.")] = InstallerChoice.auto,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Show the plan and stop.")] = False,
    yes: Annotated[bool, typer.Option("--yes", "-y", help="Do not ask before installing (required without a terminal).")] = False,
    allow_root: Annotated[bool, typer.Option("--allow-root", help="On macOS, allow running as root.")] = False,
    list_envs: Annotated[bool, typer.Option("--list", help="Show the recorded candidate environments.")] = False,
    remove: Annotated[str | None, typer.Option("--remove", help="Delete a recorded environment (by version or name).")] = None,
    rollback: Annotated[bool, typer.Option("--rollback", help="Put back the packages saved before an --in-place upgrade.")] = False,
    allow_unhashed: Annotated[bool, typer.Option("--allow-unhashed", help="Accept a wheel the index gives no sha256 for "
                                                 "(its hash is computed from the download and recorded).")] = False,
    as_json: JsonOpt = False,
) -> None:
    """Install the PyTorch release candidate (or nightly, or newest stable) beside your environment, safely."""
    from mpsup.envs import execute, records
    from mpsup.envs import render as env_render
    from mpsup.envs.plan import InstallRequest, NothingToDo, current_euid, is_root_refused, plan_install
    from mpsup.render import safe

    chosen = [flag for flag, on in (("--list", list_envs), ("--remove", remove is not None), ("--rollback", rollback)) if on]
    if len(chosen) > 1:
        raise UserError(f"{' and '.join(chosen)} cannot be combined")
    if in_place and clone:
        raise UserError("--clone makes a new environment; it cannot be combined with --in-place")
    if list_envs:
        docs, problems = records.scan_environments()
        for problem in problems:
            stderr_console.print(f"[yellow]warning:[/] skipped {safe(problem)}", highlight=False, soft_wrap=True)
        if as_json:
            emit_json(docs)
        else:
            env_render.render_environments(docs, stdout_console)
        return
    if remove is not None:
        removed = records.remove_environment(remove)
        if as_json:
            emit_json({"status": "removed", "environments": removed})
        else:
            for doc in removed:
                what = "record (your environment itself was not touched)" if doc.get("mode") == "in-place" else "environment"
                stdout_console.print(safe(f"Removed the {what} {doc['name']} (torch {doc.get('torch_version')})"), highlight=False)
        return
    if is_root_refused(sys.platform, current_euid(), allow_root):
        raise UserError("running as root on macOS would leave root-owned files in your environments; run as yourself, or pass --allow-root")
    target = python or Path(sys.executable)
    if rollback:
        _confirm_or_refuse(yes, safe(f"Put back the packages saved for {target}?"))
        result = execute.rollback(target)
        if as_json:
            emit_json(result.to_json())
        else:
            stdout_console.print(safe(f"Restored {target}: reinstalled {len(result.reinstalled)}, removed {len(result.removed)} packages "
                                      f"(saved set {result.saved})"), highlight=False, soft_wrap=True)
        return
    companions = tuple(c.strip() for c in (with_ or "").split(",") if c.strip())
    request = InstallRequest(python=target, channel=channel.value, index_url=index_url, version=version, companions=companions,
                             in_place=in_place, clone=clone, installer=installer.value, allow_unhashed=allow_unhashed,
                             dry_run=dry_run, yes=yes, as_json=as_json, allow_root=allow_root)
    with stderr_console.status(f"Looking for torch on the {channel.value} channel..."):
        plan = plan_install(request)
    if isinstance(plan, NothingToDo):
        if as_json:
            emit_json(plan.to_json())
        else:
            stdout_console.print(safe(plan.message), highlight=False, soft_wrap=True)
        return
    env_render.render_plan(plan, stderr_console if as_json else stdout_console)
    if dry_run:
        if as_json:
            emit_json({"status": "planned", "dry_run": True, "plan": plan.to_json()})
        return
    _confirm_or_refuse(yes, safe(f"Install torch {plan.to_version} into {plan.prefix}?"))
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
    try:
        app()
    except (UserError, OperationFailed) as exc:
        error_line(str(exc))
        if _wants_json(sys.argv[1:]):
            # --json promises one JSON document on stdout: a failure is one too, for scripts to read.
            emit_json({"status": "error", "message": str(exc), "exit_code": exc.exit_code})
        sys.exit(exc.exit_code)


def _wants_json(args: list[str]) -> bool:
    from itertools import pairwise

    return "--json" in args or "--format=json" in args or ("--format", "json") in pairwise(args)
