"""The one way out to the system: every external command goes through `run_command`.

No shell, a timeout, and an environment cleaned of variables that would make a child Python
import the wrong packages. Failure is data, never an exception.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

# A child Python must see its own environment, not ours: PYTHONPATH would let mpsup's
# site-packages (and its torch) shadow the target's, and macOS sets __PYVENV_LAUNCHER__ in
# framework builds so that a child would think it runs in our venv.
_POISONED_VARS = ("PYTHONPATH", "PYTHONHOME", "__PYVENV_LAUNCHER__", "PYTHONSTARTUP", "PYTHONNOUSERSITE")


@dataclass(frozen=True)
class CommandResult:
    argv: tuple[str, ...]
    returncode: int | None  # None: could not be started or timed out
    stdout: str
    stderr: str
    timed_out: bool = False

    @property
    def ok(self) -> bool:
        return self.returncode == 0


# Flags on every pip mpsup runs: never wait for an answer, never print the upgrade nag into output we parse.
PIP_FLAGS = ("--no-input", "--disable-pip-version-check")


def pip_command(python: Path | str, subcommand: str, *args: str) -> list[str]:
    """`python -m pip SUBCOMMAND` with mpsup's fixed flags, then args."""
    return [str(python), "-m", "pip", subcommand, *PIP_FLAGS, *args]


def clean_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in _POISONED_VARS}
    if extra:
        env.update(extra)
    return env


def run_command(
    argv: Sequence[str | Path],
    *,
    timeout: float = 30.0,
    env: Mapping[str, str] | None = None,
    input_text: str | None = None,
    cwd: Path | None = None,
) -> CommandResult:
    args = tuple(str(a) for a in argv)
    if not args:
        raise ValueError("empty command")
    exe = args[0]
    if os.sep not in exe and shutil.which(exe) is None:
        return CommandResult(args, None, "", f"{exe}: command not found")
    try:
        proc = subprocess.run(
            args,
            capture_output=True,
            text=True,
            errors="replace",
            timeout=timeout,
            env=dict(env) if env is not None else clean_env(),
            input=input_text,
            stdin=None if input_text is not None else subprocess.DEVNULL,
            cwd=cwd,
            check=False,
        )
    except subprocess.TimeoutExpired as exc:
        out = exc.stdout.decode(errors="replace") if isinstance(exc.stdout, bytes) else (exc.stdout or "")
        return CommandResult(args, None, out, f"timed out after {timeout:g}s", timed_out=True)
    except OSError as exc:
        return CommandResult(args, None, "", f"{exe}: {exc.strerror or exc}")
    return CommandResult(args, proc.returncode, proc.stdout, proc.stderr)
