"""Named readiness checks. Each reads HostFacts and returns one Finding; none can stop another."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from mpsup.doctor import mps_env, wheels
from mpsup.host.facts import HostFacts, _version_tuple
from mpsup.host.hygiene import HEAVY_THERMAL
from mpsup.host.state_words import reading_words


class Status(StrEnum):
    OK = "ok"
    WARN = "warn"
    FAIL = "fail"
    UNKNOWN = "unknown"


@dataclass(frozen=True)
class Finding:
    name: str
    title: str
    status: Status
    summary: str
    fix: str | None = None
    details: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "title": self.title,
            "status": self.status.value,
            "summary": self.summary,
            "fix": self.fix,
            "details": self.details,
        }


Check = Callable[[HostFacts], Finding]
CHECKS: list[tuple[str, str, Check]] = []


def check(name: str, title: str) -> Callable[[Check], Check]:
    def register(fn: Check) -> Check:
        CHECKS.append((name, title, fn))
        return fn

    return register


def _f(name: str, status: Status, summary: str, fix: str | None = None, **details: Any) -> Finding:
    title = next(t for n, t, _ in CHECKS if n == name)
    return Finding(name, title, status, summary, fix if status is not Status.OK else None, details)


PythonCheck = Callable[[HostFacts, dict[str, Any]], Finding]


def python_check(name: str, title: str) -> Callable[[PythonCheck], Check]:
    """A check that reads the target Python's facts (passed as its second argument). Where that Python
    could not be run, every such check says so in the same words, and its own body never runs."""

    def register(fn: PythonCheck) -> Check:
        def run(f: HostFacts) -> Finding:
            if not f.interpreter:
                return _f(
                    name,
                    Status.UNKNOWN,
                    "the target Python could not be run",
                    "pass a working interpreter with --python PATH",
                )
            return fn(f, f.interpreter)

        return check(name, title)(run)

    return register


ARM64_PYTHON_FIX = (
    "install a native arm64 Python (python.org universal2 installer, `brew install python` "
    "from /opt/homebrew, or `uv python install`), then make the venv from it"
)


NOT_A_MAC_FIX = "run mpsup on an Apple-silicon Mac (M1 or newer)"
INTEL_FIX = "use an Apple-silicon Mac (M1 or newer)"
# For a snapshot that lacks what this mpsup reads (an older capture, or one written by hand).
RECAPTURE_FIX = "capture again with this mpsup (`mpsup doctor --save-snapshot FILE`)"


def _os_name(f: HostFacts) -> str:
    platform = (f.interpreter or {}).get("platform")
    return f.kernel or (str(platform).capitalize() if platform else "unknown OS")


@check("apple-silicon", "Apple silicon Mac")
def check_apple_silicon(f: HostFacts) -> Finding:
    n = "apple-silicon"
    if f.is_macos is None:
        return _f(
            n, Status.UNKNOWN, "could not tell the operating system (uname gave nothing)", "run on the Mac itself"
        )
    if not f.is_macos:
        return _f(
            n, Status.FAIL, f"not a Mac ({_os_name(f)}): MPS needs an Apple-silicon Mac", NOT_A_MAC_FIX, kernel=f.kernel
        )
    arm = f.arm64_hardware
    if arm is None and "arm64" in (f.kernel_machine, (f.interpreter or {}).get("machine")):
        # Only Apple silicon runs an arm64 process (uname's or the Python's); under Rosetta both say x86_64.
        arm = True
    if arm is None:
        return _f(n, Status.UNKNOWN, "macOS, but the CPU architecture is not known", "check `sysctl hw.optional.arm64`")
    if not arm:
        return _f(n, Status.FAIL, "Intel Mac: MPS on Intel Macs is not supported by current PyTorch", INTEL_FIX)
    return _f(n, Status.OK, f"Apple silicon ({f.cpu_brand or f.gpu.chip or 'arm64'})", chip=f.cpu_brand)


@check("macos-version", f"macOS >= {wheels.show(wheels.MIN_MACOS_FOR_MPS)} (for torch {wheels.UPGRADE_TORCH}'s MPS)")
def check_macos_version(f: HostFacts) -> Finding:
    n = "macos-version"
    if f.is_macos is False:
        return _f(n, Status.UNKNOWN, f"not a Mac ({_os_name(f)}): no macOS to check", NOT_A_MAC_FIX)
    if not f.macos_version:
        return _f(
            n,
            Status.UNKNOWN,
            "macOS version not known (no SystemVersion.plist, sw_vers or kern.osproductversion)",
            "run `sw_vers` and check that it works",
        )
    shown = f"macOS {f.macos_version}" + (f" ({f.macos_build})" if f.macos_build else "")
    note = ""
    if f.compat_version_seen:
        note = f"; Python reports {f.compat_version_seen}, a compatibility alias, ignored"
    details = {"version": f.macos_version, "build": f.macos_build, "source": f.macos_version_source}
    have = _version_tuple(f.macos_version)
    if have < wheels.MIN_MACOS_FOR_MPS:
        need = wheels.show(wheels.MIN_MACOS_FOR_MPS)
        wheel_floor = wheels.wheel_macos_floor(_version_tuple(wheels.UPGRADE_TORCH)) or (0, 0)
        if have < wheel_floor:
            since = wheels.show(wheels.WHEEL_MACOS_FLOORS[0][0])
            where = (
                f"and its wheel does not install here (wheels from torch {since} on are for macOS "
                f"{wheels.show(wheel_floor)} and later)"
            )
        else:
            where = f"although its wheel installs on macOS {wheels.show(wheel_floor)}"
        return _f(
            n,
            Status.FAIL,
            f"{shown}: MPS in torch {wheels.UPGRADE_TORCH} needs macOS {need} or later, {where}{note}",
            f"update macOS (System Settings > General > Software Update) to {need} or later",
            **details,
        )
    return _f(n, Status.OK, f"{shown}{note}", **details)


@python_check("python", f"Python >= {wheels.show(wheels.MIN_PYTHON)}, CPython, 64-bit")
def check_python(f: HostFacts, i: dict[str, Any]) -> Finding:
    n = "python"
    desc = f"{i.get('implementation', '?')} {i.get('version', '?')} ({i.get('bits', '?')}-bit)"
    details = {k: i.get(k) for k in ("executable", "version", "implementation", "bits")}
    problems: list[tuple[str, str]] = []
    version = _version_tuple(str(i.get("version") or ""))
    if len(version) >= 2 and version[:2] < wheels.MIN_PYTHON:
        problems.append(
            (
                f"torch {wheels.UPGRADE_TORCH} needs Python {wheels.show(wheels.MIN_PYTHON)} or later",
                "make a venv from Python 3.11+ (`uv venv -p 3.12` or python.org's installer)",
            )
        )
    if i.get("implementation") not in (None, "cpython"):
        problems.append(("PyTorch wheels are built for CPython only", "use CPython 3.11+"))
    if i.get("bits") not in (None, 64):
        problems.append(("a 32-bit Python gets no torch", "use a 64-bit CPython"))
    if problems:
        return _f(n, Status.FAIL, f"{desc}: " + "; ".join(p for p, _ in problems), problems[0][1], **details)
    # A tick only for what was read: an older or hand-written snapshot may lack some of it.
    missing = [
        what
        for what, ok in (
            ("version", len(version) >= 2),
            ("implementation", i.get("implementation")),
            ("bits", i.get("bits")),
        )
        if not ok
    ]
    if missing:
        return _f(
            n,
            Status.UNKNOWN,
            f"{desc}: {', '.join(missing)} not known",
            RECAPTURE_FIX,
            **details,
        )
    return _f(n, Status.OK, desc, **details)


@python_check("python-arch", "Python runs natively on arm64 macOS")
def check_python_arch(f: HostFacts, i: dict[str, Any]) -> Finding:
    n = "python-arch"
    machine = i.get("machine")
    details: dict[str, Any] = {
        "machine": machine,
        "platform": i.get("platform"),
        "python_translated": f.python_translated,
        "mpsup_translated": f.mpsup_translated,
    }
    on_mac = i.get("platform") == "darwin" if i.get("platform") else f.is_macos
    if on_mac is False:
        return _f(
            n,
            Status.FAIL,
            f"{machine or '?'} Python on {_os_name(f)}: not a Mac, so no macOS arm64 torch and no MPS",
            NOT_A_MAC_FIX,
            **details,
        )
    if on_mac is None or not machine:
        return _f(
            n,
            Status.UNKNOWN,
            "the Python's platform or architecture is not known",
            RECAPTURE_FIX,
            **details,
        )
    if machine == "arm64":
        # A process under Rosetta is shown x86_64, so arm64 here is native whatever mpsup itself runs as.
        note = "; mpsup itself runs under Rosetta 2, which does not affect this Python" if f.mpsup_translated else ""
        return _f(n, Status.OK, f"arm64 on macOS, native{note}", **details)
    rosetta = f.python_translated is True or (
        f.python_translated is None and machine == "x86_64" and f.arm64_hardware is True
    )
    if rosetta:
        return _f(
            n,
            Status.FAIL,
            f"{machine} Python under Rosetta 2: no torch after {wheels.LAST_X86_MACOS_TORCH} and no MPS",
            ARM64_PYTHON_FIX,
            **details,
        )
    if f.arm64_hardware is False:
        return _f(
            n,
            Status.FAIL,
            f"{machine} Python on an Intel Mac: no torch after {wheels.LAST_X86_MACOS_TORCH} and no MPS",
            INTEL_FIX,
            **details,
        )
    return _f(
        n,
        Status.FAIL,
        f"{machine} Python, not arm64: no torch after {wheels.LAST_X86_MACOS_TORCH} and no MPS",
        ARM64_PYTHON_FIX,
        **details,
    )


@check("torch-wheels", "PyTorch macOS arm64 wheels for this Python")
def check_torch_wheels(f: HostFacts) -> Finding:
    n = "torch-wheels"
    i = f.interpreter
    if not i or not i.get("version"):
        return _f(n, Status.UNKNOWN, "Python version not known", "pass a working interpreter with --python PATH")
    tag = wheels.python_tag(str(i["version"]), bool(i.get("free_threaded")))
    have = ", ".join(wheels.MACOS_ARM64_WHEEL_TAGS)
    listed = tag in wheels.MACOS_ARM64_WHEEL_TAGS
    on_mac = i.get("platform") == "darwin" if i.get("platform") else f.is_macos
    if on_mac is False:
        return _f(
            n,
            Status.UNKNOWN,
            f"not a Mac ({_os_name(f)}): macOS arm64 wheels do not install here"
            + (f" (they exist for {tag})" if listed else ""),
            NOT_A_MAC_FIX,
            tag=tag,
        )
    if not listed:
        return _f(
            n,
            Status.FAIL,
            f"no macOS arm64 torch wheel for {tag} (published: {have})",
            "use one of those Pythons, e.g. `uv venv -p 3.12`",
            tag=tag,
        )
    machine = i.get("machine")
    if machine not in (None, "arm64"):
        return _f(
            n,
            Status.FAIL,
            f"wheels exist for {tag} on arm64, but this Python is {machine}: "
            f"it takes macOS x86_64 wheels, last published for torch {wheels.LAST_X86_MACOS_TORCH}",
            ARM64_PYTHON_FIX,
            tag=tag,
        )
    if on_mac is None or machine is None:
        return _f(
            n,
            Status.UNKNOWN,
            f"macOS arm64 wheels are published for {tag}; whether this Python is a macOS arm64 one is not known",
            RECAPTURE_FIX,
            tag=tag,
        )
    return _f(n, Status.OK, f"macOS arm64 wheels are published for {tag}", tag=tag)


@python_check("environment", "Environment")
def check_environment(f: HostFacts, i: dict[str, Any]) -> Finding:
    n = "environment"
    kind = "venv" if i.get("in_venv") else "conda" if i.get("conda") else "system Python"
    parts = [kind, "pip present" if i.get("pip") else "no pip", "uv present" if i.get("uv") else "no uv (optional)"]
    details = {"kind": kind, "pip": i.get("pip"), "uv": i.get("uv"), "externally_managed": i.get("externally_managed")}
    if i.get("externally_managed") and kind == "system Python":
        return _f(
            n,
            Status.WARN,
            ", ".join([*parts, "externally managed (PEP 668)"]),
            "installs need a venv: `python3 -m venv ~/.venvs/torch` (mpsup install-rc makes one for you)",
            **details,
        )
    if not i.get("pip") and not i.get("uv"):
        return _f(n, Status.WARN, ", ".join(parts), "install pip (`python -m ensurepip`) or uv", **details)
    return _f(n, Status.OK, ", ".join(parts), **details)


# torch 2.15's message when the process sees no Metal device; older builds blamed the macOS version.
_NO_METAL_GPU = re.compile(r"no supported Metal GPU|virtual machine, sandbox or container", re.IGNORECASE)
_SAYS_MACOS_FLOOR = re.compile(r"supported on mac ?os (\d+(?:\.\d+)*)\+", re.IGNORECASE)
NO_METAL_FIX = (
    "run this Python directly on the Mac, outside any virtual machine, sandbox or container "
    "(a sandboxed agent, IDE task or Docker/Lima VM sees no Metal GPU)"
)


def _mps_cause(f: HostFacts, ver: tuple[int, ...], floor: tuple[int, int] | None) -> tuple[str, str]:
    """Why this torch's MPS is unavailable, and what to do: (cause, fix)."""
    i = f.interpreter or {}
    reason = str((f.torch or {}).get("mps_unavailable_reason") or "")
    macos = _version_tuple(f.macos_version) if f.macos_version else None
    if _NO_METAL_GPU.search(reason):
        return "torch found no supported Metal GPU, as in a virtual machine, sandbox or container", NO_METAL_FIX
    if f.python_translated is True or i.get("machine") == "x86_64":
        return "an x86_64 process (Rosetta 2) cannot use MPS", ARM64_PYTHON_FIX
    if macos and floor and macos < floor:
        need = wheels.show(floor)
        older = wheels.last_torch_with_mps_on(macos)
        keep = ""
        if older:
            pin = f"torch<{older[0]}.{older[1] + 1}"
            keep = (
                f"; to keep MPS on macOS {f.macos_version} today, stay on torch {wheels.show(older)} (`pip install "
                f"'{pin}'`)"
            )
        cause = f"torch {wheels.show(ver[:2])}'s MPS needs macOS {need}; this Mac runs {f.macos_version}"
        wheel_floor = wheels.wheel_macos_floor(ver)
        if wheel_floor and macos >= wheel_floor:
            # pip judges the wheel's tag, not MPS's floor: from 2.15 it installs a torch whose MPS cannot run here.
            cause += (
                f"; its wheel is tagged for macOS {wheels.show(wheel_floor)} and later, so pip installs it here anyway"
            )
        return cause, f"update macOS to {need} or later{keep}"
    said = _SAYS_MACOS_FLOOR.search(reason)
    if said and macos and floor:
        # 2.9-2.14 say "supported on macOS 14.0+" also on macOS 15 and 26 when the process has no Metal device.
        return (
            f'torch says "supported on macOS {said.group(1)}+", yet macOS {f.macos_version} meets this build\'s floor '
            f"({wheels.show(floor)}): builds before 2.15 say so when the process sees no Metal GPU",
            NO_METAL_FIX,
        )
    if not macos and floor:
        return (
            f"macOS version not known; this build's MPS needs macOS {wheels.show(floor)}",
            "run `sw_vers` and check that it works",
        )
    told = f"; torch says: {reason}" if reason else ""
    return (
        f"unknown cause{told}",
        "run `python -c \"import torch; torch.ones(1, device='mps')\"` for torch's own message; "
        "report it with `mpsup doctor --save-snapshot FILE`",
    )


