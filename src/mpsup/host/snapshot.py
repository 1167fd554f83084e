"""Snapshots: everything the doctor reads, captured once, replayable anywhere.

Format `mpsup.snapshot/1` is documented in docs/snapshot.md. Readers accept any
`mpsup.snapshot/1.x`; unknown keys are kept and ignored.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from mpsup.errors import UserError
from mpsup.store import atomic_write_text
from mpsup.syscmd import run_command

SCHEMA = "mpsup.snapshot/1"

SW_VERS = "sw_vers"
UNAME = "uname -a"
SYSCTL = "sysctl hw machdep kern sysctl.proc_translated"
PMSET = "pmset -g"
PMSET_BATT = "pmset -g batt"
PMSET_THERM = "pmset -g therm"
SYSTEM_PROFILER = "system_profiler -json SPHardwareDataType SPDisplaysDataType"
SYSTEM_VERSION_PLIST = "/System/Library/CoreServices/SystemVersion.plist"

COMMANDS: dict[str, tuple[list[str], float]] = {
    SW_VERS: (["sw_vers"], 10),
    UNAME: (["uname", "-a"], 10),
    SYSCTL: (["sysctl", "hw", "machdep", "kern", "sysctl.proc_translated"], 10),
    PMSET: (["pmset", "-g"], 10),
    PMSET_BATT: (["pmset", "-g", "batt"], 10),
    PMSET_THERM: (["pmset", "-g", "therm"], 10),
    SYSTEM_PROFILER: (["system_profiler", "-json", "SPHardwareDataType", "SPDisplaysDataType"], 60),
}

# The variables that change what MPS does; names only, so a snapshot never carries secrets.
MPS_ENV_PREFIXES = ("PYTORCH_MPS_", "PYTORCH_ENABLE_MPS", "PYTORCH_DEBUG_MPS", "MTL_", "METAL_")
MPS_ENV_NAMES = ("PYTORCH_ENABLE_MPS_FALLBACK", "OMP_NUM_THREADS", "MKL_NUM_THREADS")


@dataclass(frozen=True)
class CommandOutput:
    returncode: int | None
    stdout: str
    stderr: str = ""


@dataclass(frozen=True)
class Snapshot:
    schema: str = SCHEMA
    captured_at: str = ""
    commands: dict[str, CommandOutput] = field(default_factory=dict)
    files: dict[str, str] = field(default_factory=dict)
    env: dict[str, str] = field(default_factory=dict)
    interpreter: dict[str, Any] | None = None

    def output(self, key: str) -> str | None:
        """Stdout of a command that ran and succeeded; None means not known."""
        out = self.commands.get(key)
        if out is None or out.returncode != 0:
            return None
        return out.stdout

    def to_json(self) -> dict[str, Any]:
        return {
            "schema": self.schema,
            "captured_at": self.captured_at,
            "commands": {
                k: {"returncode": v.returncode, "stdout": v.stdout, "stderr": v.stderr}
                for k, v in self.commands.items()
            },
            "files": dict(self.files),
            "env": dict(self.env),
            "interpreter": self.interpreter,
        }


def mps_env(environ: dict[str, str] | os._Environ[str]) -> dict[str, str]:
    return {k: v for k, v in environ.items() if k.startswith(MPS_ENV_PREFIXES) or k in MPS_ENV_NAMES}


def capture(python: Path | None = None, *, run_probe: bool = True) -> Snapshot:
    from mpsup.probe import run_interpreter_probe

    commands: dict[str, CommandOutput] = {}
    for key, (argv, timeout) in COMMANDS.items():
        res = run_command(argv, timeout=timeout)
        commands[key] = CommandOutput(res.returncode, res.stdout, res.stderr)
    files: dict[str, str] = {}
    plist = Path(SYSTEM_VERSION_PLIST)
    with contextlib.suppress(OSError):  # absent off macOS: "not known"
        files[SYSTEM_VERSION_PLIST] = plist.read_text(errors="replace")
    interpreter = run_interpreter_probe(python or Path(sys.executable)) if run_probe else None
    return Snapshot(
        captured_at=datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        commands=commands,
        files=files,
        env=mps_env(os.environ),
        interpreter=interpreter,
    )


def _fail(path: Path, problem: str) -> UserError:
    return UserError(f"{path}: {problem}")


def snapshot_from_json(doc: Any, path: Path) -> Snapshot:
    if not isinstance(doc, dict):
        raise _fail(path, "not a snapshot (top level is not a JSON object)")
    schema = doc.get("schema")
    if not isinstance(schema, str) or not (schema == SCHEMA or schema.startswith(SCHEMA + ".")):
        raise _fail(path, f"unsupported snapshot schema {schema!r} (expected {SCHEMA!r})")
    commands_raw = doc.get("commands", {})
    if not isinstance(commands_raw, dict):
        raise _fail(path, "'commands' must be an object")
    commands: dict[str, CommandOutput] = {}
    for key, value in commands_raw.items():
        if not isinstance(value, dict):
            raise _fail(path, f"commands[{key!r}] must be an object")
        rc = value.get("returncode")
        out = value.get("stdout", "")
        err = value.get("stderr", "")
        if (rc is not None and (not isinstance(rc, int) or isinstance(rc, bool))) or not isinstance(out, str):
            raise _fail(path, f"commands[{key!r}] needs an integer returncode and string stdout")
        commands[key] = CommandOutput(rc, out, err if isinstance(err, str) else "")
    files = doc.get("files", {})
    env = doc.get("env", {})
    for name, value in (("files", files), ("env", env)):
        if not isinstance(value, dict) or not all(isinstance(v, str) for v in value.values()):
            raise _fail(path, f"'{name}' must be an object of strings")
    interpreter = doc.get("interpreter")
    if interpreter is not None and not isinstance(interpreter, dict):
        raise _fail(path, "'interpreter' must be an object or null")
    if interpreter is not None and interpreter.get("torch") is not None and not isinstance(
        interpreter.get("torch"), dict
    ):
        raise _fail(path, "'interpreter.torch' must be an object or null")
    captured = doc.get("captured_at", "")
    return Snapshot(
        schema=schema,
        captured_at=captured if isinstance(captured, str) else "",
        commands=commands,
        files=dict(files),
        env=dict(env),
        interpreter=interpreter,
    )


def load_snapshot(path: Path) -> Snapshot:
    try:
        text = path.read_text()
    except OSError as exc:
        raise _fail(path, f"cannot read snapshot ({exc.strerror or exc})") from None
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise _fail(path, f"not valid JSON (line {exc.lineno}: {exc.msg})") from None
    return snapshot_from_json(doc, path)


def save_snapshot(snapshot: Snapshot, path: Path) -> None:
    atomic_write_text(path, json.dumps(snapshot.to_json(), indent=2) + "\n")
