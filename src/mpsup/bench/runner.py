"""Orchestration: workers per environment, the memory guard, warmup, sampling, interleaved pairs.

One environment: each workload is sampled until its median is known to the policy's target (+-2%
by default) or its budget ends.
Two environments: both workers stay up and take turns per workload (A B B A ...), so drift and heat
hit both alike; each round yields one paired ratio."""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from statistics import median
from typing import Any

from mpsup.bench.energy_turns import EnergyTurns
from mpsup.bench.energy_windows import plan_windows, read_edge, window
from mpsup.bench.events import SamplesTaken, SmokeStepDone
from mpsup.bench.measurement import EnvMeasurement, Round, WorkloadMeasurement
from mpsup.bench.numerics import DEFAULT_SHARE, NumericsCapture, Reference
from mpsup.bench.policy import PHASE_BUDGET_FACTOR, SLOW_CALL_BUDGETS, SamplingPolicy
from mpsup.bench.suite import SMOKE_FEATURES
from mpsup.bench.visit_watch import VisitWatch
from mpsup.bench.workerproc import NoTorch, WorkerDied, WorkerProcess, last_line, mlx_pin_env, worker_env
from mpsup.errors import UserError
from mpsup.progress import Progress, ignore
from mpsup.units import fmt_time
from mpsup.workloads import Workload, working_bytes


@dataclass(frozen=True)
class EnvSpec:
    label: str  # "baseline", "candidate", or "baseline-2" for an A/A run
    python: Path
    stack: str = "torch"  # or "mlx": the worker that runs in it (bench/workerproc.py STACKS)
    mlx_bits: int | None = None  # an MLX side's weights quantised to this many bits (None: the checkpoint dtype)


# Runner.measure: a first call this long is no one-time cost (kernel selection, a shader's compilation) but
# the workload's own time.
FIRST_CALL_FLOOR_S = 1.0


@dataclass(frozen=True)
class BenchOptions:
    device: str
    policy: SamplingPolicy = field(default_factory=SamplingPolicy)
    threads: int | None = None
    memory_share: float = 0.5  # of the device's safe memory a workload may take
    smoke: bool = True
    clock: Callable[[], float] = time.perf_counter
    cpus: tuple[int, ...] | None = None  # every worker pinned to these (host/affinity.py); None: not pinned
    # CPU workers: intra-op thread i bound to thread_cpus[i], alike in every worker (host/affinity.py)
    thread_cpus: tuple[int, ...] | None = None
    allow_cpu_fallback: bool = False  # PYTORCH_ENABLE_MPS_FALLBACK=1 in the workers (else 0, whatever the shell says)
    # The default suite (no --only): a workload whose fewest calls would overrun its budget several-fold is
    # skipped with its call time (policy.slow_call_s). What a user names with --only is measured whatever it
    # costs, and so is a whole-model phase.
    skip_slow: bool = False
    # A request for samples this long is a progress event of its own: a whole-model phase at seconds a call
    # (a VAE decode on a CPU takes over a minute) otherwise shows nothing moving for minutes.
    slow_sample_s: float = 1.0
    # Paired torch runs: each build's answers judged against float64 (bench/numerics.py); the reference runs in
    # this interpreter (None: the baseline's).
    numerics: bool = False
    reference_python: Path | None = None
    reference_share: float = DEFAULT_SHARE  # of the run's time before it, the most the float64 reference may take
    # bench --energy: read the device's meter (idle power first), and give paired whole-model phases energy
    # windows after their timed rounds (bench/energy_windows.py)
    energy: bool = False


