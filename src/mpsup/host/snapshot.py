"""Snapshots: everything the doctor reads, captured once, replayable anywhere.

Format `mpsup.snapshot/1` is documented in docs/reference/snapshot.md. Readers accept any
`mpsup.snapshot/1.x`; unknown keys are kept and ignored.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mpsup import clock
from mpsup.errors import UserError
from mpsup.safe_files import atomic_write_text, read_json
from mpsup.syscmd import run_command

SCHEMA = "mpsup.snapshot/1"

SW_VERS = "sw_vers"
UNAME = "uname -a"
# Asked apart: sysctl exits non-zero on a key this Mac lacks (sysctl.proc_translated on an Intel Mac), and a failed
# command is "not known", every other key of it lost with it.
SYSCTL = "sysctl hw machdep kern"
SYSCTL_TRANSLATED = "sysctl sysctl.proc_translated"
SYSCTL_COMBINED = "sysctl hw machdep kern sysctl.proc_translated"  # older snapshots' one query: read, never run
SWAP = "sysctl vm.swapusage"
PRESSURE = "sysctl kern.memorystatus_vm_pressure_level"
WIRED_LIMIT = "sysctl iogpu.wired_limit_mb"  # what the GPU may wire (0: macOS's default); absent before macOS 14
PMSET = "pmset -g"
PMSET_BATT = "pmset -g batt"
PMSET_THERM = "pmset -g therm"
SYSTEM_PROFILER = "system_profiler -json SPHardwareDataType SPDisplaysDataType"
SYSTEM_VERSION_PLIST = "/System/Library/CoreServices/SystemVersion.plist"

COMMANDS: dict[str, tuple[list[str], float]] = {
    SW_VERS: (["sw_vers"], 10),
    UNAME: (["uname", "-a"], 10),
    SYSCTL: (["sysctl", "hw", "machdep", "kern"], 10),
    SYSCTL_TRANSLATED: (["sysctl", "sysctl.proc_translated"], 10),
    SWAP: (["sysctl", "vm.swapusage"], 10),
    PRESSURE: (["sysctl", "kern.memorystatus_vm_pressure_level"], 10),
    WIRED_LIMIT: (["sysctl", "iogpu.wired_limit_mb"], 10),
    PMSET: (["pmset", "-g"], 10),
    PMSET_BATT: (["pmset", "-g", "batt"], 10),
    PMSET_THERM: (["pmset", "-g", "therm"], 10),
    SYSTEM_PROFILER: (["system_profiler", "-json", "SPHardwareDataType", "SPDisplaysDataType"], 60),
}

# The variables that change what MPS does; names only, so a snapshot never carries secrets. The same tuple as
# worker/main.py's, which records them in each run.
MPS_ENV_PREFIXES = ("PYTORCH_MPS_", "PYTORCH_ENABLE_MPS", "PYTORCH_DEBUG_MPS", "PYTORCH_METAL_", "MTL_", "METAL_")
MPS_ENV_NAMES = ("PYTORCH_ENABLE_MPS_FALLBACK", "OMP_NUM_THREADS", "MKL_NUM_THREADS")

# A snapshot is command text and a few small documents: far below this, whatever the Mac.
MAX_SNAPSHOT_BYTES = 64 << 20

# What the probe writes, by key, and the JSON types each may take (null is always allowed).
# Checked on load so that a hand-edited or hostile snapshot fails as one line, not deep in a check.
_INTERPRETER_TYPES: dict[str, tuple[type, ...]] = {
    "executable": (str,),
    "version": (str,),
    "implementation": (str,),
    "machine": (str,),
    "bits": (int,),
    "free_threaded": (bool,),
    "in_venv": (bool,),
    "conda": (bool,),
    "externally_managed": (bool,),
    "pip": (bool,),
    "uv": (str,),
    "platform": (str,),
    "mac_ver": (str,),
    "proc_translated": (bool,),
    "libc": (str,),
    "loadavg": (list,),
    "cpu_count": (int,),
    "torch_error": (str,),
}
_TORCH_TYPES: dict[str, tuple[type, ...]] = {
    "version": (str,),
    "version_full": (str,),
    "mps_built": (bool,),
    "mps_available": (bool,),
    "mps_unavailable_reason": (str,),
    "cuda_available": (bool,),
    "has_compile_shader": (bool,),
    "has_grouped_mm": (bool,),
    "has_float8_e4m3fn": (bool,),
    "mps_op_ok": (bool,),
    "mps_error": (str,),
    "mps_name": (str,),
    "mps_core_count": (int,),
    "recommended_max_memory": (int, float),
}
# The parts of an install-rc record a snapshot keeps: enough to list it, never its index URL
# (which may carry a mirror's credentials) or its wheel details.
ENVIRONMENT_KEYS: dict[str, tuple[type, ...]] = {
    "name": (str,),
    "mode": (str,),
    "torch_version": (str,),
    "torch_version_full": (str,),
    "python_version": (str,),
    "channel": (str,),
    "created_at": (str,),
    "python": (str,),
    "mps_available": (bool,),
    "python_present": (bool,),
}


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
    # install-rc's candidate environments on the captured machine; None: not recorded (older snapshots)
    environments: list[dict[str, Any]] | None = None
    # The energy meter a run on this machine's device would read ({"name", "reads", "device"}), or why none
    # ({"name": null, "why", "device"}); None: not recorded (older snapshots)
    energy_meter: dict[str, Any] | None = None
    # The machine state a bench reads at each visit (host/machine_state.py): {"device", "values": {key: value},
    # "reads": [text], "absent": {what: why}}; None: not recorded (older snapshots)
    readings: dict[str, Any] | None = None

    def output(self, key: str) -> str | None:
        """Stdout of a command that ran and succeeded; None means not known."""
        out = self.commands.get(key)
        if out is None or out.returncode != 0:
            return None
        return out.stdout

    def to_json(self) -> dict[str, Any]:
        doc: dict[str, Any] = {
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
        if self.environments is not None:
            doc["environments"] = self.environments
        if self.energy_meter is not None:
            doc["energy_meter"] = self.energy_meter
        if self.readings is not None:
            doc["readings"] = self.readings
        return doc


def mps_env(environ: dict[str, str] | os._Environ[str]) -> dict[str, str]:
    return {k: v for k, v in environ.items() if k.startswith(MPS_ENV_PREFIXES) or k in MPS_ENV_NAMES}


def environment_summary(record: dict[str, Any]) -> dict[str, Any]:
    """The listable part of one install-rc record, values of unexpected types dropped."""
    out = {k: record[k] for k, types in ENVIRONMENT_KEYS.items() if isinstance(record.get(k), types)}
    if isinstance(record.get("python"), str):
        out["python_present"] = Path(record["python"]).is_file()
    return out


def recorded_environment_summaries() -> list[dict[str, Any]] | None:
    """None when the records cannot be read: the doctor then says "not known" and still runs."""
    from mpsup.envs.records import recorded_environments

    try:
        return [environment_summary(r) for r in recorded_environments()]
    except (OSError, UserError):
        return None


def device_in_use(interpreter: dict[str, Any] | None, platform: str = sys.platform) -> str:
    """The device a bench here measures: mps on a Mac, cuda where the target's torch sees a GPU, else cpu."""
    if platform == "darwin":
        return "mps"
    torch = (interpreter or {}).get("torch")
    return "cuda" if isinstance(torch, dict) and torch.get("cuda_available") is True else "cpu"