@python_check("torch-mps", "torch and MPS (today)")
def check_torch_mps(f: HostFacts, i: dict[str, Any]) -> Finding:
    n = "torch-mps"
    t = f.torch
    if t is None:
        why = i.get("torch_error", "not installed")
        return _f(
            n,
            Status.WARN,
            f"torch is not importable ({why})",
            "`pip install torch` in this environment, or `mpsup install-rc` for a side-by-side one",
        )
    ver_text = str(t.get("version") or "?")
    ver = _version_tuple(ver_text)
    floor = wheels.mps_macos_floor(ver)
    details = {k: t.get(k) for k in ("version", "mps_built", "mps_available", "mps_op_ok", "mps_unavailable_reason")}
    details["mps_macos_floor"] = wheels.show(floor) if floor else None
    if f.is_macos is False:
        return _f(
            n,
            Status.UNKNOWN,
            f"torch {ver_text} imports; not a Mac ({_os_name(f)}), so no MPS",
            NOT_A_MAC_FIX,
            **details,
        )
    if not t.get("mps_built"):
        cause = "an x86_64 build" if i.get("machine") == "x86_64" else "a build without MPS"
        fix = (
            INTEL_FIX
            if f.arm64_hardware is False
            else f"{ARM64_PYTHON_FIX}, and install torch's arm64 macOS wheel there"
        )
        return _f(n, Status.FAIL, f"torch {ver_text} has no MPS support compiled in ({cause})", fix, **details)
    if not t.get("mps_available"):
        cause, fix = _mps_cause(f, ver, floor)
        return _f(n, Status.FAIL, f"torch {ver_text}: MPS built but not available ({cause})", fix, **details)
    if t.get("mps_op_ok") is False:
        return _f(
            n,
            Status.FAIL,
            f"torch {ver_text}: a tensor op on mps failed: {t.get('mps_error', '?')}",
            "reinstall torch; if it persists, report it with `mpsup doctor --save-snapshot`",
            **details,
        )
    if t.get("mps_op_ok") is None:
        return _f(n, Status.OK, f"torch {ver_text}, MPS built and available (no test op recorded)", **details)
    return _f(n, Status.OK, f"torch {ver_text}, MPS built and available, a test op ran", **details)


