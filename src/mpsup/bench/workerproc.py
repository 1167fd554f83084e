"""Start a worker inside a target interpreter and talk JSON lines to it over a private pair of pipes.

The protocol never touches the worker's stdin or stdout: code being measured (a `module:function`
model, a native library) may print to file descriptor 1, and what it prints must not be taken for
an answer. As in pyperf, dedicated descriptors are handed over with pass_fds; the worker's fd 1 and
fd 2 both go to a private log file whose tail explains a crash."""

from __future__ import annotations

import atexit
import contextlib
import json
import math
import os
import queue
import signal
import stat
import subprocess
import tempfile
import threading
import weakref
from pathlib import Path
from typing import Any

from mpsup.errors import UserError
from mpsup.safe_files import stat_input
from mpsup.syscmd import clean_env
from mpsup.waits import announced

WORKER_DIR = Path(__file__).resolve().parent.parent / "worker"
MLX_WORKER = Path(__file__).resolve().parent.parent / "worker_mlx" / "main.py"
STACKS = ("torch", "mlx")

# One answer line: a sample batch is a few tens of KiB; anything near this is not our worker talking.
MAX_ANSWER_BYTES = 16 << 20

# Points fd 1 at the log even if started by hand, checks torch first (a Python without it gets one clear answer, not a
# traceback), then loads the
# worker package by file location under a private name: nothing is added to sys.path, so mpsup's
# site-packages (and its torch) stay invisible to the measured environment.
BOOT = (
    "import os, sys\n"
    "os.dup2(2, 1)\n"
    "answers = int(sys.argv[3])\n"
    "try:\n"
    "    import torch\n"
    "except Exception as exc:\n"
    "    import json\n"
    "    missing = isinstance(exc, ModuleNotFoundError) and exc.name == 'torch'\n"
    "    msg = {'type': 'no-torch', 'missing': missing, 'message': (type(exc).__name__ + ': ' + str(exc))[:500]}\n"
    "    os.write(answers, (json.dumps(msg) + '\\n').encode())\n"
    "    sys.exit(3)\n"
    "import importlib.util\n"
    "d = sys.argv[1]\n"
    "spec = importlib.util.spec_from_file_location('mpsup_worker', d + '/__init__.py', "
    "submodule_search_locations=[d])\n"
    "mod = importlib.util.module_from_spec(spec); sys.modules['mpsup_worker'] = mod; spec.loader.exec_module(mod)\n"
    "from mpsup_worker.main import main\n"
)
BOOT_CALL = "main(int(sys.argv[2]), answers)\n"
BOOT += BOOT_CALL

# The MLX worker: one file, loaded by location the same way, after mlx and mlx_lm are found importable.
MLX_BOOT = (
    "import os, sys\n"
    "os.dup2(2, 1)\n"
    "answers = int(sys.argv[3])\n"
    # Pinned before mlx starts its threads, so that they inherit the CPUs (see mlx_pin_env).
    "pin = os.environ.get('MPSUP_MLX_CPUS', '')\n"
    "if pin and hasattr(os, 'sched_setaffinity'):\n"
    "    try:\n"
    "        os.sched_setaffinity(0, {int(c) for c in pin.split(',')})\n"
    "    except (OSError, ValueError):\n"
    "        pass\n"
    "try:\n"
    "    import mlx.core, mlx_lm\n"
    "except Exception as exc:\n"
    "    import json\n"
    "    missing = isinstance(exc, ModuleNotFoundError) and (exc.name or '').split('.')[0] in ('mlx', 'mlx_lm')\n"
    "    msg = {'type': 'no-torch', 'package': 'mlx', 'missing': missing, "
    "'message': (type(exc).__name__ + ': ' + str(exc))[:500]}\n"
    "    os.write(answers, (json.dumps(msg) + '\\n').encode())\n"
    "    sys.exit(3)\n"
    "import importlib.util\n"
    "spec = importlib.util.spec_from_file_location('mpsup_mlx_worker', sys.argv[1])\n"
    "mod = importlib.util.module_from_spec(spec); sys.modules['mpsup_mlx_worker'] = mod; spec.loader.exec_module(mod)\n"
    "mod.main(int(sys.argv[2]), answers)\n"
)


