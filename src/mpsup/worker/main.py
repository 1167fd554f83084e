"""The worker's JSON-lines loop: one request per line in, one answer per line out, on two private
pipes that mpsup hands over (never stdin/stdout, which the measured code may use)."""

from __future__ import annotations

import dataclasses
import gc
import json
import os
import queue
import signal
import sys
import threading
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from . import outputs, values
from .build import build
from .core import Built, FallbackWatch, is_unsupported_error, no_deprecations
from .device import Device
from .metal import answer_fields
from .smoke import FEATURES, run_feature
from .timing import calibrate_calls, time_block
from .training import PHASE as TRAIN_PHASE
from .training import census_train_step
from .truth import compare
from .whole_model import census_phase

TEST_HOOKS = os.environ.get("MPSUP_WORKER_TEST_HOOKS") == "1"


def awaiting_each_call(built: Built, sync: Callable[[], None]) -> Built:
    """A whole-model phase is timed as a user runs it: each call's result awaited before the next call starts
    (a decode loop needs its token first). Back to back, a GPU would run one call's kernels while the host
    queues the next call's, a speed no user of a phase sees."""
    phase = built.fn

    def call_and_wait() -> None:
        phase()
        sync()

    return dataclasses.replace(built, fn=call_and_wait)


class Worker:
    def __init__(self, out: Any) -> None:
        self.out = out
        self.device = Device("cpu")
        self.current: Built | None = None
        self.calls = 1
        self.pinned: list[int] | None = None  # bench --affinity: the CPUs timing runs on
        self.unpinned: set[int] | None = None

    def pin(self, on: bool) -> None:
        """Timing runs on the pinned CPUs; building a workload does not, so that processes it starts
        (torch.compile's compile workers) do not all share one CPU."""
        if self.pinned is None or self.unpinned is None:
            return
        try:
            os.sched_setaffinity(0, self.pinned if on else self.unpinned)
        except OSError as exc:  # a CPU gone offline, or one a container does not grant
            raise RuntimeError(f"--affinity: cannot run on CPU {self.pinned} ({exc.strerror or exc})") from None

    def send(self, doc: dict[str, Any]) -> None:
        self.out.write(json.dumps(doc) + "\n")
        self.out.flush()

    def hello(self, req: dict[str, Any]) -> dict[str, Any]:
        cpus = req.get("cpus")
        if cpus and hasattr(os, "sched_setaffinity"):
            # Before the device starts its threads, which inherit it. The pipe reader thread keeps the
            # old mask; it only waits on a pipe.
            self.unpinned = os.sched_getaffinity(0)
            self.pinned = [int(c) for c in cpus]
            self.pin(True)
        self.device = Device(req.get("device", "cpu"))
        threads = req.get("threads")
        if threads:
            torch.set_num_threads(int(threads))
        ok, reason = self.device.available()
        # The smoke features this worker can run, in order: mpsup's list is checked against it (one list).
        facts: dict[str, Any] = {
            "available": ok,
            "reason": reason,
            "device": self.device.kind,
            "torch_version": str(torch.__version__),
            "threads": torch.get_num_threads(),
            "smoke_features": list(FEATURES),
            "cpus": sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
            "mps_env": mps_env(os.environ),
        }
        if ok:
            facts.update(self.device.facts())
        # torch and its device runtime are loaded now: everything alive is module state for the process's
        # life. Freezing it keeps each later gc.collect() (one per workload teardown) from walking those
        # ~150k objects again: ~90 ms a collection here, several per workload, was most of a short run's time.
        gc.freeze()
        return {"type": "hello", **facts}

    def setup(self, req: dict[str, Any]) -> dict[str, Any]:
        self.teardown_quietly()
        spec = req["workload"]
        if TEST_HOOKS and spec["kind"] == "__crash__":
            os.kill(os.getpid(), signal.SIGKILL)
        if TEST_HOOKS and spec["kind"] == "__raise__":
            raise RuntimeError("this workload raises on purpose")
        if TEST_HOOKS and spec["kind"] == "__garbage__":
            self.out.write("this is not a protocol message\n")  # a broken answer on the protocol pipe itself
        torch.manual_seed(0)
        values.TRUTH.reset()
        self.device.reset_peak()
        self.pin(False)
        sync = self.device.synchronize
        # Building and the first call are watched for ops run on the CPU: timing them would time the CPU.
        with FallbackWatch() as watch:
            built = build(spec, self.device)
            if built.info is not None:
                built = awaiting_each_call(built, sync)
            numerics = self.keep_answer(built, req.get("numerics"))
            built.first_output = None  # kept or not, an answer held through the timing is memory it should have
            # First call: kernel selection, compilation, allocator growth.
            first_s = time_block(built.fn, 1, sync).host_s
        self.pin(True)
        with no_deprecations():
            return self._calibrate(req, built, first_s, numerics, watch.ops)

    def _calibrate(
        self, req: dict[str, Any], built: Built, first_s: float, numerics: dict[str, Any] | None, fell_back: list[str]
    ) -> dict[str, Any]:
        """Calls per sample for the set-up workload, and the ready answer."""
        sync = self.device.synchronize
        forced = req.get("calls")
        # A first call over max_first_call_s (set far above any one-time cost) already tells the runner the
        # workload is too slow to measure: a second call to calibrate would cost as much again for nothing.
        too_slow = req.get("max_first_call_s")
        first_only = isinstance(too_slow, (int, float)) and not forced and first_s > too_slow
        if first_only:
            calls, per_call = 1, first_s
        elif forced:
            calls, per_call = int(forced), time_block(built.fn, 1, sync).host_s
        else:
            calls, per_call = calibrate_calls(built.fn, sync, float(req.get("target_sample_s", 0.01)))
        self.current = built
        self.calls = calls
        answer: dict[str, Any] = {
            "type": "ready",
            "calls": calls,
            "per_call_s": per_call,
            "bytes_per_call": built.bytes_per_call,
            "flops_per_call": built.flops_per_call,
            "items_per_call": built.items_per_call,
        }
        if first_only:
            answer["first_call_only"] = True
        # A whole-model phase watched its own first call (its `phase` info lists those ops): said once, not twice.
        if fell_back and built.info is None:
            answer["fallback_ops"] = fell_back
        if built.info is not None:
            answer["phase"] = built.info
        if numerics is not None:
            answer["numerics"] = numerics
        return answer

    def keep_answer(self, built: Built, want: Any) -> dict[str, Any] | None:
        """Where the runner asks (`numerics`: a path), the build's answer to its first call goes to that file for
        the float64 reference to judge, with the digest of the values it was computed on. Untimed: the call is
        the build's own first one where it made one, else one more call before the first timed one."""
        if not isinstance(want, dict) or not isinstance(want.get("path"), str):
            return None
        try:
            out = built.first_output if built.has_first_output else built.fn()
            self.device.synchronize()
            wanted = want.get("extra", True) is not False
            extra = built.extra_answers() if built.extra_answers is not None and wanted else None
            limit = int(want.get("max_elements") or outputs.MAX_ELEMENTS)
            described = outputs.save(out, Path(want["path"]), limit, extra)
            result: dict[str, Any] = {"saved": bool(described), "outputs": described}
            if not described:
                result["reason"] = "the call returns no tensor"
        except Exception as exc:  # numerics is an extra: the timing goes on without it
            result = {"saved": False, "reason": " ".join(f"{type(exc).__name__}: {exc}".split())[:300]}
        built.first_output = None  # a large answer kept alive is memory the timed calls should have
        result["digest"] = values.TRUTH.hexdigest()
        return result

    def truth(self, req: dict[str, Any]) -> dict[str, Any]:
        """The reference's request: the workload in float64 on the CPU, and every saved answer against it."""
        self.teardown_quietly()
        try:
            return {**compare(req), "peak_rss_bytes": peak_rss_bytes()}
        finally:
            collect_and_freeze()

    def sample(self, req: dict[str, Any]) -> dict[str, Any]:
        if self.current is None:
            raise RuntimeError("sample before setup")
        host: list[float] = []
        dev: list[float] = []
        # `discard` blocks run first and come back apart (the first block after the other worker had the
        # device pays for the switch): one request per turn instead of two.
        discard = max(0, int(req.get("discard", 0)))
        # Libraries' deprecation filters set once for the request, not inside every timed call.
        with no_deprecations():
            for _ in range(discard + int(req.get("count", 1))):
                events = self.device.event_pair()
                bt = time_block(self.current.fn, self.calls, self.device.synchronize, events=events)
                host.append(bt.host_s / self.calls)
                if bt.device_s is not None:
                    dev.append(bt.device_s / self.calls)
        answer: dict[str, Any] = {"type": "samples", "host": host[discard:], "device": dev[discard:] or None}
        if discard:
            answer["discarded"] = host[:discard]
        return answer

    def teardown_quietly(self) -> dict[str, Any]:
        if self.current is None:
            # Nothing is set up (the first setup, or after an error): no objects to collect, but a failed
            # build (out of memory) may have left the allocator's cache full.
            self.device.release()
            return {}
        memory = self.device.memory()
        self.current = None
        collect_and_freeze()
        self.device.release()
        return memory

    def teardown(self, _req: dict[str, Any]) -> dict[str, Any]:
        return {"type": "done", "memory": self.teardown_quietly()}

    def smoke(self, req: dict[str, Any]) -> dict[str, Any]:
        # Unpinned like a workload's build: torch.compile's compile workers inherit the mask.
        self.pin(False)
        try:
            result = run_feature(req["feature"], self.device, req.get("kernels", []))
        finally:
            self.pin(True)
        collect_and_freeze()
        return {"type": "smoke", "feature": req["feature"], **result}

    def census(self, req: dict[str, Any]) -> dict[str, Any]:
        """A whole-model phase's op census on the meta device (`bench --list`): nothing is set up or timed, and
        a phase that cannot be counted is an answer with its reason, not an error."""
        spec = req["workload"]
        training = (spec.get("params") or {}).get("phase") == TRAIN_PHASE
        doc, reason = (census_train_step if training else census_phase)(spec)
        collect_and_freeze()  # the meta model is garbage now; transformers' modules stay, frozen
        return {"type": "census", "census": doc, **({"reason": reason} if doc is None else {})}