def _gib(n: float | int | None) -> str:
    return "?" if n is None else f"{n / 2**30:.1f} GiB"


@check("gpu-memory", "GPU and memory")
def check_gpu_memory(f: HostFacts) -> Finding:
    n = "gpu-memory"
    t = f.torch or {}
    chip = t.get("mps_name") or f.gpu.chip or f.cpu_brand
    cores = t.get("mps_core_count") or f.gpu.gpu_cores
    memory = f.memory_bytes or (f.gpu.memory_gb * 2**30 if f.gpu.memory_gb else None)
    rec = t.get("recommended_max_memory")
    details: dict[str, Any] = {
        "chip": chip,
        "gpu_cores": cores,
        "metal": f.gpu.metal,
        "memory_bytes": memory,
        "recommended_max_memory": rec,
    }
    if f.is_macos is False:
        return _f(n, Status.UNKNOWN, f"not a Mac ({_os_name(f)}): no Apple GPU here", NOT_A_MAC_FIX, **details)
    if not f.is_macos:
        return _f(
            n,
            Status.UNKNOWN,
            "could not tell the operating system, so not the GPU either",
            "run on the Mac itself",
            **details,
        )
    if chip is None and memory is None:
        return _f(
            n,
            Status.UNKNOWN,
            "GPU and memory not known (system_profiler and sysctl gave nothing)",
            "check `system_profiler SPDisplaysDataType`",
            **details,
        )
    parts = [
        chip or "GPU ?",
        f"{cores} GPU cores" if cores else "GPU cores ?",
        f.gpu.metal or "Metal ?",
        f"{_gib(memory)} unified memory",
    ]
    if rec:
        parts.append(f"MPS working set up to {_gib(rec)}")
    if memory is not None and memory < 12 * 2**30:
        return _f(
            n,
            Status.WARN,
            ", ".join(parts) + ": large models will not fit",
            "bench with --model on smaller checkpoints or fewer tokens",
            **details,
        )
    return _f(n, Status.OK, ", ".join(parts), **details)


