"""The worker's JSON-lines loop: one request per line on stdin, one answer per line on stdout."""

from __future__ import annotations

import gc
import json
import os
import signal
import sys
import traceback
from typing import Any

import torch

from .device import Device
from .ops import Built, build, is_unsupported_error
from .smoke import run_feature
from .timing import calibrate_calls, time_block

TEST_HOOKS = os.environ.get("MPSUP_WORKER_TEST_HOOKS") == "1"


class Worker:
    def __init__(self, out: Any) -> None:
        self.out = out
        self.device = Device("cpu")
        self.current: Built | None = None
        self.calls = 1

    def send(self, doc: dict[str, Any]) -> None:
        self.out.write(json.dumps(doc) + "\n")
        self.out.flush()

    def hello(self, req: dict[str, Any]) -> dict[str, Any]:
        self.device = Device(req.get("device", "cpu"))
        threads = req.get("threads")
        if threads:
            torch.set_num_threads(int(threads))
        ok, reason = self.device.available()
        facts: dict[str, Any] = {"available": ok, "reason": reason, "device": self.device.kind,
                                 "torch_version": str(torch.__version__), "threads": torch.get_num_threads()}
        if ok:
            facts.update(self.device.facts())
        return {"type": "hello", **facts}

    def setup(self, req: dict[str, Any]) -> dict[str, Any]:
        self.teardown_quietly()
        spec = req["workload"]
        if TEST_HOOKS and spec["kind"] == "__crash__":
            os.kill(os.getpid(), signal.SIGKILL)
        if TEST_HOOKS and spec["kind"] == "__raise__":
            raise RuntimeError("this workload raises on purpose")
        torch.manual_seed(0)
        self.device.reset_peak()
        built = build(spec, self.device)
        sync = self.device.synchronize
        built.fn()  # first call: kernel selection, compilation, allocator growth
        sync()
        forced = req.get("calls")
        if forced:
            calls, per_call = int(forced), time_block(built.fn, 1, sync).host_s
        else:
            calls, per_call = calibrate_calls(built.fn, sync, float(req.get("target_sample_s", 0.01)))
        self.current = built
        self.calls = calls
        return {"type": "ready", "calls": calls, "per_call_s": per_call, "bytes_per_call": built.bytes_per_call,
                "flops_per_call": built.flops_per_call, "items_per_call": built.items_per_call}

    def sample(self, req: dict[str, Any]) -> dict[str, Any]:
        if self.current is None:
            raise RuntimeError("sample before setup")
        host: list[float] = []
        dev: list[float] = []
        for _ in range(int(req.get("count", 1))):
            events = self.device.event_pair()
            bt = time_block(self.current.fn, self.calls, self.device.synchronize, events=events)
            host.append(bt.host_s / self.calls)
            if bt.device_s is not None:
                dev.append(bt.device_s / self.calls)
        return {"type": "samples", "host": host, "device": dev or None}

    def teardown_quietly(self) -> dict[str, Any]:
        memory = self.device.memory() if self.current is not None else {}
        self.current = None
        gc.collect()
        self.device.release()
        return memory

    def teardown(self, _req: dict[str, Any]) -> dict[str, Any]:
        return {"type": "done", "memory": self.teardown_quietly()}

    def smoke(self, req: dict[str, Any]) -> dict[str, Any]:
        result = run_feature(req["feature"], self.device, req.get("kernels", []))
        return {"type": "smoke", "feature": req["feature"], **result}


def _classify(exc: BaseException) -> str:
    text = str(exc).lower()
    if isinstance(exc, MemoryError) or "out of memory" in text or type(exc).__name__ == "OutOfMemoryError":
        return "oom"
    if is_unsupported_error(exc):
        return "unsupported"
    return "error"


def main() -> None:
    # Our protocol owns stdout; anything torch prints goes to stderr instead.
    proto = sys.stdout
    sys.stdout = sys.stderr
    worker = Worker(proto)
    handlers = {"hello": worker.hello, "setup": worker.setup, "sample": worker.sample,
                "teardown": worker.teardown, "smoke": worker.smoke}
    for line in sys.stdin:
        if not line.strip():
            continue
        req = json.loads(line)
        op = req.get("op")
        if op == "exit":
            break
        try:
            answer = handlers[op](req)
        except Exception as exc:
            worker.teardown_quietly()
            answer = {"type": "error", "status": _classify(exc), "message": f"{type(exc).__name__}: {exc}".strip()[:2000],
                      "traceback": traceback.format_exc(limit=4)}
        worker.send(answer)