# What changes how torch runs on MPS, as the measured process sees it (torch's names read from the macOS wheels'
# libtorch_cpu, 2.6 to 2.15; Metal's own, such as MTL_SHADER_VALIDATION, slow every kernel); values are short
# settings, never secrets. The same tuple as host/snapshot.py's, which the doctor reads.
MPS_ENV_PREFIXES = ("PYTORCH_MPS_", "PYTORCH_ENABLE_MPS", "PYTORCH_DEBUG_MPS", "PYTORCH_METAL_", "MTL_", "METAL_")
MPS_ENV_VALUE_CHARS = 200


def mps_env(environ: Any) -> dict[str, str]:
    return {k: str(v)[:MPS_ENV_VALUE_CHARS] for k, v in sorted(environ.items()) if k.startswith(MPS_ENV_PREFIXES)}


def peak_rss_bytes() -> int | None:
    """This process's largest resident size so far (the reference's memory, said beside its answers)."""
    try:
        import resource
    except ImportError:  # not on this platform
        return None
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return int(peak if sys.platform == "darwin" else peak * 1024)  # bytes on macOS, KiB on Linux


def collect_and_freeze() -> None:
    """Collect, then freeze what survived: between workloads, whatever is still alive is module state
    (dynamo, sympy and inductor once the compile smoke test has run; transformers once a model was built).
    Left unfrozen, those objects make every later collection walk them again, at one collection per
    workload teardown and more inside the timed loop, tens of milliseconds each (docs/evidence)."""
    gc.collect()
    gc.freeze()