@check("hygiene", "Benchmark conditions")
def check_hygiene(f: HostFacts) -> Finding:
    n = "hygiene"
    warnings: list[tuple[str, str]] = []
    known: list[str] = []
    if f.battery is not None and f.battery.on_battery is not None:
        if f.battery.on_battery:
            warnings.append((f"on battery ({f.battery.percent}%)", "plug in the power adapter"))
        else:
            charge = f" ({f.battery.percent}%)" if f.battery.percent is not None else ""
            known.append(f"on {f.battery.source}{charge}")
    low_power = f.low_power_mode or f.reading("low_power_mode") is True or f.energy_mode == "low"
    if low_power:
        warnings.append(("Low Power Mode is on", "turn off Low Power Mode (System Settings > Battery)"))
    elif f.energy_mode is not None:
        known.append("High Power Mode" if f.energy_mode == "high" else f"energy mode {f.energy_mode}")
    elif f.low_power_mode is not None or f.reading("low_power_mode") is not None:
        known.append("Low Power Mode off")
    _thermal(f, warnings, known)
    load = (f.interpreter or {}).get("loadavg")
    cpus = (f.interpreter or {}).get("cpu_count") or 1
    if load:
        if load[0] > max(1.0, 0.5 * cpus):
            warnings.append(
                (f"load average {load[0]:.1f} on {cpus} CPUs", "close other busy programs before benchmarking")
            )
        else:
            known.append(f"load {load[0]:.1f}")
    pressure = f.memory_pressure or f.reading("memory_pressure")
    if pressure is not None:
        if pressure != "normal":
            warnings.append((f"memory pressure {pressure}", "quit memory-hungry apps before benchmarking"))
        else:
            known.append("memory pressure normal")
    if f.swap is not None and f.swap.used_bytes:
        known.append(f"{f.swap.used_bytes / 2**30:.1f} GiB swap in use")
    details: dict[str, Any] = {
        "on_battery": f.battery.on_battery if f.battery else None,
        "power_source": f.battery.source if f.battery else None,
        "battery_percent": f.battery.percent if f.battery else None,
        "low_power_mode": f.low_power_mode,
        "energy_mode": f.energy_mode,
        # Unknown (null) where pmset was not read, or said nothing (Apple silicon), as on_battery: false would claim
        # a check that never ran.
        "thermal_warning": (
            bool(f.thermal.thermal_warning or f.thermal.performance_warning)
            if f.thermal is not None and f.thermal.known
            else None
        ),
        "thermal_pressure": f.reading("thermal_pressure"),
        "thermal_state": f.reading("thermal_state"),
        "loadavg": load,
        "memory_pressure": pressure,
        "swap_used_bytes": f.swap.used_bytes if f.swap else None,
    }
    if warnings:
        return _f(n, Status.WARN, "; ".join(w for w, _ in warnings), "; ".join(x for _, x in warnings), **details)
    if not known:
        return _f(
            n, Status.UNKNOWN, "power, thermal state and load not known", "run `pmset -g batt` on the Mac", **details
        )
    return _f(n, Status.OK, ", ".join(known), **details)


