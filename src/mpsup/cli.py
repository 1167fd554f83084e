"""The command line: parse options, call one core function, render what it returns."""

from __future__ import annotations

import sys
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any

import typer
from typer.core import TyperCommand, TyperGroup

from mpsup.bench.policy import DEFAULT_BUDGET_S
from mpsup.console import safe, stderr_console, stdout_console
from mpsup.stats import PRACTICAL_THRESHOLD


class _FlagsShowNoType:
    """Help shows no `<bool>` after a flag, which takes no value: typer (which vendors click as typer._click)
    prints each option's type in help as `<type>` (TyperOption.display_type_rich), flags included, and
    `--help` too, which the vendored click builds itself (Command.get_help_option), out of reach of any
    option declared here. Help prints a metavar, when set, instead of the type: an empty one on every flag
    a command has, `--help` included, set here once rather than per option."""

    def get_params(self, ctx: Any) -> list[Any]:
        params: list[Any] = super().get_params(ctx)  # type: ignore[misc]
        for param in params:
            if getattr(param, "is_flag", False) and param.metavar is None:
                param.metavar = ""
            elif getattr(param, "nargs", 1) == -1 and param.param_type_name == "argument":
                # No `<list[str]>` after a repeated argument: the usage line's `[ENV]...` says it already.
                param.display_type_rich = lambda ctx: None
        return params


class _Group(_FlagsShowNoType, TyperGroup):
    pass


class _Command(_FlagsShowNoType, TyperCommand):
    pass


app = typer.Typer(
    cls=_Group,
    add_completion=False,
    no_args_is_help=True,
    help="Does the next PyTorch make your model faster on your Mac's GPU? Check, install, measure, report.",
    pretty_exceptions_enable=False,
)

JsonOpt = Annotated[bool, typer.Option("--json", help="Print one JSON document on stdout.")]
PythonOpt = Annotated[
    Path | None, typer.Option("--python", help="Target interpreter (default: the one running mpsup).")
]
AllowCpuFallbackOpt = Annotated[
    bool,
    typer.Option(
        "--allow-cpu-fallback",
        help="Run ops without an MPS kernel on the CPU (PYTORCH_ENABLE_MPS_FALLBACK=1); default: they fail.",
    ),
]


class DeviceChoice(StrEnum):
    mps = "mps"
    cuda = "cuda"
    cpu = "cpu"


# Options several commands take with the same meaning: declared once, so their help cannot drift apart.
DeviceOpt = Annotated[
    DeviceChoice | None, typer.Option("--device", help="mps, cuda or cpu (default: mps on a Mac, else cpu).")
]
TokensOpt = Annotated[
    str | None, typer.Option("--tokens", help="Decode and prefill sizes (default: 1,512; 1,16 on cpu).")
]
ModelOpt = Annotated[
    Path | None, typer.Option("--model", help="A checkpoint, model folder, .pt2 export, or module:function.")
]
TrainOpt = Annotated[
    str | None,
    typer.Option(
        "--train",
        help="Add a training step phase: lora (the default: rank 8 on q_proj and v_proj, needs peft) or full.",
    ),
]
TrainBatchOpt = Annotated[
    int | None, typer.Option("--train-batch", help="--train: samples a step (default 4; a UNet's 1).")
]
TrainTokensOpt = Annotated[
    int | None, typer.Option("--train-tokens", help="--train: tokens per sample (default 512; 64 on cpu).")
]
OptimizerOpt = Annotated[
    str | None,
    typer.Option(
        "--optimizer", help="--train: adamw (default), adam, sgd, adafactor, rmsprop, adagrad; :fused, :foreach..."
    ),
]
# Options whose value may be left out, and what they then take: `--train` alone is `--train lora`.
OPTIONAL_VALUES = {"--train": "lora"}


def with_optional_values(args: list[str]) -> list[str]:
    """The command line with each option of OPTIONAL_VALUES given its value where it has none (it ends the line,
    or another option follows): click takes every option's value from the next word."""
    out: list[str] = []
    for i, arg in enumerate(args):
        out.append(arg)
        if arg in OPTIONAL_VALUES and (i + 1 == len(args) or args[i + 1].startswith("-")):
            out.append(OPTIONAL_VALUES[arg])
    return out