# MPS's allocator refuses a buffer past the device's largest with "Invalid buffer size: <size>" (MPSAllocator.mm,
# in the real wheels' libtorch_cpu): a workload too big for this Mac, as out of memory is.
OOM_NEEDLES = ("out of memory", "invalid buffer size")


def _classify(exc: BaseException) -> str:
    text = str(exc).lower()
    if isinstance(exc, MemoryError) or any(n in text for n in OOM_NEEDLES) or type(exc).__name__ == "OutOfMemoryError":
        return "oom"
    if is_unsupported_error(exc):
        return "unsupported"
    return "error"


def _read_requests(requests: Any, into: queue.Queue[str]) -> None:
    for line in requests:
        into.put(line)
    # The request pipe ended: mpsup closed it or is gone (killed, crashed). Either way nobody will
    # read our answers, so stop now rather than finish a long measurement for no one.
    os._exit(0)


def _requests_from(in_fd: int) -> queue.Queue[str]:
    pending: queue.Queue[str] = queue.Queue()
    requests = os.fdopen(in_fd, "r", encoding="utf-8")
    threading.Thread(target=_read_requests, args=(requests, pending), daemon=True).start()
    return pending


def _answer(worker: Worker, handlers: dict[str, Any], req: Any) -> dict[str, Any]:
    try:
        answer = handlers[req["op"]](req)
    except Exception as exc:
        worker.teardown_quietly()
        answer = {
            "type": "error",
            "status": _classify(exc),
            "message": f"{type(exc).__name__}: {exc}".strip()[:2000],
            "traceback": traceback.format_exc(limit=4),
            **answer_fields(exc),
        }
    return answer


def main(in_fd: int, out_fd: int) -> None:
    # The pipes are ours alone: a process the measured code starts must not hold them open (mpsup
    # would never see the worker's end) nor write into them.
    os.set_inheritable(in_fd, False)
    os.set_inheritable(out_fd, False)
    # fd 1 already goes to the log (the boot code made sure); Python's own stdout object follows it.
    sys.stdout = sys.stderr
    worker = Worker(os.fdopen(out_fd, "w", encoding="utf-8"))
    handlers = {
        "hello": worker.hello,
        "setup": worker.setup,
        "sample": worker.sample,
        "teardown": worker.teardown,
        "smoke": worker.smoke,
        "census": worker.census,
        "truth": worker.truth,
    }
    pending = _requests_from(in_fd)
    while True:
        line = pending.get()
        if not line.strip():
            continue
        try:
            req = json.loads(line)
        except ValueError as exc:
            worker.send({"type": "error", "status": "error", "message": f"request is not JSON: {exc}"})
            continue
        if isinstance(req, dict) and req.get("op") == "exit":
            break
        worker.send(_answer(worker, handlers, req))