def _thermal(f: HostFacts, warnings: list[tuple[str, str]], known: list[str]) -> None:
    """The thermal levels a bench reads (the notify key, NSProcessInfo), and pmset's warnings where it says any
    (Intel Macs: on Apple silicon `pmset -g therm` prints only notes, under any load)."""
    levels = [(label, v) for label, key in THERMAL_READINGS if isinstance(v := f.reading(key), str)]
    hot = [f"{label} {v}" for label, v in levels if v in HEAVY_THERMAL]
    if hot:
        warnings.append((", ".join(hot), "let the Mac cool down and retry"))
    elif levels:
        known.append(", ".join(f"{label} {v}" for label, v in levels))
    if f.thermal is not None and f.thermal.known:
        if (
            f.thermal.thermal_warning
            or f.thermal.performance_warning
            or (f.thermal.cpu_speed_limit is not None and f.thermal.cpu_speed_limit < 100)
        ):
            warnings.append(("thermal or performance warning recorded", "let the Mac cool down and retry"))
        else:
            known.append("no thermal warning")
    elif not levels and f.is_macos:
        known.append("thermal state not known")


THERMAL_READINGS = (("thermal pressure", "thermal_pressure"), ("thermal state", "thermal_state"))


@check("machine-state", "Readings taken at each bench visit")
def check_machine_state(f: HostFacts) -> Finding:
    n = "machine-state"
    r = f.readings
    if r is None:
        return _f(n, Status.UNKNOWN, "not recorded in this snapshot", RECAPTURE_FIX)
    values: dict[str, Any] = r["values"] if isinstance(r.get("values"), dict) else {}
    parts = reading_words(values)
    if f.wired_limit_mb is not None:
        wired = f.wired_limit_mb
        parts.append("GPU wired limit: macOS's default" if wired == 0 else f"GPU wired limit {wired} MB")
    absent: dict[str, Any] = r["absent"] if isinstance(r.get("absent"), dict) else {}
    missing = "; ".join(f"{what}: {why}" for what, why in absent.items())
    details: dict[str, Any] = {"device": r.get("device"), "values": values, "reads": r.get("reads"), "absent": absent}
    if not parts:
        return _f(n, Status.UNKNOWN, f"nothing readable here{': ' + missing if missing else ''}", None, **details)
    summary = ", ".join(parts) + (f"; not known here: {missing}" if missing else "")
    return _f(n, Status.OK, summary, **details)


