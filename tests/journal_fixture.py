"""The journal of a real interrupted run, for the journal fault tests (issue 26).

`python -m tests.journal_fixture` runs a real CPU bench (`--only 'linear/*/t1' --budget 0.05 --no-smoke`)
in a temporary MPSUP_HOME, SIGKILLs it once a dozen workloads are journaled (no handler runs: only the
journal holds them) and stores the journal as INTERRUPTED. That takes half a minute on a 2-core machine, so
the tests damage copies of the stored file; `tests/test_bench_faults.py` still kills a live bench at test time.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

INTERRUPTED = Path(__file__).resolve().parent / "fixtures" / "journals" / "interrupted-linear-t1.journal.jsonl"
COMMAND = ["bench", "--device", "cpu", "--only", "linear/*/t1", "--budget", "0.05", "--no-smoke"]


def workload_lines(journal: Path) -> int:
    try:
        return sum(1 for ln in journal.read_bytes().splitlines() if ln.startswith(b'{"workload"'))
    except OSError:
        return 0


def kill_after(home: Path, workloads: int = 12, timeout: float = 300.0) -> Path:
    """Run the bench with MPSUP_HOME=home, SIGKILL it once `workloads` are journaled; the journal left."""
    env = {**os.environ, "MPSUP_HOME": str(home)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "mpsup", *COMMAND],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    deadline = time.monotonic() + timeout
    try:
        while True:
            journals = list((home / "runs").glob("*.journal.jsonl"))
            if journals and workload_lines(journals[0]) >= workloads:
                break
            if proc.poll() is not None:
                raise RuntimeError(f"the bench ended before {workloads} workloads: {proc.communicate()[1][-2000:]!r}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"the bench did not journal {workloads} workloads within {timeout:.0f} s")
            time.sleep(0.02)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)  # mpsup and its worker, as a power cut would
        proc.communicate(timeout=60)
    return journals[0]


def main() -> int:
    with tempfile.TemporaryDirectory() as tmp:
        journal = kill_after(Path(tmp))
        INTERRUPTED.parent.mkdir(parents=True, exist_ok=True)
        INTERRUPTED.write_bytes(journal.read_bytes())
    print(f"{INTERRUPTED}: {workload_lines(INTERRUPTED)} workloads")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
