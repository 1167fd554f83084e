"""`mpsup bench` as two calls: prepare(BenchRequest) chooses the workloads and environments; run(plan) measures them."""

from __future__ import annotations

import inspect
import math
import os
import re
import signal
import sys
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any, cast

from mpsup.bench.events import CensusStarted
from mpsup.bench.numerics import DEFAULT_SHARE
from mpsup.bench.policy import DEFAULT_BUDGET_S
from mpsup.errors import UserError
from mpsup.host.affinity import Affinity, choose
from mpsup.model.config import MAX_FRAMES
from mpsup.model.training import TrainOptions
from mpsup.progress import Progress, ignore
from mpsup.workloads import Workload, select

DTYPES = ("bf16", "fp16", "fp32")
# Seconds per workload. The floor: under a millisecond not even one sample fits. The ceiling, an hour:
# far more than any workload needs to reach its rounds (a multi-second model forward takes minutes),
# while the bundled suite would already run for days; past it lie only typos and `inf`, which would
# reach the sizing of the rounds and end the run in an OverflowError.
BUDGET_RANGE_S = (0.001, 3600.0)
NOT_PINNED = Affinity(None, "not pinned")
CENSUS_DEVICE = "meta"
CENSUS_LIBRARIES = ("transformers", "diffusers")
# Seconds per phase: the meta device builds and runs even a 70B model's every block in seconds; far past
# that, something hangs, and --list must still answer.
CENSUS_TIMEOUT_S = 300.0


@dataclass(frozen=True)
class BenchRequest:
    device: str | None = None
    budget: float = DEFAULT_BUDGET_S
    only: str | None = None
    python: Path | None = None
    tokens: str | None = None
    threads: int | None = None
    smoke: bool = True
    baseline: str | None = None
    candidate: str | None = None
    aa: bool = False
    model: Path | None = None
    dtype: str | None = None
    compile_too: bool = False
    resolution: str | None = None
    affinity: str | None = None  # auto, none, or a CPU list (host/affinity.py)
    whole: bool = True  # run a Transformers/Diffusers model whole (phases), not only its layers
    cache: int | None = None  # decode's KV-cache length
    depth: int | None = None  # whole model: blocks to build (default: all that fit)
    real_weights: bool = False
    frames: int | None = None  # a video VAE's frames, decoded and encoded whole
    allow_cpu_fallback: bool = False  # ops without an MPS kernel run on the CPU (PYTORCH_ENABLE_MPS_FALLBACK=1)
    mlx_bits: int | None = None  # an MLX side's weights quantised (4 or 8 bits, group size 64)
    ops: bool = True  # paired, a model run whole: each phase's ops replayed alone (model/op_replay.py)
    numerics: bool = True  # paired torch runs: each build's answers against float64 (bench/numerics.py)
    reference: Path | None = None  # the interpreter that computes the float64 truth (default: the baseline's)
    reference_share: float = DEFAULT_SHARE  # of the run's time so far, the most the float64 reference may take
    visits: int | None = None  # paired and measured whole: fresh process pairs (default: the policy's phase_visits)
    energy: bool = False  # read the energy meter: idle power, then energy windows after each paired phase
    train: str | None = None  # --train: lora or full, a training step as one more phase (model/training.py)
    train_batch: int | None = None
    train_tokens: int | None = None
    optimizer: str | None = None  # torch.optim's name, optionally :for-loop, :foreach or :fused


@dataclass(frozen=True)
class BenchPlan:
    request: BenchRequest
    device: str
    workloads: tuple[Workload, ...]
    model_doc: dict[str, Any] | None
    not_measured: tuple[dict[str, Any], ...] = ()
    affinity: Affinity = NOT_PINNED


@dataclass(frozen=True)
class BenchResult:
    record: dict[str, Any]
    path: Path | None
    exit_code: int


def default_device() -> str:
    return "mps" if sys.platform == "darwin" else "cpu"