@check("mps-env", "MPS environment variables")
def check_mps_env(f: HostFacts) -> Finding:
    n = "mps-env"
    active = mps_env.active_variables(f.env)
    if not active:
        return _f(n, Status.OK, "none set: torch's defaults apply")
    summary, risky = mps_env.describe(active, (f.torch or {}).get("version"))
    if risky:
        return _f(n, Status.WARN, summary, f"unset {' and '.join(risky)} while benchmarking", variables=active)
    return _f(n, Status.OK, summary, variables=active)


@python_check("mlx", "MLX (optional: bench --candidate mlx:PYTHON)")
def check_mlx(f: HostFacts, i: dict[str, Any]) -> Finding:
    n = "mlx"
    if "mlx" not in i:  # a snapshot from before this check: MLX is optional, so nothing is missing for torch
        return _f(n, Status.OK, "not recorded in this snapshot (optional; capture again to see it)")
    m = i.get("mlx")
    make = "`mpsup install-rc --mlx` makes an MLX environment beside this one"
    if not isinstance(m, dict):
        return _f(n, Status.OK, f"MLX is not installed in this Python (optional: {make})")
    if m.get("error"):
        return _f(n, Status.WARN, f"MLX is installed but does not import ({m['error']})", make, **m)
    ver = f"MLX {m.get('version')}" + ("" if m.get("mlx_lm") else " (without mlx-lm, which bench needs)")
    if f.is_macos is False:
        return _f(n, Status.OK, f"{ver} imports; not a Mac, so it runs on the CPU (no Metal)", **m)
    if not m.get("metal"):
        return _f(n, Status.WARN, f"{ver} imports but sees no GPU (Metal)", "install MLX's macOS arm64 wheel", **m)
    return _f(n, Status.OK, f"{ver} imports and sees the GPU (Metal)", **m)