class EnvSession:
    """A live worker for one environment, restarted after a crash."""

    def __init__(self, env: EnvSpec, options: BenchOptions) -> None:
        self.env = env
        self.options = options
        self.worker: WorkerProcess | None = None
        self.facts: dict[str, Any] = {}
        self.crashes = 0

    def start(self) -> dict[str, Any]:
        # Pinned to k CPUs, torch would still start a thread per CPU of the machine: k threads, unless told.
        cpus = self.options.cpus
        threads = self.options.threads or (len(cpus) if cpus else None)
        self.worker = WorkerProcess(
            self.env.python,
            env={
                **worker_env(threads, self.options.thread_cpus, cpu_fallback=self.options.allow_cpu_fallback),
                **(mlx_pin_env(cpus, self.options.thread_cpus) if self.env.stack == "mlx" else {}),
            },
            stack=self.env.stack,
        )
        try:
            hello = self.worker.request(
                {
                    "op": "hello",
                    "device": self.options.device,
                    "threads": threads,
                    "cpus": list(cpus) if cpus else None,
                    **({"mlx_bits": self.env.mlx_bits} if self.env.stack == "mlx" else {}),
                },
                timeout=300,
            )
        except NoTorch as exc:
            self.close(force=True)
            if exc.package == "mlx":
                raise UserError(
                    f"mlx:{self.env.python}: mlx and mlx-lm cannot be imported there ({last_line(str(exc))}); "
                    "install them with `pip install mlx mlx-lm` in that environment"
                ) from None
            if exc.missing:
                raise UserError(
                    f"no torch in {self.env.python} (install torch there, or pick another interpreter)"
                ) from None
            raise UserError(f"torch cannot be imported in {self.env.python}: {last_line(str(exc))}") from None
        except WorkerDied as exc:
            self.close(force=True)
            why = last_line(exc.stderr_tail)
            raise UserError(
                f"{self.env.python}: the worker could not start ({exc}{': ' + why if why else ''})"
            ) from None
        if hello.get("type") != "hello":
            self.close(force=True)
            raise UserError(f"{self.env.python}: the worker could not start: {last_line(str(hello.get('message')))}")
        if not hello.get("available"):
            self.close(force=True)
            raise UserError(
                f"--device {self.options.device}: not available in {self.env.python} ({hello.get('reason')})"
            )
        # "python" is the interpreter's path in a record; the worker's version of it would be lost under that key.
        version = hello.get("python")
        self.facts = {
            **hello,
            "python_version": version,
            "python": str(self.env.python),
            "label": self.env.label,
            "stack": self.env.stack,
        }
        self.facts.pop("type", None)
        return self.facts

    def request(self, doc: dict[str, Any], timeout: float = 600.0) -> dict[str, Any]:
        if self.worker is None or not self.worker.alive:
            self.start()
        assert self.worker is not None
        try:
            return self.worker.request(doc, timeout=timeout)
        except WorkerDied:
            self.crashes += 1
            self.worker.close()
            self.worker = None
            raise

    def close(self, *, force: bool = False) -> None:
        if self.worker is not None:
            self.worker.close(force=force)
            self.worker = None


# A whole-model phase's fewest calls may take at most this many of its own budgets (PHASE_BUDGET_FACTOR units).
PHASE_SLOW_BUDGETS = 12.0


def _phase_weight() -> float:
    """The weight slow_call_s takes for a phase: PHASE_SLOW_BUDGETS of its units, in SLOW_CALL_BUDGETS' terms."""
    return PHASE_BUDGET_FACTOR * PHASE_SLOW_BUDGETS / SLOW_CALL_BUDGETS


def _guard(w: Workload, sessions: list[EnvSession], share: float, device: str = "") -> str | None:
    """Why this workload must not be built, or None. Two bounds: what the model's input justifies where no option
    stated its sizes (Workload.justified), and what the machine can give, in the dtype's working size on the
    device, shared by every environment (paired workers hold their tensors at once)."""
    gib = 2**30
    if w.sized_by and w.justified and w.memory_bytes > w.justified:
        return (
            f"needs {w.memory_bytes / gib:.2f} GiB at sizes no option stated, over the {w.justified / gib:.2f} GiB "
            f"its input justifies; skipped (state the size with {w.sized_by} to measure it)"
        )
    need = working_bytes(w, device or next((str(s.facts.get("device") or "") for s in sessions), ""))
    envs = max(1, len(sessions))
    for s in sessions:
        limit = s.facts.get("memory_limit")
        if limit and need > share * limit / envs:
            each = f", divided between {envs} environments" if envs > 1 else ""
            working = f" ({w.dtype} working size on {device or s.facts.get('device')})" if need > w.memory_bytes else ""
            return (
                f"needs {need / gib:.2f} GiB{working}, over {share:.0%} of the {limit / gib:.1f} GiB this device can "
                f"safely give{each}; skipped (overcommitting unified memory can freeze a Mac; a smaller "
                "--resolution, --frames or --tokens measures it)"
                + (f"; {s.facts['memory_limit_note']}" if isinstance(s.facts.get("memory_limit_note"), str) else "")
            )
    return None