def parse_tokens(text: str | None) -> tuple[int, ...] | None:
    if text is None:
        return None
    try:
        values = tuple(int(t) for t in text.split(",") if t.strip())
    except ValueError:
        raise UserError(f"--tokens {text!r}: expected comma-separated positive integers, e.g. 1,512") from None
    if not values or any(v <= 0 or v > 1_000_000 for v in values):
        raise UserError(f"--tokens {text!r}: expected comma-separated positive integers, e.g. 1,512")
    return values


def check_budget(budget: float) -> float:
    """The budget as given, or a one-line refusal: nan and inf included (no comparison catches nan)."""
    low, high = BUDGET_RANGE_S
    if not (math.isfinite(budget) and low <= budget <= high):
        raise UserError(f"--budget {budget:g}: expected seconds per workload, from {low:g} to {high:g}")
    return budget


def parse_resolution(text: str | None) -> int | tuple[int, int] | None:
    """`1024` or `832x480` (width x height, pixels) for a diffusion model's activations."""
    if text is None:
        return None
    parts = text.lower().split("x")
    # ASCII digits, at most five: isdigit() takes '²' (int() does not) and int() refuses 4,300 digits and more.
    if len(parts) > 2 or not all(re.fullmatch(r"[0-9]{1,5}", p.strip()) and 0 < int(p) <= 16384 for p in parts):
        raise UserError(f"--resolution {text!r}: expected pixels as SIDE or WIDTHxHEIGHT, e.g. 1024 or 832x480")
    return int(parts[0]) if len(parts) == 1 else (int(parts[0]), int(parts[1]))


def prepare(req: BenchRequest) -> BenchPlan:
    """Choose the workloads: the bundled suite, a checkpoint's layers, or a whole model end to end."""
    check_budget(req.budget)
    cpus = os.cpu_count() or 1
    if req.threads is not None and not 1 <= req.threads <= cpus:
        # More threads than the machine has CPUs measures contention, and 100,000 cannot even start.
        raise UserError(f"--threads {req.threads}: expected 1 to {cpus}, the CPUs this machine has")
    device = req.device or default_device()
    affinity = choose(req.affinity, device)
    envs, _ = _environments(req)  # here, so `--list` refuses the environments a run would refuse (both exit 2)
    mlx = any(e.stack == "mlx" for e in envs)
    _check_mlx(req, mlx)
    if req.dtype is not None and req.dtype not in DTYPES:
        raise UserError(f"--dtype {req.dtype!r}: expected bf16, fp16 or fp32")
    train = _train_options(req, device)
    from mpsup.bench.suite import build_suite, default_tokens

    if req.model is not None:
        from mpsup.model.sources import WholeModel, open_model

        for flag, value, most in (
            ("--cache", req.cache, 1_000_000),
            ("--depth", req.depth, 1_000_000),
            ("--frames", req.frames, MAX_FRAMES),
        ):
            if value is not None and not 1 <= value <= most:
                raise UserError(f"{flag} {value}: expected a whole number from 1 to {most}")
        model = open_model(
            req.model,
            tokens=parse_tokens(req.tokens) or default_tokens(device),
            dtype=req.dtype,
            resolution=parse_resolution(req.resolution),
            compile_too=req.compile_too,
            whole=WholeModel(
                run=req.whole,
                cache=req.cache,
                depth=req.depth,
                real_weights=req.real_weights,
                environments=2 if (req.candidate or req.aa) else 1,
                frames=req.frames,
                train=train,
            ),
            tokens_stated=req.tokens is not None,
        )
        # A whole model is one workload (or two, with --compile): --only selects among layers only.
        chosen = select(list(model.workloads), req.only) if req.only and not model.end_to_end else model.workloads
        if mlx:
            chosen = mlx_phases(req.model, model.doc, list(chosen))
        return BenchPlan(req, device, tuple(chosen), model.doc, model.not_measured, affinity)

    suite = select(build_suite(device, parse_tokens(req.tokens)), req.only)
    return BenchPlan(req, device, tuple(suite), None, affinity=affinity)


