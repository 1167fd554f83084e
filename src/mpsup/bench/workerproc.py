"""Start a worker inside a target interpreter and talk JSON lines to it."""

from __future__ import annotations

import json
import os
import queue
import subprocess
import tempfile
import threading
from pathlib import Path
from typing import Any

from mpsup.syscmd import clean_env

WORKER_DIR = Path(__file__).resolve().parent.parent / "worker"

# Loads the worker package by file location under a private name: nothing is added to sys.path,
# so mpsup's site-packages (and its torch) stay invisible to the measured environment.
BOOT = (
    "import importlib.util, sys\n"
    "d = sys.argv[1]\n"
    "spec = importlib.util.spec_from_file_location('mpsup_worker', d + '/__init__.py', submodule_search_locations=[d])\n"
    "mod = importlib.util.module_from_spec(spec); sys.modules['mpsup_worker'] = mod; spec.loader.exec_module(mod)\n"
    "from mpsup_worker.main import main\n"
    "main()\n"
)


class WorkerDied(Exception):
    def __init__(self, message: str, stderr_tail: str = "") -> None:
        super().__init__(message)
        self.stderr_tail = stderr_tail


class WorkerProcess:
    def __init__(self, python: Path, *, env: dict[str, str] | None = None) -> None:
        self.python = python
        self._stderr = tempfile.TemporaryFile(mode="w+")  # noqa: SIM115 - lives as long as the worker; closed in close()
        self.proc = subprocess.Popen(
            [str(python), "-u", "-c", BOOT, str(WORKER_DIR)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._stderr,
            text=True,
            env=clean_env(env),
            cwd=tempfile.gettempdir(),  # a cwd holding a torch/ folder must not shadow the real one
        )
        self._lines: queue.Queue[str | None] = queue.Queue()
        threading.Thread(target=self._pump, daemon=True).start()

    def _pump(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self._lines.put(line)
        self._lines.put(None)

    def stderr_tail(self, chars: int = 2000) -> str:
        try:
            self._stderr.seek(0)
            return self._stderr.read()[-chars:]
        except (OSError, ValueError):
            return ""

    def request(self, doc: dict[str, Any], timeout: float = 600.0) -> dict[str, Any]:
        try:
            assert self.proc.stdin is not None
            self.proc.stdin.write(json.dumps(doc) + "\n")
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError):
            raise self._died() from None
        while True:
            try:
                line = self._lines.get(timeout=timeout)
            except queue.Empty:
                self.kill()
                raise WorkerDied(f"worker gave no answer in {timeout:.0f}s", self.stderr_tail()) from None
            if line is None:
                raise self._died()
            line = line.strip()
            if line.startswith("{"):
                return json.loads(line)

    def _died(self) -> WorkerDied:
        rc = self.proc.wait(timeout=30)
        how = f"killed by signal {-rc}" if rc < 0 else f"exited with code {rc}"
        return WorkerDied(f"worker {how}", self.stderr_tail())

    @property
    def alive(self) -> bool:
        return self.proc.poll() is None

    def kill(self) -> None:
        if self.alive:
            self.proc.kill()
            self.proc.wait(timeout=30)

    def close(self) -> None:
        if self.alive:
            try:
                assert self.proc.stdin is not None
                self.proc.stdin.write('{"op": "exit"}\n')
                self.proc.stdin.flush()
                self.proc.wait(timeout=10)
            except (OSError, subprocess.TimeoutExpired):
                self.kill()
        self._stderr.close()


def worker_env(threads: int | None) -> dict[str, str]:
    # OpenMP threads busy-wait after each parallel region by default; with two workers taking
    # turns, the idle one's spinning threads would steal the cores the measured one needs.
    env: dict[str, str] = {"OMP_WAIT_POLICY": "PASSIVE"}
    if threads:
        # Thread pools must be sized before torch starts them, not only via set_num_threads.
        env["OMP_NUM_THREADS"] = str(threads)
    if os.environ.get("MPSUP_WORKER_TEST_HOOKS"):
        env["MPSUP_WORKER_TEST_HOOKS"] = os.environ["MPSUP_WORKER_TEST_HOOKS"]
    return env