@check("energy-meter", "Energy meter")
def check_energy_meter(f: HostFacts) -> Finding:
    n = "energy-meter"
    meter = f.energy_meter
    if meter is None:
        return _f(n, Status.UNKNOWN, "not recorded in this snapshot", RECAPTURE_FIX)
    device = meter.get("device")
    runs = f" (bench --device {device})" if isinstance(device, str) else ""
    if meter.get("name"):
        reads = f"{meter['name']}: {meter.get('reads') or ''}".rstrip(": ")
        return _f(n, Status.OK, f"{reads}{runs}", meter=meter["name"], device=device)
    why = str(meter.get("why") or "not known why")
    extra = {"cuda": "energy-nvidia"}.get(str(device), "energy-mac")
    fix = f"pip install 'mpsup[{extra}]'" if "not installed" in why else None
    # No meter costs only the energy figures: bench still times everything.
    return _f(n, Status.WARN, f"none{runs}: bench will time but not measure energy ({why})", fix, device=device)


def run_checks(facts: HostFacts) -> list[Finding]:
    findings = []
    for name, title, fn in CHECKS:
        try:
            findings.append(fn(facts))
        except Exception as exc:  # a broken check must not hide the others
            findings.append(
                Finding(
                    name,
                    title,
                    Status.UNKNOWN,
                    f"check crashed: {type(exc).__name__}: {exc}",
                    "report this with `mpsup doctor --save-snapshot`",
                )
            )
    return findings