def _train_options(req: BenchRequest, device: str) -> TrainOptions | None:
    """--train and its options, checked; the sequence length filled in with the device's default."""
    from mpsup.model.training import check_train, train_tokens

    opts = check_train(req.train, req.train_batch, req.train_tokens, req.optimizer, req.model is not None)
    if opts is not None and not req.whole:
        raise UserError("--train runs the model whole (a training step is a phase): leave out --layers-only")
    return replace(opts, tokens=opts.tokens or train_tokens(device)) if opts is not None else None


MLX_BITS = (4, 8)


def _check_mlx(req: BenchRequest, mlx: bool) -> None:
    """What an MLX side can be asked for: a model run whole (the bundled suite is torch ops), no torch.compile."""
    if req.mlx_bits is not None and not mlx:
        raise UserError(f"--mlx-bits {req.mlx_bits}: neither side is MLX (name one as --candidate mlx:PYTHON)")
    if req.mlx_bits is not None and req.mlx_bits not in MLX_BITS:
        raise UserError(f"--mlx-bits {req.mlx_bits}: expected 4 or 8 (MLX's affine quantisation, group size 64)")
    if not mlx:
        return
    if req.model is None:
        raise UserError("an MLX side runs your model whole: give --model PATH (the bundled suite is torch ops)")
    if req.compile_too:
        raise UserError("--compile: torch.compile has no MLX counterpart; leave it out when a side is MLX")


def mlx_phases(path: Path, doc: dict[str, Any] | None, workloads: list[Workload]) -> list[Workload]:
    """The workloads both stacks can run: a Transformers model's phases. A model MLX cannot build from a
    config.json (a Diffusers pipeline, a file without one) is refused in one line before anything runs."""
    phases = [w for w in workloads if w.kind == "model_phase" and w.params.get("library") == "transformers"]
    if phases:
        return phases
    fmt = str((doc or {}).get("format") or "")
    if fmt == "diffusers" or any(w.params.get("library") == "diffusers" for w in workloads):
        raise UserError(
            f"--model {path}: a Diffusers pipeline; MLX has no equivalent here (mlx_lm runs language models)"
        )
    raise UserError(
        f"--model {path}: no config.json with a model_type beside the weights, so MLX cannot build it "
        "(mlx_lm builds a language model from its config.json)"
    )


@dataclass(frozen=True)
class PhaseCensus:
    """One phase's op census as the worker counted it on the meta device, or None and the one-line reason."""

    census: dict[str, Any] | None
    reason: str = ""


def census_phases(plan: BenchPlan) -> list[Workload]:
    """The whole-model phases a census can be taken of: Transformers and Diffusers models, built from their
    config. A .pt2 export or a module:function is loaded by the user's code, which the list never runs."""
    return [w for w in plan.workloads if w.kind == "model_phase" and w.params.get("library") in CENSUS_LIBRARIES]