def _print_version(value: bool) -> None:
    if value:
        from mpsup import __version__

        stdout_console.print(f"mpsup {__version__}", highlight=False)
        raise typer.Exit()


@app.callback()
def _root(
    version: Annotated[
        bool, typer.Option("--version", help="Print mpsup's version and exit.", callback=_print_version, is_eager=True)
    ] = False,
) -> None:
    """mpsup: measure whether a PyTorch upgrade helps your model on your Mac's GPU."""
    from mpsup import waits
    from mpsup.console import message_line

    # A wait past a few seconds (an interpreter, a worker, an index page) says what it waits for on stderr.
    waits.set_notice(lambda line: message_line(stderr_console, safe(line)))


@app.command(cls=_Command)
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
    from mpsup.doctor import command
    from mpsup.doctor.render import render_result

    result = command.run(command.DoctorRequest(python, save_snapshot, from_snapshot), busy=stderr_console.status)
    render_result(result, as_json=as_json, verbose=verbose)
    raise typer.Exit(result.exit_code)


@app.command(cls=_Command)
def bench(
    device: DeviceOpt = None,
    budget: Annotated[
        float,
        # Checked in command.check_budget, not by click's range: its refusal is a usage box, not one line,
        # and nan passes any range.
        typer.Option("--budget", help="Seconds per workload, 0.001-3600 (both environments together when paired)."),
    ] = DEFAULT_BUDGET_S,
    only: Annotated[
        str | None, typer.Option("--only", help="Glob(s) on name, kind, part or tag; comma-separated; re:REGEX.")
    ] = None,
    python: PythonOpt = None,
    tokens: TokensOpt = None,
    threads: Annotated[
        int | None, typer.Option("--threads", min=1, help="CPU threads in the worker (default: torch's own; recorded).")
    ] = None,
    affinity: Annotated[
        str | None,
        typer.Option("--affinity", help="Pin the workers: auto (one CPU for cuda), none, or CPUs such as 3 or 2-3."),
    ] = None,
    list_only: Annotated[bool, typer.Option("--list", help="Print the workloads without running them.")] = False,
    smoke: Annotated[bool, typer.Option("--smoke/--no-smoke", help="Run the feature smoke tests first.")] = True,
    baseline: Annotated[
        str | None, typer.Option("--baseline", help="Baseline interpreter or venv (default: --python).")
    ] = None,
    candidate: Annotated[
        str | None,
        typer.Option("--candidate", help="Candidate interpreter, venv, or recorded version; mlx:PYTHON runs MLX."),
    ] = None,
    aa: Annotated[bool, typer.Option("--aa", help="Pair the baseline with itself: the noise floor.")] = False,
    details: Annotated[
        bool, typer.Option("--details", help="Print every table (each workload, each smoke test), not one screen.")
    ] = False,
    model: ModelOpt = None,
    resolution: Annotated[
        str | None, typer.Option("--resolution", help="Diffusion models: image size, e.g. 1024 or 832x480.")
    ] = None,
    dtype: Annotated[
        str | None, typer.Option("--dtype", help="Override the checkpoint's dtype: bf16, fp16, fp32.")
    ] = None,
    compile_too: Annotated[
        bool,
        typer.Option(
            "--compile", help="Also time the whole model (phases, .pt2, module:function) under torch.compile."
        ),
    ] = False,
    whole: Annotated[
        bool,
        typer.Option("--whole/--layers-only", help="Run a Transformers or Diffusers model whole (prefill, decode...)."),
    ] = True,
    cache: Annotated[
        int | None, typer.Option("--cache", help="Decode: tokens in the KV cache (default: the prefill length).")
    ] = None,
    depth: Annotated[
        int | None, typer.Option("--depth", help="Whole model: build this many blocks (default: all that fit).")
    ] = None,
    real_weights: Annotated[
        bool, typer.Option("--real-weights", help="Whole model: load the checkpoint's weights (default: random).")
    ] = False,
    frames: Annotated[
        int | None,
        typer.Option("--frames", help="A video VAE: frames to decode and encode (phases and layers), e.g. 81."),
    ] = None,
    allow_cpu_fallback: AllowCpuFallbackOpt = False,
    mlx_bits: Annotated[
        int | None, typer.Option("--mlx-bits", help="The MLX side's weights quantised to 4 or 8 bits (group 64).")
    ] = None,
    ops: Annotated[
        bool,
        typer.Option(
            "--ops/--no-ops",
            help="Paired, a model run whole: also time each op of each phase alone, to say which op moved.",
        ),
    ] = True,
    numerics: Annotated[
        bool,
        typer.Option(
            "--numerics/--no-numerics",
            help="Paired: judge each build's answers against float64 on the CPU (same answers?).",
        ),
    ] = True,
    reference: Annotated[
        Path | None,
        typer.Option("--reference", help="The interpreter that computes the float64 truth (default: the baseline's)."),
    ] = None,
    reference_share: Annotated[
        float,
        typer.Option(
            "--reference-share",
            min=0.01,
            max=10.0,
            help="After the phases (always judged), the float64 reference's time: at most this share of the run's.",
        ),
    ] = 0.25,
    visits: Annotated[
        int | None,
        typer.Option(
            "--visits",
            min=2,
            max=20,
            help="Paired, measured whole (phases only, or against MLX): fresh process pairs (default 6, the "
            "fewest whose medians bound a 95% interval; fewer is a quicker look, its interval over rounds).",
        ),
    ] = None,
    energy: Annotated[
        bool,
        typer.Option(
            "--energy",
            help="Read the device's energy meter: paired phases get energy windows after their timed rounds.",
        ),
    ] = False,
    train: TrainOpt = None,
    train_batch: TrainBatchOpt = None,
    train_tokens: TrainTokensOpt = None,
    optimizer: OptimizerOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Smoke-test new MPS features and time the bundled suite, or your --model whole and by layer."""
    from mpsup.bench.command import BenchRequest
    from mpsup.bench.terminal import run_and_render

    request = BenchRequest(
        device=device.value if device else None,
        budget=budget,
        only=only,
        python=python,
        tokens=tokens,
        threads=threads,
        affinity=affinity,
        smoke=smoke,
        baseline=baseline,
        candidate=candidate,
        aa=aa,
        model=model,
        dtype=dtype,
        compile_too=compile_too,
        resolution=resolution,
        whole=whole,
        cache=cache,
        depth=depth,
        real_weights=real_weights,
        frames=frames,
        allow_cpu_fallback=allow_cpu_fallback,
        mlx_bits=mlx_bits,
        ops=ops,
        numerics=numerics,
        reference=reference,
        reference_share=reference_share,
        visits=visits,
        energy=energy,
        train=train,
        train_batch=train_batch,
        train_tokens=train_tokens,
        optimizer=optimizer,
    )
    raise typer.Exit(run_and_render(request, list_only=list_only, as_json=as_json, details=details))


@app.command(cls=_Command)
def report(
    paths: Annotated[
        list[Path] | None, typer.Argument(help="Run records or folders of them (several machines).")
    ] = None,
    run: Annotated[str | None, typer.Option("--run", help="A stored run id.")] = None,
    list_runs: Annotated[bool, typer.Option("--list", help="List stored runs.")] = False,
    baseline: Annotated[str | None, typer.Option("--baseline", help="Id of a single run to use as baseline.")] = None,
    candidate: Annotated[
        str | None, typer.Option("--candidate", help="Id of a single run to use as candidate.")
    ] = None,
    fmt: Annotated[
        str, typer.Option("--format", metavar="<format>", help="terminal, markdown (or md), json or html.")
    ] = "terminal",
    output: Annotated[
        str | None, typer.Option("-o", "--output", metavar="<path>", help="Write the report to FILE.")
    ] = None,
    threshold: Annotated[
        float, typer.Option("--threshold", min=0.0, max=1.0, help="Practical change floor.")
    ] = PRACTICAL_THRESHOLD,
    seed: Annotated[int, typer.Option("--seed", help="Bootstrap seed (same record, same report).")] = 0,
    fail_on_regression: Annotated[
        bool, typer.Option("--fail-on-regression", help="Exit 1 on regression, 3 if inconclusive.")
    ] = False,
    upstream: Annotated[
        bool,
        typer.Option("--upstream", help="An issue body for PyTorch with a standalone repro (-o NAME.py: the script)."),
    ] = False,
    with_paths: Annotated[
        bool, typer.Option("--with-paths", help="--upstream: keep paths and environment names (left out by default).")
    ] = False,
    details: Annotated[
        bool,
        typer.Option("--details", help="Every workload's row, not one screen (the terminal; other formats have all)."),
    ] = False,
    as_json: JsonOpt = False,
) -> None:
    """Say, with confidence intervals, whether the candidate PyTorch helps."""
    from mpsup.report.command import ReportRequest, build, console_messages, deliver
    from mpsup.safe_files import output_path

    request = ReportRequest(
        paths=paths or [],
        run=run,
        list_runs=list_runs,
        baseline=baseline,
        candidate=candidate,
        fmt=fmt,
        as_json=as_json,
        output=output_path(output, "report"),  # as typed: a trailing slash is refused, not dropped
        threshold=threshold,
        seed=seed,
        fail_on_regression=fail_on_regression,
        upstream=upstream,
        keep_paths=with_paths,
        details=details,
    )
    result = build(request, *console_messages(stderr_console))
    deliver(result, request, stdout_console, stderr_console)
    raise typer.Exit(result.exit_code)


ChannelChoice = StrEnum("ChannelChoice", ["test", "nightly", "stable"])
InstallerChoice = StrEnum("InstallerChoice", ["auto", "pip", "uv"])


@app.command("install-rc", cls=_Command)
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
        bool,
        typer.Option("--in-place", help="Upgrade the --python environment itself (its package list is saved first)."),
    ] = False,
    clone: Annotated[
        bool, typer.Option("--clone", help="Also install your environment's other packages in the new one.")
    ] = False,
    installer: Annotated[
        InstallerChoice, typer.Option("--installer", help="auto (uv when present), pip or uv.")
    ] = InstallerChoice.auto,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Show the plan and stop.")] = False,
    yes: Annotated[
        bool, typer.Option("--yes", "-y", help="Do not ask before installing (required without a terminal).")
    ] = False,
    allow_root: Annotated[bool, typer.Option("--allow-root", help="On macOS, allow running as root.")] = False,
    list_envs: Annotated[bool, typer.Option("--list", help="Show the recorded candidate environments.")] = False,
    remove: Annotated[
        str | None, typer.Option("--remove", help="Delete a recorded environment (by version or name).")
    ] = None,
    rollback: Annotated[
        bool, typer.Option("--rollback", help="Put back the packages saved before an --in-place upgrade.")
    ] = False,
    allow_unhashed: Annotated[
        bool,
        typer.Option(
            "--allow-unhashed",
            help="Accept a wheel the index gives no sha256 for (its hash is computed from the download and recorded).",
        ),
    ] = False,
    mlx: Annotated[
        bool, typer.Option("--mlx", help="Make an MLX environment (mlx, mlx-lm) instead, for bench --candidate mlx.")
    ] = False,
    as_json: JsonOpt = False,
) -> None:
    """Install the PyTorch release candidate (or nightly, or newest stable) beside your environment, safely."""
    if mlx:
        _install_mlx(python, index_url, yes=yes, dry_run=dry_run, as_json=as_json, torch_options=(version, with_))
        return
    from mpsup.envs import command
    from mpsup.envs.plan import InstallRequest
    from mpsup.envs.render import render_result, terminal_hooks

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
    result = command.run(req, terminal_hooks(as_json))
    render_result(result, as_json=as_json)
    raise typer.Exit(result.exit_code)


def _install_mlx(
    python: Path | None,
    index_url: str | None,
    *,
    yes: bool,
    dry_run: bool,
    as_json: bool,
    torch_options: tuple[str | None, str | None],
) -> None:
    from mpsup.console import emit_json
    from mpsup.envs import mlx_env
    from mpsup.errors import UserError

    if any(torch_options):
        raise UserError("--mlx makes an MLX environment: --version and --with choose torch, so leave them out")
    base = python or Path(sys.executable)
    what = f"a venv from {base} with {' and '.join(mlx_env.packages())}, as {mlx_env.NAME} under mpsup's envs"
    if dry_run:
        stdout_console.print(safe(f"Would make {what}."), highlight=False)
        return
    if not yes and not (sys.stdin.isatty() and typer.confirm(f"Make {what}?")):
        raise UserError("--mlx: not confirmed (pass --yes to make it without a question)")
    with stderr_console.status("installing mlx and mlx-lm, then building a tiny model with them"):
        result = mlx_env.install_mlx(base, index_url=index_url)
    if as_json:
        emit_json(result.to_json())
    else:
        facts = result.facts
        stdout_console.print(
            safe(
                f"MLX {facts.get('mlx_version')} and mlx-lm {facts.get('mlx_lm_version')} are installed and verified "
                f"in {result.prefix} ({facts.get('device')}); bench with `--candidate {result.name}`"
            ),
            highlight=False,
        )


@app.command(cls=_Command)
def bisect(
    environments: Annotated[
        list[str] | None,
        typer.Argument(
            metavar="ENV",
            help="Interpreters, venvs or recorded versions, in order: the good one first, the bad last. "
            "With --nightlies: GOOD BAD, nightly versions (2.16.0.dev20261101) or dates (20261101).",
        ),
    ] = None,
    only: Annotated[
        str | None, typer.Option("--only", help="The workload(s) that regressed: glob(s) as bench --only takes them.")
    ] = None,
    model: ModelOpt = None,
    device: DeviceOpt = None,
    budget: Annotated[
        float, typer.Option("--budget", help="Seconds per workload and step (doubled for a step measured again).")
    ] = DEFAULT_BUDGET_S,
    tokens: TokensOpt = None,
    dtype: Annotated[
        str | None, typer.Option("--dtype", help="--model: override the checkpoint's dtype: bf16, fp16, fp32.")
    ] = None,
    resolution: Annotated[
        str | None, typer.Option("--resolution", help="--model, diffusion: image size, e.g. 1024 or 832x480.")
    ] = None,
    threads: Annotated[
        int | None, typer.Option("--threads", min=1, help="CPU threads in the workers (recorded).")
    ] = None,
    threshold: Annotated[
        float, typer.Option("--threshold", help="Practical change floor, as report takes it.")
    ] = PRACTICAL_THRESHOLD,
    resume: Annotated[
        bool, typer.Option("--resume", help="Continue the bisect last interrupted (or this one's journal).")
    ] = False,
    fresh: Annotated[bool, typer.Option("--fresh", help="Forget this bisect's journal and measure again.")] = False,
    nightlies: Annotated[
        bool,
        typer.Option(
            "--nightlies",
            help="Bisect over the nightly builds published from GOOD to BAD, each installed into a throwaway "
            "environment when first probed.",
        ),
    ] = False,
    index_url: Annotated[
        str | None,
        typer.Option("--index-url", help="--nightlies: read this index (default: install-rc's nightly channel)."),
    ] = None,
    python: Annotated[
        Path | None,
        typer.Option("--python", help="--nightlies: make the environments from this Python (default: mpsup's)."),
    ] = None,
    keep_envs: Annotated[
        bool, typer.Option("--keep-envs", help="--nightlies: keep the installed builds at the end (say where).")
    ] = False,
    allow_cpu_fallback: AllowCpuFallbackOpt = False,
    numerics: Annotated[
        bool,
        typer.Option("--numerics", help="Find the first build whose answers got less accurate against float64."),
    ] = False,
    train: TrainOpt = None,
    train_batch: TrainBatchOpt = None,
    train_tokens: TrainTokensOpt = None,
    optimizer: OptimizerOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Find the first environment (torch build) where a workload got slower, by paired steps against the good one."""
    from mpsup.bisect.request import BisectRequest
    from mpsup.bisect.terminal import run_and_render

    request = BisectRequest(
        environments=tuple(environments or ()),
        only=only,
        model=model,
        device=device.value if device else None,
        budget=budget,
        threads=threads,
        tokens=tokens,
        dtype=dtype,
        resolution=resolution,
        threshold=threshold,
        resume=resume,
        fresh=fresh,
        nightlies=nightlies,
        index_url=index_url,
        python=python,
        keep_envs=keep_envs,
        allow_cpu_fallback=allow_cpu_fallback,
        numerics=numerics,
        train=train,
        train_batch=train_batch,
        train_tokens=train_tokens,
        optimizer=optimizer,
    )
    raise typer.Exit(run_and_render(request, as_json))


def main() -> None:
    from mpsup.exits import run_app

    sys.argv[1:] = with_optional_values(sys.argv[1:])
    run_app(app)
