from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
SHARED = REPO.parent / "shared"
REAL_MAC = SHARED / "data" / "real-mac"
MODEL_CONFIGS = SHARED / "data" / "model-configs"


@pytest.fixture(autouse=True)
def mpsup_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Every test gets its own data dir, so nothing is written outside tmp."""
    home = tmp_path / "mpsup-home"
    monkeypatch.setenv("MPSUP_HOME", str(home))
    for var in list(os.environ):
        if var.startswith("PYTORCH_MPS_") or var == "PYTORCH_ENABLE_MPS_FALLBACK":
            monkeypatch.delenv(var)
    return home


@pytest.fixture
def real_mac() -> Path:
    if not REAL_MAC.is_dir():
        pytest.skip("../shared/data/real-mac is not present in this checkout")
    return REAL_MAC


def run_cli(*args: str, input_text: str | None = None, env: dict[str, str] | None = None):
    """Run mpsup as a user would: a fresh process, so exit codes and streams are real."""
    import subprocess

    full_env = dict(os.environ)
    if env:
        full_env.update(env)
    return subprocess.run(
        [sys.executable, "-m", "mpsup", *args],
        capture_output=True,
        text=True,
        input=input_text,
        env=full_env,
        timeout=600,
        check=False,
    )


def count_reads(monkeypatch: pytest.MonkeyPatch, module: object) -> list[int]:
    """Patch `module.open_regular` so every read's length is recorded: proof of what a reader touched."""
    real_open = module.open_regular  # type: ignore[attr-defined]
    reads: list[int] = []

    def counting(path, what):  # type: ignore[no-untyped-def]
        fh = real_open(path, what)
        real_read = fh.read

        def read(n=-1):  # type: ignore[no-untyped-def]
            data = real_read(n)
            reads.append(len(data))
            return data

        fh.read = read
        return fh

    monkeypatch.setattr(module, "open_regular", counting)
    return reads