def list_census(plan: BenchPlan, progress: Progress = ignore) -> dict[str, PhaseCensus]:
    """`bench --list`: each phase's op census by workload name, from ONE worker in the baseline environment
    (its transformers and diffusers decide the ops). Never raises for the census's sake: a phase that
    cannot be counted, or a worker that cannot start, is a reason on each phase, and the list stands."""
    phases = census_phases(plan)
    out: dict[str, PhaseCensus] = {
        # The ops the eager model asks for are the eager phase's census; what inductor fuses them into
        # is decided by compiling, which a list does not do.
        w.name: PhaseCensus(None, "not taken under torch.compile: the eager phase's census lists the model's ops")
        for w in phases
        if w.params.get("compile")
    }
    eager = [w for w in phases if not w.params.get("compile")]
    if not eager:
        return out
    from mpsup.bench.workerproc import NoTorch, WorkerDied, WorkerProcess, last_line, worker_env

    try:
        python = _baseline_python(plan.request)
    except UserError as exc:
        return {**out, **{w.name: PhaseCensus(None, str(exc)) for w in eager}}
    if (plan.request.baseline or "").startswith("mlx:"):
        return {
            **out,
            **{w.name: PhaseCensus(None, "the baseline is MLX: the census counts torch's ops") for w in eager},
        }
    progress(CensusStarted(len(eager), CENSUS_DEVICE, str(python)))
    worker: WorkerProcess | None = None
    failure = ""
    try:
        worker = WorkerProcess(python, env=worker_env(1))  # meta tensors do no arithmetic: one thread is plenty
        worker.request({"op": "hello", "device": "cpu", "threads": 1}, timeout=CENSUS_TIMEOUT_S)
        for w in eager:
            out[w.name] = census_answer(worker.request({"op": "census", "workload": w.spec()}, CENSUS_TIMEOUT_S))
    except NoTorch as exc:
        failure = f"no torch in {python}" if exc.missing else f"torch cannot be imported in {python}: {exc}"
    except WorkerDied as exc:
        why = last_line(exc.stderr_tail)
        failure = f"the census worker stopped ({exc}{': ' + why if why else ''})"
    except UserError as exc:  # the interpreter cannot be run at all
        failure = str(exc)
    finally:
        if worker is not None:
            worker.close()
    for w in eager:
        out.setdefault(w.name, PhaseCensus(None, failure or "no census was taken"))
    return out


def census_answer(ans: dict[str, Any]) -> PhaseCensus:
    """A census answer checked for the shape the list prints: a worker (and the config it built) is not
    trusted to send one."""
    if ans.get("type") == "error":
        return PhaseCensus(None, _line(ans.get("message")) or "the worker gave no reason")
    doc = ans.get("census")
    if doc is None:
        return PhaseCensus(None, _line(ans.get("reason")) or "the worker gave no reason")
    ops = doc.get("ops") if isinstance(doc, dict) else None
    calls = doc.get("calls") if isinstance(doc, dict) else None
    if (
        not isinstance(ops, dict)
        or not all(isinstance(k, str) and type(v) is int and v >= 0 for k, v in ops.items())
        or type(calls) is not int
        or not isinstance(doc.get("entries", []), list)
    ):
        return PhaseCensus(None, "the worker's census is not in the expected shape")
    return PhaseCensus(doc)


def _line(text: object, limit: int = 300) -> str:
    line = " ".join(str(text or "").split())
    return line if len(line) <= limit else line[: limit - 3] + "..."


# A caller's callback of the other shape: each event's class name and its fields.
NamedProgress = Callable[[str, dict[str, Any]], None]


def as_progress(callback: Progress | NamedProgress) -> Progress:
    """`callback` as a Progress. One that takes two arguments gets each event as its class name and its fields
    (`"WorkloadStarted", {"name": ..., "eta_s": ...}`): a caller with a callback of that shape keeps working."""
    try:
        params = inspect.signature(callback).parameters.values()
    except (TypeError, ValueError):
        return cast(Progress, callback)
    positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    if len(positional) != 2:
        return cast(Progress, callback)
    named = cast(NamedProgress, callback)
    return lambda event: named(type(event).__name__, asdict(event))