class WorkerDied(Exception):
    def __init__(self, message: str, stderr_tail: str = "") -> None:
        super().__init__(message)
        self.stderr_tail = stderr_tail


class ProtocolError(WorkerDied):
    """An answer that is not what the protocol says: counted as a crash of the workload at hand."""


class NoTorch(Exception):
    """The stack's package (torch, or mlx and mlx_lm) cannot be imported in the target interpreter."""

    def __init__(self, missing: bool, message: str, package: str = "torch") -> None:
        super().__init__(message)
        self.missing = missing
        self.package = package


def check_interpreter(path: Path, flag: str = "--python") -> Path:
    """An absolute path to something we can execute, or one line saying why not.

    Absolute because the worker runs in the temp folder; not resolved, because a venv's python is a
    symlink whose location is what selects the venv."""
    p = Path(os.path.abspath(path.expanduser()))
    st = stat_input(p, "interpreter")  # a name too long or a folder we may not search: one line, no traceback
    if st is None:
        raise UserError(f"{flag} {path}: no such interpreter")
    if stat.S_ISDIR(st.st_mode):
        raise UserError(f"{flag} {path}: is a folder, not an interpreter (give its bin/python)")
    if not stat.S_ISREG(st.st_mode):
        raise UserError(f"{flag} {path}: not a regular file, so not an interpreter")
    if not os.access(p, os.X_OK):
        raise UserError(f"{flag} {path}: not executable (permission denied)")
    return p


def last_line(text: str) -> str:
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    return lines[-1][:300] if lines else ""


_live: weakref.WeakSet[WorkerProcess] = weakref.WeakSet()


@atexit.register
def _kill_live_workers() -> None:
    # However mpsup ends (an uncaught error included), no worker outlives it.
    for w in list(_live):
        w.kill()


def _finite_numbers(v: Any) -> bool:
    return isinstance(v, list) and all(
        isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) for x in v
    )


def _valid(ans: dict[str, Any], expect: str) -> bool:
    kind = ans.get("type")
    if kind == "error":
        return isinstance(ans.get("message", ""), str) and isinstance(ans.get("status", "error"), str)
    if kind != expect:
        return False
    if kind == "hello":
        return isinstance(ans.get("available"), bool)
    if kind == "ready":
        calls = ans.get("calls")
        return isinstance(calls, int) and not isinstance(calls, bool) and calls >= 1
    if kind == "samples":
        dev = ans.get("device")
        return _finite_numbers(ans.get("host")) and (dev is None or _finite_numbers(dev))
    if kind == "done":
        return isinstance(ans.get("memory", {}), dict)
    if kind == "smoke":
        return isinstance(ans.get("status"), str)
    if kind == "truth":
        return isinstance(ans.get("outputs"), list) and isinstance(ans.get("digest"), str)
    return True


# What each request must be answered with (besides an error answer).
ANSWERS = {
    "hello": "hello",
    "setup": "ready",
    "sample": "samples",
    "teardown": "done",
    "smoke": "smoke",
    "census": "census",
    "truth": "truth",
}