@dataclass(frozen=True)
class VisitPlan:
    """One visit's bounds: its `share` of seconds from `t0`, the rounds the workload needs in all (`min_rounds`,
    None: the policy's) and the rounds this visit adds at least (`min_new`)."""

    share: float
    t0: float
    min_rounds: int | None
    min_new: int


class Runner:
    def __init__(self, envs: list[EnvSpec], options: BenchOptions, progress: Progress = ignore) -> None:
        self.options = options
        self.sessions = [EnvSession(e, options) for e in envs]
        self.progress = progress
        self.restarts = 0
        self.rates: dict[tuple[str, str, object], float] = {}  # FLOP/s, the best seen per Workload.rate_family
        paired_torch = len(envs) == 2 and all(e.stack == "torch" for e in envs)
        self.capture = NumericsCapture.create(options.reference_share) if options.numerics and paired_torch else None
        self.reference_session: EnvSession | None = None
        self.energy = EnergyTurns()  # reads nothing until bench/run.py gives it the run's meter
        self.watch = VisitWatch()  # the machine at each visit: reads nothing until bench/run.py gives it readers

    def start(self) -> list[dict[str, Any]]:
        return [s.start() for s in self.sessions]

    def close(self, *, force: bool = False) -> None:
        """Every worker is gone afterwards; force kills at once (an interrupted run waits for nothing)."""
        for s in self.sessions:
            s.close(force=force)
        if self.reference_session is not None:
            self.reference_session.close(force=force)
        self.energy.close()

    def reference(self) -> Reference:
        """The float64 reference: a CPU worker of the baseline's interpreter (or --reference), started when first
        asked, on every CPU (no timing runs beside it)."""

        def session() -> EnvSession:
            if self.reference_session is None:
                python = self.options.reference_python or self.sessions[0].env.python
                cpu = BenchOptions(device="cpu", allow_cpu_fallback=False)
                self.reference_session = EnvSession(EnvSpec("reference", python), cpu)
                self.reference_session.start()
            return self.reference_session

        return Reference(
            request=lambda doc, timeout: session().request(doc, timeout=timeout), facts=lambda: session().facts
        )

    def restart(self) -> None:
        """Fresh worker processes: a second pass then spans two process pairs, so a placement that favours
        one process (tensor addresses, allocator state, library heuristics) shows up between rounds. Every
        other restart starts them in the other order: whatever going first gives (the first CUDA context,
        the first claim on memory) falls to each environment in turn."""
        for s in self.sessions:
            s.close()
        self.restarts += 1
        reverse = self.options.policy.counterbalance and self.restarts % 2
        for s in self.sessions[::-1] if reverse else self.sessions:
            s.start()

    def _setup(
        self,
        s: EnvSession,
        w: Workload,
        calls: int | None,
        share_s: float | None = None,
        max_first_call_s: float | None = None,
        *,
        census: bool = True,
    ) -> EnvMeasurement:
        pol = self.options.policy
        target = pol.target_sample_s
        if len(self.sessions) == 2 and share_s is not None:
            target = pol.paired_sample_s(share_s)
        spec = w.spec()
        if not census and spec.get("kind") == "model_phase":
            # A later visit's census would be thrown away (the ops are planned from the first): not taken.
            spec = {**spec, "params": {**spec["params"], "census": False}}
        req = {"op": "setup", "workload": spec, "calls": calls, "target_sample_s": target}
        if max_first_call_s is not None:
            req["max_first_call_s"] = max_first_call_s
        keep = self.capture.request(w, s.env.label) if self.capture is not None else None
        if keep is not None:
            req["numerics"] = keep
        t0 = self.options.clock()
        try:
            ans = s.request(req)
        except WorkerDied as exc:
            return EnvMeasurement.failed("crash", str(exc), exc.stderr_tail[-1000:])
        if self.capture is not None:
            self.capture.note(w, s.env.label, keep, ans.get("numerics"))
        if ans.get("type") == "error":
            needs_metal = ans.get("needs_metal") is True
            return EnvMeasurement.failed(ans.get("status", "error"), ans.get("message", ""), needs_metal=needs_metal)
        ready = EnvMeasurement.ready(ans)
        ready.setup_s.append(self.options.clock() - t0)
        return ready

    def _sample(self, s: EnvSession, r: EnvMeasurement, count: int, *, warmup: bool, discard: int = 0) -> list[float]:
        t0 = self.options.clock()
        turn = self.energy.begin(r.sample_s * (count + discard))
        ans = s.request({"op": "sample", "count": count, "discard": discard})
        if ans.get("type") == "error":
            raise RuntimeError(ans.get("message", "sampling failed"))
        self.energy.end(turn, r, (count + discard) * (r.calls or 1), warmup=warmup)
        host: list[float] = ans["host"]  # finite numbers: the worker protocol checked them
        if discard:
            r.warmup.extend(x for x in ans.get("discarded") or [] if isinstance(x, float))
        if warmup:
            r.warmup.extend(host)
        else:
            r.samples.extend(host)
            if ans.get("device"):
                r.device_samples.extend(ans["device"])
        took = self.options.clock() - t0
        if took >= self.options.slow_sample_s:
            done = r.warmup if warmup else r.samples
            self.progress(SamplesTaken(s.env.label, warmup, len(done), took))
        return host

    def _teardown(self, s: EnvSession, r: EnvMeasurement) -> None:
        ans = s.request({"op": "teardown"})
        if not r.memory:
            r.memory = ans.get("memory", {})

    def measure(self, w: Workload, share_s: float | None = None, min_rounds: int | None = None) -> WorkloadMeasurement:
        """One workload, from setup to teardown, within `share_s` seconds (default: its whole budget);
        paired, at least `min_rounds` rounds (default: the policy's)."""
        t0 = self.options.clock()
        share = self.options.policy.budget_s if share_s is None else share_s
        m = WorkloadMeasurement(w)
        skip = _guard(w, self.sessions, self.options.memory_share, self.options.device)
        if skip:
            m.status, m.reason = "skipped", skip
            return m
        slow = self._slow_call_limit(w)
        predicted = self._predicted_call_s(w)
        # Twice the limit: a rate from a smaller workload of the family understates a larger one's.
        if slow is not None and predicted is not None and predicted > 2 * slow:
            self._too_slow(m, predicted, slow, predicted=True)
            return m
        live: list[EnvSession] = []
        calls: int | None = None
        visit = self.watch.begin(m)
        for s in self.sessions:
            # The first environment may stop at its first call where that call alone shows the workload too
            # slow (past FIRST_CALL_FLOOR_S and twice the limit): calibrating would cost another such call.
            first_cap = max(2 * slow, FIRST_CALL_FLOOR_S) if slow is not None and not live else None
            r = self._setup(s, w, calls, share, first_cap)
            m.envs[s.env.label] = r
            if r.ok:
                per_call = r.sample_s / r.calls if r.calls else None
                self._learn_rate(w, r, per_call)
                if slow is not None and per_call is not None and per_call > slow and not live:
                    self._teardown(s, r)
                    self._too_slow(m, per_call, slow, predicted=False)
                    m.elapsed_s = self.options.clock() - t0
                    return m
                calls = calls or r.calls
                live.append(s)
        try:
            self._visit(live, m, VisitPlan(share, t0, min_rounds, 0), windows=w.part == "phase")
        except WorkerDied as exc:
            for s in live:
                if m.envs[s.env.label].ok:
                    m.envs[s.env.label].fail("crash", str(exc))
        except RuntimeError as exc:
            for s in live:
                m.envs[s.env.label].fail("error", str(exc))
        for r in m.envs.values():
            r.summarize()
        self.watch.end(m, visit)
        statuses = {r.status for r in m.envs.values()}
        m.status = "ok" if statuses == {"ok"} else sorted(statuses - {"ok"})[0]
        bad = next((r for r in m.envs.values() if not r.ok), None)
        if bad:
            m.reason = bad.reason or ""
        m.elapsed_s = self.options.clock() - t0
        m.visits = 1
        return m

    def _slow_call_limit(self, w: Workload) -> float | None:
        paired = len(self.sessions) == 2
        if w.part == "phase":
            # Measured whatever the suite's skip says, but never unbounded: at most PHASE_SLOW_BUDGETS of its
            # own budget (a full-size VAE decode on a CPU, over a minute a call, would otherwise take half an hour).
            return self.options.policy.slow_call_s(paired, _phase_weight())
        if not self.options.skip_slow:
            return None
        return self.options.policy.slow_call_s(paired=paired)

    def _predicted_call_s(self, w: Workload) -> float | None:
        rate, flops = self.rates.get(w.rate_family), w.flops
        return flops / rate if rate and flops else None

    def _learn_rate(self, w: Workload, r: EnvMeasurement, per_call: float | None) -> None:
        flops = r.flops_per_call or w.flops
        if flops and per_call and per_call > 0:
            family = w.rate_family
            self.rates[family] = max(self.rates.get(family, 0.0), flops / per_call)

    def _too_slow(self, m: WorkloadMeasurement, call_s: float, limit_s: float, *, predicted: bool) -> None:
        pol = self.options.policy
        paired = len(self.sessions) == 2
        fewest = pol.fewest_calls(paired)
        weight = _phase_weight() if m.workload.part == "phase" else 1.0
        # The budget at which this workload's fewest calls fit in SLOW_CALL_BUDGETS of it, rounded up.
        enough = math.ceil(fewest * call_s / (SLOW_CALL_BUDGETS * weight) * 10) / 10
        how = "predicted from a like workload's rate here" if predicted else "timed here"
        m.status = "too_slow"
        m.call_s, m.call_predicted, m.budget_needed_s = call_s, predicted, enough
        m.reason = (
            f"one call takes {fmt_time(call_s)} ({how}), over the {fmt_time(limit_s)} that {fewest} calls "
            f"fit in {SLOW_CALL_BUDGETS * weight:g} budgets of {pol.budget_s:g} s; skipped (--budget {enough:g}"
            + (" measures it)" if weight != 1.0 else " or --only measures it)")
        )
        m.envs = {}

    def extend(self, w: Workload, m: WorkloadMeasurement, share_s: float, min_new: int = 2) -> bool:
        """A second visit: more rounds (or samples) for a finished workload, added to its measurement. The
        calls per sample stay those of the first visit, so old and new samples measure the same thing.
        A failure here costs only the extra time: the first visit's figures stay as they were."""
        t0 = self.options.clock()
        if m.status != "ok" or not m.envs:
            return False
        calls = next(iter(m.envs.values())).calls
        live = [s for s in self.sessions if s.env.label in m.envs]
        rounds_before = len(m.ratios)
        samples_before = sum(len(r.samples) for r in m.envs.values())
        visit = self.watch.begin(m)
        try:
            # An even visit sets up in the other order: whatever setting up first gives (the first claim on
            # device memory) leans both visits of an A/A run alike; reversed, that lean cancels between visits
            # and shows as their disagreement, which the report's between-process floor reads (figures in
            # docs/evidence/).
            order = live[::-1] if self.options.policy.counterbalance and (m.visits or 1) % 2 else live
            for s in order:
                fresh = self._setup(s, w, calls, census=False)
                if not fresh.ok:
                    return False
                m.envs[s.env.label].sample_s = fresh.sample_s
                m.envs[s.env.label].setup_s += fresh.setup_s
            self._visit(live, m, VisitPlan(share_s, t0, None, min_new), first=order[0])
        except (WorkerDied, RuntimeError) as exc:
            m.extend_error = str(exc)[:300]
            return False
        finally:
            # However the visit ended (done, failed, or cut short by a signal), what it took counts: the
            # summary covers every sample, and rounds labelled with this visit's number mean a visit made.
            for r in m.envs.values():
                r.summarize()
            self.watch.end(m, visit)
            if len(m.ratios) > rounds_before or sum(len(r.samples) for r in m.envs.values()) > samples_before:
                m.elapsed_s = (m.elapsed_s or 0.0) + self.options.clock() - t0
                m.visits = (m.visits or 1) + 1
        return True

    def _visit(
        self,
        live: list[EnvSession],
        m: WorkloadMeasurement,
        plan: VisitPlan,
        first: EnvSession | None = None,
        *,
        windows: bool = False,
    ) -> None:
        """`first`: the environment that warms up first (the one set up first); the rounds keep their own
        A B / B A alternation. `windows`: energy windows after the rounds, where a meter is read."""
        if not live:
            return
        self._warmup(sorted(live, key=lambda s: s is not first), m, plan.share, plan.t0)
        if len(live) == 2:
            self._paired(live, m, plan)
            if windows:
                self._energy_windows(live, m)
        else:
            self._single(live[0], m.envs[live[0].env.label], plan.share, plan.t0)
        for s in live:
            self._teardown(s, m.envs[s.env.label])

    def _warmup(self, live: list[EnvSession], m: WorkloadMeasurement, share: float, t0: float) -> None:
        pol = self.options.policy
        # Warmup's own clock: the setups before it (two, when paired) must not use up its share.
        w0 = self.options.clock()
        settled = {s.env.label: False for s in live}
        start = {s.env.label: len(m.envs[s.env.label].warmup) for s in live}
        while not all(settled.values()):
            for s in live:
                if settled[s.env.label]:
                    continue
                r = m.envs[s.env.label]
                self._sample(s, r, 1, warmup=True)
                mine = r.warmup[start[s.env.label] :]
                settled[s.env.label] = (
                    self.options.clock() - w0 >= pol.warmup_share * share
                    or pol.warmup_settled(mine, 0.0)
                    or len(mine) >= pol.warmup_max_samples
                )

    def _single(self, s: EnvSession, r: EnvMeasurement, share: float, t0: float) -> None:
        pol = self.options.policy
        while True:
            # Never more samples than the share has room for: a slow workload (one call, a tenth of a
            # second) stops at six, not ten.
            room = (share - (self.options.clock() - t0)) / r.sample_s if r.sample_s else pol.batch
            need = max(0, 6 - len(r.samples))
            count = max(1, min(pol.batch, max(need, int(room))))
            self._sample(s, r, count, warmup=False)
            stop, why = pol.should_stop(r.samples, self.options.clock() - t0, share)
            if stop:
                r.stop = why
                return

    def _paired(self, live: list[EnvSession], m: WorkloadMeasurement, plan: VisitPlan) -> None:
        pol, share = self.options.policy, plan.share
        a, b = live
        ra, rb = m.envs[a.env.label], m.envs[b.env.label]
        if m.rounds is None:
            m.rounds = []
        rounds, ratios = m.rounds, m.ratios
        per_round = pol.samples_per_round(max(ra.sample_s, rb.sample_s), share)
        # Each side by its own sample: a 30 ms torch call after a second-long MLX turn runs cold (caches, helper
        # threads asleep) and pays the switch as much as it would after a short one.
        discard = {s.env.label: int(m.envs[s.env.label].sample_s < pol.discard_up_to_s) for s in live}
        visit = m.visits + 1
        new = 0
        while True:
            # A B, then B A: whoever goes second in one round goes first in the next.
            order = (a, b) if len(rounds) % 2 == 0 else (b, a)
            got = {}
            for s in order:
                # The first block after the other worker had the device pays for the switch
                # (GPU context, caches, clocks): taken in the same request, kept out of the comparison.
                got[s.env.label] = self._sample(
                    s, m.envs[s.env.label], per_round, warmup=False, discard=discard[s.env.label]
                )
            ma, mb = median(got[a.env.label]), median(got[b.env.label])
            ratios.append(ma / mb)
            rounds.append(
                Round(order[0].env.label, visit, {a.env.label: got[a.env.label], b.env.label: got[b.env.label]})
            )
            new += 1
            stop, why = pol.should_stop_rounds(
                ratios, self.options.clock() - plan.t0, share, plan.min_rounds, reach_min=m.workload.part == "phase"
            )
            # A later visit adds at least `min_new` rounds (two: one ABBA pair), whatever the interval says.
            if stop and new >= plan.min_new:
                ra.stop = rb.stop = why
                break
        m.samples_per_round = per_round

    def _energy_windows(self, live: list[EnvSession], m: WorkloadMeasurement) -> None:
        """Each build's energy per call, apart from the timed rounds (bench/energy_windows.py): windows in
        A B B A order, the meter read only at their idle edges. A worker's error ends the windows, never the
        timed figures already taken."""
        cal, meter = self.energy.calibration, self.energy.meter
        if meter is None or cal is None or self.energy.failure:
            return
        a, b = live
        ra, rb = m.envs[a.env.label], m.envs[b.env.label]
        # A sample's time as the rounds just took it: the setup's estimate comes from the first, slower calls.
        sample_s = max(median(r.samples) if r.samples else r.sample_s for r in (ra, rb))
        plan = plan_windows(cal, meter.info.total_parts, sample_s)
        if plan is None:
            return
        clock = self.options.clock
        t0 = clock()
        try:
            before = read_edge(self.energy, plan)
            for k in range(2 * plan.pairs):
                pair, second = divmod(k, 2)
                s = (a, b)[(pair + second) % 2]  # A B, then B A: each pair's first build alternates
                r = m.envs[s.env.label]
                w0 = clock()
                # One switch block first, as in the rounds: its calls count, as their energy does.
                ans = s.request({"op": "sample", "count": plan.samples, "discard": 1})
                work_s = clock() - w0
                if ans.get("type") == "error":
                    self.energy.window_error = str(ans.get("message", "sampling failed"))[:300]
                    break
                after = read_edge(self.energy, plan)
                if before is None or after is None:
                    break
                m.energy_windows.append(window(s.env.label, (plan.samples + 1) * (r.calls or 1), work_s, before, after))
                before = after
        finally:
            self.energy.windows_s += clock() - t0
            self.energy.plans[m.name] = plan.to_json()

    def smoke_features(self) -> tuple[str, ...]:
        return SMOKE_FEATURES

    def smoke_one(self, feature: str, kernels: list[Any]) -> dict[str, object]:
        envs: dict[str, object] = {}
        for s in self.sessions:
            try:
                ans = s.request({"op": "smoke", "feature": feature, "kernels": kernels}, timeout=300)
                if ans.get("type") == "error":
                    ans = {"status": "fail", "message": ans.get("message", "")}
                ans.pop("type", None)
                ans.pop("feature", None)
            except WorkerDied as exc:
                ans = {"status": "crash", "message": str(exc)}
            envs[s.env.label] = ans
            self.progress(SmokeStepDone(feature, s.env.label, str(ans["status"])))
        return {"feature": feature, "envs": envs}

    def smoke(self, features: tuple[str, ...] = SMOKE_FEATURES) -> list[dict[str, object]]:
        from mpsup.metal import load_manifest

        kernels = load_manifest()
        return [self.smoke_one(feature, kernels) for feature in features]