def run(plan: BenchPlan, progress: Progress | NamedProgress, warn: Callable[[str], None]) -> BenchResult:
    """Check the environments, measure, save the record; the exit code says what happened. `progress` gets the
    events of bench/events.py (a two-argument callback gets them as as_progress says)."""
    from mpsup.bench.policy import SamplingPolicy
    from mpsup.bench.run import run_bench
    from mpsup.bench.runner import BenchOptions
    from mpsup.bench.workerproc import check_interpreter

    req = plan.request
    envs, mode = _environments(req)
    policy = SamplingPolicy.for_environments(len(envs), req.budget)
    if req.visits is not None:
        policy = replace(policy, phase_visits=req.visits)
    options = BenchOptions(
        device=plan.device,
        policy=policy,
        threads=req.threads,
        smoke=req.smoke and all(e.stack == "torch" for e in envs),  # the smoke tests are torch features
        cpus=plan.affinity.cpus,
        thread_cpus=plan.affinity.threads_on,
        allow_cpu_fallback=req.allow_cpu_fallback,
        # Only the bundled suite as a whole: what --only names, and a user's model, is what they asked for.
        skip_slow=plan.model_doc is None and not req.only,
        numerics=req.numerics,
        energy=req.energy,
        reference_python=check_interpreter(req.reference, "--reference") if req.reference else None,
        reference_share=req.reference_share,
    )
    record, path = run_bench(
        envs,
        list(plan.workloads),
        options,
        mode=mode,
        model=plan.model_doc,
        progress=as_progress(progress),
        warn=warn,
        exiting=True,
        # An MLX side cannot replay torch's ops: attribution is torch against torch.
        expand=op_expander(plan, len(envs)) if all(e.stack == "torch" for e in envs) else None,
    )
    return BenchResult(record, path, exit_code(record))


def time_estimate(plan: BenchPlan) -> str | None:
    """What a model run will take, said before it starts: phases, layers and ops, from the budgets each gets
    (bench/run.py: a phase PHASE_BUDGET_FACTOR budgets, a layer one, the ops together at most half again)."""
    from mpsup.bench.policy import PHASE_BUDGET_FACTOR
    from mpsup.bench.runner import PHASE_SLOW_BUDGETS
    from mpsup.model.op_replay import OPS_BUDGET_SHARE

    if plan.model_doc is None:
        return None
    req = plan.request
    phases = sum(1 for w in plan.workloads if w.part == "phase")
    layers = len(plan.workloads) - phases
    units = PHASE_BUDGET_FACTOR * phases + layers
    paired = bool(req.candidate or req.aa)
    mlx = any(side.startswith("mlx:") for side in (req.baseline or "", req.candidate or ""))
    ops = not mlx and op_expander(plan, 2 if paired else 1) is not None
    seconds = units * req.budget * (1 + OPS_BUDGET_SHARE if ops else 1)
    what = [f"{phases} phase(s)" if phases else "", f"{layers} layer workload(s)" if layers else ""]
    if ops:
        what.append(f"each phase's ops (at most {OPS_BUDGET_SHARE:.0%} more; --no-ops skips them)")
    bound = (
        f"; a phase whose fewest calls would take over {PHASE_SLOW_BUDGETS * PHASE_BUDGET_FACTOR * req.budget:g} s "
        "is refused (a larger --budget measures it)"
        if phases
        else ""
    )
    minutes = f"~{seconds / 60:.0f} min" if seconds >= 90 else f"~{max(1, round(seconds))} s"
    return f"{', '.join(w for w in what if w)}: {minutes} at --budget {req.budget:g}, plus worker starts{bound}"


def op_expander(plan: BenchPlan, environments: int) -> Any:
    """What adds each phase's ops to a run: on when two environments measure a model whole, unless --no-ops."""
    if not plan.request.ops or environments < 2:
        return None
    if not any(w.part == "phase" and w.params.get("library") in CENSUS_LIBRARIES for w in plan.workloads):
        return None
    from mpsup.model.op_replay import affordable_ops, op_weight, replay_plan

    def expand(phases: list[dict[str, Any]], units: float) -> list[tuple[Workload, float]]:
        ops = replay_plan(phases, affordable_ops(units, plan.request.budget))
        each = op_weight(len(ops), units)
        return [(w, each) for w in ops]

    return expand