class WorkerProcess:
    def __init__(self, python: Path, *, env: dict[str, str] | None = None, stack: str = "torch") -> None:
        self.python = python
        self.stack = stack
        boot, where = (MLX_BOOT, MLX_WORKER) if stack == "mlx" else (BOOT, WORKER_DIR)
        self._stderr = tempfile.TemporaryFile()  # noqa: SIM115 - lives as long as the worker; closed in close()
        req_r, req_w = os.pipe()
        ans_r, ans_w = os.pipe()
        try:
            self.proc = subprocess.Popen(
                [str(python), "-u", "-c", boot, str(where), str(req_r), str(ans_w)],
                stdin=subprocess.DEVNULL,
                stdout=self._stderr,  # stray prints of measured code land in the log, never in the protocol
                stderr=self._stderr,
                pass_fds=(req_r, ans_w),
                env=clean_env(env),
                cwd=tempfile.gettempdir(),  # a cwd holding a torch/ folder must not shadow the real one
                # Its own process group: a terminal's Ctrl-C reaches mpsup alone, which then stops the
                # worker and everything the worker started (torch.compile's helpers) with one killpg.
                start_new_session=True,
            )
        except OSError as exc:
            for fd in (req_w, ans_r):
                os.close(fd)
            self._stderr.close()
            raise UserError(f"{python}: cannot run this interpreter ({exc.strerror or exc})") from None
        finally:
            os.close(req_r)
            os.close(ans_w)
        _live.add(self)
        self._requests = os.fdopen(req_w, "w", encoding="utf-8")
        self._answers = os.fdopen(ans_r, "rb")
        self._lines: queue.Queue[bytes | None] = queue.Queue()
        self._workload = "the workload"  # the last one set up: what samples and teardown are of
        threading.Thread(target=self._pump, daemon=True).start()

    def _pump(self) -> None:
        # Ends at EOF, i.e. when the worker (and anything holding its end of the pipe) is gone.
        with self._answers:
            while line := self._answers.readline(MAX_ANSWER_BYTES):
                self._lines.put(line)
        self._lines.put(None)

    def stderr_tail(self, chars: int = 2000) -> str:
        try:
            size = self._stderr.seek(0, os.SEEK_END)
            self._stderr.seek(max(0, size - 4 * chars))
            return self._stderr.read().decode("utf-8", "replace")[-chars:]
        except (OSError, ValueError):
            return ""

    def request(self, doc: dict[str, Any], timeout: float = 600.0) -> dict[str, Any]:
        try:
            self._requests.write(json.dumps(doc) + "\n")
            self._requests.flush()
        except (BrokenPipeError, OSError, ValueError):
            raise self._died() from None
        try:
            with announced(self._waiting_for(doc), timeout):
                line = self._lines.get(timeout=timeout)
        except queue.Empty:
            self.kill()
            raise WorkerDied(f"worker gave no answer in {timeout:.0f}s", self.stderr_tail()) from None
        if line is None:
            raise self._died()
        ans = self._parse(line)
        if ans.get("type") == "no-torch":
            package = "mlx" if ans.get("package") == "mlx" else "torch"
            raise NoTorch(bool(ans.get("missing")), str(ans.get("message", "")), package)
        expect = ANSWERS.get(str(doc.get("op")), "")
        if not _valid(ans, expect):
            raise self._malformed(f"a {ans.get('type')!r} answer that does not fit a {doc.get('op')!r} request")
        return ans

    def _waiting_for(self, doc: dict[str, Any]) -> str:
        """What an answer to `doc` is awaited from, as the wait's line names it."""
        op = str(doc.get("op"))
        spec = doc.get("workload")
        if isinstance(spec, dict) and isinstance(spec.get("name"), str):
            self._workload = spec["name"][:200]
        what = {
            "hello": f"to start (importing {'mlx' if self.stack == 'mlx' else 'torch'})",
            "setup": f"to set up {self._workload}",
            "sample": f"to time {self._workload}",
            "teardown": f"to free {self._workload}",
            "census": f"to count the ops of {self._workload}",
            "smoke": f"to run the smoke test {str(doc.get('feature'))[:100]}",
        }.get(op, f"to answer {op[:40]}")
        return f"the worker in {self.python} {what}"

    def _parse(self, line: bytes) -> dict[str, Any]:
        if not line.endswith(b"\n"):
            raise self._malformed(
                f"an answer line over {MAX_ANSWER_BYTES >> 20} MiB"
                if len(line) >= MAX_ANSWER_BYTES
                else "a cut-off answer"
            )
        try:
            ans = json.loads(line)
        except (ValueError, RecursionError):
            raise self._malformed("an answer that is not JSON") from None
        if not isinstance(ans, dict):
            raise self._malformed("an answer that is not a JSON object")
        return ans

    def _malformed(self, what: str) -> ProtocolError:
        # A worker that breaks the protocol cannot be trusted with the next request either.
        self.kill()
        return ProtocolError(f"worker sent {what}", self.stderr_tail())

    def _died(self) -> WorkerDied:
        try:
            rc = self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.kill()
            rc = self.proc.returncode
        how = f"killed by signal {-rc}" if rc < 0 else f"exited with code {rc}"
        return WorkerDied(f"worker {how}", self.stderr_tail())

    @property
    def alive(self) -> bool:
        return self.proc.poll() is None

    def kill(self) -> None:
        """SIGKILL to the worker's whole process group, then reap it."""
        if self.proc.returncode is None:
            # Not reaped yet, so the group id is still the worker's own: it cannot name a stranger.
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except OSError:
                with contextlib.suppress(OSError):
                    self.proc.kill()
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=30)
        _live.discard(self)

    def close(self, *, force: bool = False) -> None:
        """Ask the worker to exit (or, with force, kill it at once); either way it is gone afterwards."""
        if self.alive and not force:
            try:
                self._requests.write('{"op": "exit"}\n')
                self._requests.flush()
                self.proc.wait(timeout=10)
            except (OSError, ValueError, subprocess.TimeoutExpired):
                pass
        self.kill()
        with contextlib.suppress(OSError):
            self._requests.close()
        self._stderr.close()