def energy_meter_summary(device: str = "mps") -> dict[str, Any]:
    """Which meter a run on `device` would read, opened and closed again: its name and what it reads, or why none."""
    from mpsup.energy.choose import choose_meter

    choice = choose_meter(device)
    if choice.meter is None:
        return {"name": None, "why": choice.why, "device": device}
    info = choice.meter.info
    choice.meter.close()
    return {"name": info.name, "reads": info.reads, "device": device}


def readings_summary(device: str) -> dict[str, Any]:
    """One reading of what a bench on `device` reads at each visit, and what is not known here."""
    from mpsup.host.machine_state import open_state

    state = open_state(device)
    try:
        return {"device": device, "values": state.read(), **state.describe()}
    finally:
        state.close()


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
    device = device_in_use(interpreter)
    return Snapshot(
        captured_at=clock.iso_now(),
        commands=commands,
        files=files,
        env=mps_env(os.environ),
        interpreter=interpreter,
        environments=recorded_environment_summaries(),
        energy_meter=energy_meter_summary(device),
        readings=readings_summary(device),
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
    interpreter = _interpreter_from_json(doc.get("interpreter"), path)
    environments = _environments_from_json(doc.get("environments"), path)
    energy = doc.get("energy_meter")
    if energy is not None and (
        not isinstance(energy, dict)
        or not all(isinstance(energy.get(k), str | None) for k in ("name", "why", "reads", "device"))
    ):
        raise _fail(path, "'energy_meter' must be an object of name, why, reads and device (text or null)")
    readings = _readings_from_json(doc.get("readings"), path)
    captured = doc.get("captured_at", "")
    return Snapshot(
        schema=schema,
        captured_at=captured if isinstance(captured, str) else "",
        commands=commands,
        files=dict(files),
        env=dict(env),
        interpreter=interpreter,
        environments=environments,
        energy_meter=energy,
        readings=readings,
    )


def _readings_from_json(readings: Any, path: Path) -> dict[str, Any] | None:
    """The machine-state reading: checked as a run record's readings are (runs/fields.py), one line if wrong."""
    from mpsup.runs.fields import Corrupt, check_machine_state, check_reading

    if readings is None:
        return None
    try:
        if not isinstance(readings, dict):
            raise Corrupt("readings: expected an object")
        if not isinstance(readings.get("device"), str | None):
            raise Corrupt("readings.device: expected text")
        check_reading(readings.get("values") or {}, "readings.values")
        check_machine_state({k: readings[k] for k in ("reads", "absent") if k in readings}, "readings")
    except Corrupt as exc:
        raise _fail(path, str(exc)) from None
    return readings


def _wrong_types(doc: dict[str, Any], types: dict[str, tuple[type, ...]]) -> list[str]:
    # bool is an int to Python, never to a snapshot: `"bits": true` is as wrong as `"bits": "64"`.
    def fits(value: Any, allowed: tuple[type, ...]) -> bool:
        return isinstance(value, allowed) and (bool in allowed or not isinstance(value, bool))

    return [k for k, allowed in types.items() if doc.get(k) is not None and not fits(doc[k], allowed)]


def _interpreter_from_json(interpreter: Any, path: Path) -> dict[str, Any] | None:
    if interpreter is None:
        return None
    if not isinstance(interpreter, dict):
        raise _fail(path, "'interpreter' must be an object or null")
    bad = _wrong_types(interpreter, _INTERPRETER_TYPES)
    if bad:
        raise _fail(path, f"interpreter.{bad[0]} has the wrong type ({type(interpreter[bad[0]]).__name__})")
    load = interpreter.get("loadavg")
    if load is not None and not all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in load):
        raise _fail(path, "interpreter.loadavg must be a list of numbers")
    torch = interpreter.get("torch")
    if torch is not None:
        if not isinstance(torch, dict):
            raise _fail(path, "'interpreter.torch' must be an object or null")
        bad = _wrong_types(torch, _TORCH_TYPES)
        if bad:
            raise _fail(path, f"interpreter.torch.{bad[0]} has the wrong type ({type(torch[bad[0]]).__name__})")
    return interpreter


def _environments_from_json(environments: Any, path: Path) -> list[dict[str, Any]] | None:
    if environments is None:
        return None
    if not isinstance(environments, list) or not all(isinstance(e, dict) for e in environments):
        raise _fail(path, "'environments' must be a list of objects or null")
    for i, env in enumerate(environments):
        bad = _wrong_types(env, ENVIRONMENT_KEYS)
        if bad:
            raise _fail(path, f"environments[{i}].{bad[0]} has the wrong type ({type(env[bad[0]]).__name__})")
    return environments


def load_snapshot(path: Path) -> Snapshot:
    # The shared reader: regular files only (a FIFO would hang), bounded, every parser failure one line.
    return snapshot_from_json(read_json(path, "snapshot", MAX_SNAPSHOT_BYTES), path)


def save_snapshot(snapshot: Snapshot, path: Path) -> None:
    atomic_write_text(path, json.dumps(snapshot.to_json(), indent=2) + "\n")