def _environments(req: BenchRequest) -> tuple[list[Any], str]:
    from mpsup.bench.runner import EnvSpec
    from mpsup.envs.resolve import resolve_side

    if req.aa and req.candidate:
        raise UserError("--aa pairs the baseline with itself; it cannot be combined with --candidate")
    base_py = _baseline_python(req)
    base_stack = "mlx" if (req.baseline or "").startswith("mlx:") else "torch"
    if req.baseline and base_stack == "torch":
        base_stack = resolve_side(req.baseline, "--baseline")[1]  # a recorded MLX environment, by name
    bits = req.mlx_bits
    envs = [EnvSpec("baseline", base_py, base_stack, bits if base_stack == "mlx" else None)]
    if req.candidate:
        cand_py, cand_stack = resolve_side(req.candidate, "--candidate")
        if cand_stack == base_stack and same_environment(base_py, cand_py):
            raise UserError(
                f"--candidate {req.candidate}: the baseline's own environment ({base_py}), so the run would "
                "measure only noise; for that, the noise floor, run `mpsup bench --aa`"
            )
        envs.append(EnvSpec("candidate", cand_py, cand_stack, bits if cand_stack == "mlx" else None))
        return envs, "paired"
    if req.aa:
        envs.append(EnvSpec("baseline-2", base_py, base_stack, envs[0].mlx_bits))
        return envs, "aa"
    return envs, "single"


def same_environment(a: Path, b: Path) -> bool:
    """Whether two interpreter paths run one environment: one file reached from one bin folder (a venv's python
    and python3, or the venv through a link to it). Not the resolved file alone: every venv made from one
    Python links to the same binary, and the link's folder is what selects the venv."""
    pa, pb = a.expanduser(), b.expanduser()
    try:
        # The folders resolved (a venv reached through a link is still that venv), the files compared as files.
        return os.path.realpath(pa.parent) == os.path.realpath(pb.parent) and os.path.samefile(pa, pb)
    except OSError:  # one is missing: only the very same path names the same thing
        return os.path.abspath(pa) == os.path.abspath(pb)


def _baseline_python(req: BenchRequest) -> Path:
    from mpsup.envs.resolve import resolve_environment, resolve_side

    python = req.python
    if python is not None:
        from mpsup.bench.workerproc import check_interpreter

        python = check_interpreter(python, "--python")
    if req.baseline and req.baseline.startswith("mlx:"):
        return resolve_side(req.baseline, "--baseline")[0]
    return resolve_environment(req.baseline, "--baseline") if req.baseline else (python or Path(sys.executable))


# A workload's or phase's status that is no failure: measured, or not measured for a stated reason that says
# nothing went wrong (the build has no kernel for it, as a smoke test's `unsupported`; the memory guard; too slow
# for the budget). Every other status (crash, error, oom, and any the worker may add) is a failure: one rule for
# every kind, layer or whole-model phase, bundled or the user's.
NOT_FAILED = frozenset({"ok", "unsupported", "skipped", "too_slow"})
# The same rule for smoke tests: `fallback` ran on the CPU (shown, never as a pass) but did not fail; `fail`,
# `crash` and any status this mpsup does not know are failures.
SMOKE_NOT_FAILED = frozenset({"pass", "unsupported", "skipped", "skip", "fallback"})  # skip: the MLX worker's


def exit_code(record: dict[str, Any]) -> int:
    """128+signal when interrupted; 1 on a failed run, a failed workload or phase (in any environment) or a
    failed smoke test; else 0."""
    if record.get("interrupted"):
        return 128 + signal.Signals[record.get("signal", "SIGINT")].value
    if record.get("failure"):
        return 1
    workloads = record["workloads"]
    failed = any(
        w.get("status") not in NOT_FAILED
        or any(isinstance(e, dict) and e.get("status", "ok") not in NOT_FAILED for e in w.get("envs", {}).values())
        for w in workloads
    ) or any(e.get("status") not in SMOKE_NOT_FAILED for s in record.get("smoke", []) for e in s["envs"].values())
    return 1 if failed else 0