def mlx_pin_env(cpus: tuple[int, ...] | None, thread_cpus: tuple[int, ...] | None) -> dict[str, str]:
    """Where an MLX worker runs, whole: the CPUs every worker is pinned to, else the one CPU a torch
    worker's calling thread is bound to. MLX computes on one thread of its own, and the CPU the scheduler
    gives it lasts the life of the process, so two unpinned workers of one MLX lean a paired run one way
    (docs/evidence/mlx.md). Always set, so that a value inherited from the user's shell cannot pin it."""
    where = cpus or (thread_cpus[:1] if thread_cpus else None)
    return {"MPSUP_MLX_CPUS": ",".join(map(str, where)) if where else ""}


def worker_env(
    threads: int | None, threads_on: tuple[int, ...] | None = None, *, cpu_fallback: bool = False
) -> dict[str, str]:
    """`threads_on`: bind intra-op thread i to CPU threads_on[i] (OpenMP places; the calling thread takes
    the first), so that every worker's threads sit alike instead of wherever the scheduler last put them.
    `cpu_fallback` (bench --allow-cpu-fallback): ops without an MPS kernel run on the CPU instead of failing."""
    # OpenMP threads busy-wait after each parallel region, by default long enough that with two workers taking
    # turns the idle one's would spin on the cores the measured one needs. Not sleeping at once (PASSIVE): a
    # sleeping helper is woken for every parallel region, which makes small ops 1.5-2.7x slower than in the
    # user's own process (docs/evidence/op_coverage.md). A short spin keeps helpers awake between the ops of a
    # phase and lets an idle worker's fall asleep within a fraction of a millisecond: libgomp counts spins,
    # LLVM's libomp (macOS) milliseconds.
    env: dict[str, str] = {"GOMP_SPINCOUNT": "10000", "KMP_BLOCKTIME": "1"}
    # Set either way, over what the user's shell exports: an inherited 1 would time a missing kernel's CPU
    # run as if the device had it, and a smoke test would pass on the CPU's answer.
    env["PYTORCH_ENABLE_MPS_FALLBACK"] = "1" if cpu_fallback else "0"
    if threads_on:
        # Bound when libgomp (or libomp) loads, i.e. at `import torch`: unbound, the scheduler may pack a
        # worker's threads onto one CPU or spread them, a state that outlives a small layer's whole measurement
        # and leans A/A runs (docs/evidence/cpu-aa-bias.md).
        env["OMP_PROC_BIND"] = "close"
        env["OMP_PLACES"] = ",".join(f"{{{c}}}" for c in threads_on)
        threads = threads or len(threads_on)
    if threads:
        # Thread pools must be sized before torch starts them, not only via set_num_threads.
        env["OMP_NUM_THREADS"] = str(threads)
    if os.environ.get("MPSUP_WORKER_TEST_HOOKS"):
        env["MPSUP_WORKER_TEST_HOOKS"] = os.environ["MPSUP_WORKER_TEST_HOOKS"]
    return env
