"""Pure parsers of macOS command output. Each takes text and returns plain values.

They are lenient about whitespace, prompts and stray markup, because real captures come
pasted from terminals and issue trackers.
"""

from __future__ import annotations

import json
import plistlib
import re
from dataclasses import dataclass

_KEY_VALUE = re.compile(r"^\s*([A-Za-z][A-Za-z ]*?):\s+(\S.*?)\s*$")

# No fact these commands print needs more digits; a longer number is damage, read as unknown rather than
# letting int() refuse it or float() make it infinite.
MAX_DIGITS = 20


def bounded_int(digits: str) -> int | None:
    """A decimal integer of at most MAX_DIGITS digits, else None."""
    if not digits.isascii() or not digits.isdigit() or len(digits) > MAX_DIGITS:
        return None
    return int(digits)


@dataclass(frozen=True)
class OsVersion:
    product_name: str | None
    version: str | None
    build: str | None


def parse_sw_vers(text: str) -> OsVersion:
    fields: dict[str, str] = {}
    for line in text.splitlines():
        m = _KEY_VALUE.match(line)
        if m and m.group(1) in ("ProductName", "ProductVersion", "BuildVersion"):
            fields.setdefault(m.group(1), m.group(2))
    return OsVersion(fields.get("ProductName"), fields.get("ProductVersion"), fields.get("BuildVersion"))


def parse_system_version_plist(text: str) -> OsVersion:
    try:
        data = plistlib.loads(text.encode())
    except Exception:
        return OsVersion(None, None, None)
    if not isinstance(data, dict):
        return OsVersion(None, None, None)
    version = data.get("ProductUserVisibleVersion") or data.get("ProductVersion")
    return OsVersion(data.get("ProductName"), version, data.get("ProductBuildVersion"))


_SYSCTL_LINE = re.compile(r"^([a-z][A-Za-z0-9_\-]*(?:\.[A-Za-z0-9_\-]+)+):\s?(.*)$")


def parse_sysctl(text: str) -> dict[str, str]:
    """`sysctl a b c` prints `name: value`; a value may continue on following lines."""
    values: dict[str, str] = {}
    last: str | None = None
    for raw in text.splitlines():
        m = _SYSCTL_LINE.match(raw)
        if m:
            last = m.group(1)
            values[last] = m.group(2).strip()
        elif last is not None and raw.strip():
            values[last] = f"{values[last]}\n{raw.strip()}"
    return values


def sysctl_int(values: dict[str, str], name: str) -> int | None:
    raw = values.get(name)
    if raw is None:
        return None
    words = raw.split()
    if not words:
        return None
    sign, digits = ("-", words[0][1:]) if words[0].startswith("-") else ("", words[0])
    value = bounded_int(digits)
    return None if value is None else int(f"{sign}{value}")


@dataclass(frozen=True)
class Swap:
    total_bytes: int
    used_bytes: int


_SWAP_FIELD = re.compile(r"\b(total|used|free)\s*=\s*([0-9]+)(?:[.,]([0-9]+))?\s*([KMGTP]?)", re.IGNORECASE)
_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40, "P": 1 << 50}


def parse_swapusage(text: str) -> Swap | None:
    """`sysctl vm.swapusage`: `vm.swapusage: total = 2048.00M  used = 1017.50M  free = 1030.50M  (encrypted)`."""
    line = parse_sysctl(text).get("vm.swapusage")
    if line is None:
        return None
    sizes: dict[str, int | None] = {}
    for m in _SWAP_FIELD.finditer(line):
        whole = bounded_int(m.group(2))
        # Digits past the sixth after the point are below a byte at any of these units.
        fraction = (m.group(3) or "")[:6]
        sizes[m.group(1).lower()] = (
            None if whole is None else int(float(f"{whole}.{fraction or 0}") * _UNITS[m.group(4).upper()])
        )
    total, used = sizes.get("total"), sizes.get("used")
    if total is None or used is None:
        return None
    return Swap(total, used)


# kern.memorystatus_vm_pressure_level reports xnu's NOTE_MEMORYSTATUS_PRESSURE_* flags (sys/event.h).
PRESSURE_LEVELS = {1: "normal", 2: "warn", 4: "critical"}


def memory_pressure(text: str) -> str | None:
    """`sysctl kern.memorystatus_vm_pressure_level` -> normal, warn, critical (another number: `level N`)."""
    level = sysctl_int(parse_sysctl(text), "kern.memorystatus_vm_pressure_level")
    if level is None:
        return None
    return PRESSURE_LEVELS.get(level, f"level {level}")


@dataclass(frozen=True)
class Battery:
    source: str | None  # "AC Power", "Battery Power", "UPS Power"
    percent: int | None
    state: str | None  # "charging", "discharging", "charged", "AC attached; not charging", ...

    @property
    def on_battery(self) -> bool | None:
        if self.source is None:
            return None
        return self.source.lower().startswith("battery")


_BATT_SOURCE = re.compile(r"(?:Now drawing|Currently drawing) from '([^']+)'")
_BATT_LINE = re.compile(r"(\d{1,3})%;\s*([^;]+?)(?:;|$)")


def parse_pmset_batt(text: str) -> Battery:
    source = None
    percent = None
    state = None
    m = _BATT_SOURCE.search(text)
    if m:
        source = m.group(1)
    for line in text.splitlines():
        m2 = _BATT_LINE.search(line)
        if m2:
            percent = int(m2.group(1))
            rest = line[m2.end(1) + 2 :]
            rest = re.sub(r"\s*present:\s*\w+\s*$", "", rest)
            parts = [p.strip() for p in rest.split(";") if p.strip()]
            # The time estimate ("4:10 remaining", "(no estimate)") is noise for our purpose.
            parts = [p for p in parts if not re.search(r"remaining|no estimate", p)]
            state = "; ".join(parts)
            break
    return Battery(source, percent, state or None)


def parse_pmset_settings(text: str) -> dict[str, str]:
    """`pmset -g`: settings in use. Later sections ("Currently in use") override earlier ones."""
    settings: dict[str, str] = {}
    for raw in text.splitlines():
        line = raw.replace("*", "").strip()
        if not line or line.endswith(":") or "%" in line.split(" ", 1)[0]:
            continue
        m = re.match(r"^([A-Za-z][A-Za-z ]*?[A-Za-z])\s+(\S.*)$", line)
        if m:
            settings[m.group(1)] = m.group(2).strip()
    return settings


def low_power_mode(settings: dict[str, str]) -> bool | None:
    mode = energy_mode(settings)
    return None if mode is None else mode == "low"


# `pmset -g` names the energy mode `powermode` on Macs with High Power Mode (0 automatic, 1 low, 2 high), else
# `lowpowermode` (0 or 1): alfredapp/low-power-mode-workflow#4, ronyfadel/BatteriesReleases#13.
ENERGY_MODES = {0: "automatic", 1: "low", 2: "high"}


def energy_mode(settings: dict[str, str]) -> str | None:
    """automatic, low or high from `pmset -g`'s settings; another number is `mode N`; None where neither key is."""
    for key in ("powermode", "lowpowermode"):
        words = settings.get(key, "").split()
        number = bounded_int(words[0]) if words else None
        if number is not None:
            return ENERGY_MODES.get(number, f"mode {number}")
    return None


# libkern/OSThermalNotification.h on macOS: the levels of the notify key com.apple.system.thermalpressurelevel.
THERMAL_PRESSURE_KEY = "com.apple.system.thermalpressurelevel"
THERMAL_PRESSURE_LEVELS = {0: "nominal", 1: "moderate", 2: "heavy", 3: "trapping", 4: "sleeping"}
# NSProcessInfoThermalState: Foundation's four levels.
THERMAL_STATES = {0: "nominal", 1: "fair", 2: "serious", 3: "critical"}


def thermal_pressure_name(level: int | None) -> str | None:
    """A thermal pressure level by name; a level this mpsup does not know is `level N`, never nominal."""
    if level is None:
        return None
    return THERMAL_PRESSURE_LEVELS.get(level, f"level {level}")


def thermal_state_name(state: int | None) -> str | None:
    if state is None:
        return None
    return THERMAL_STATES.get(state, f"state {state}")


def parse_notifyutil(text: str, key: str = THERMAL_PRESSURE_KEY) -> int | None:
    """`notifyutil -g KEY` prints `KEY N`; anything else (a failure line, another key) is not known."""
    for line in text.splitlines():
        words = line.split()
        if len(words) == 2 and words[0] == key:
            return bounded_int(words[1])
    return None


@dataclass(frozen=True)
class Thermal:
    thermal_warning: str | None  # None: no warning recorded
    performance_warning: str | None
    cpu_speed_limit: int | None
    known: bool


def parse_pmset_therm(text: str) -> Thermal:
    if not text.strip():
        return Thermal(None, None, None, known=False)
    thermal = perf = None
    for line in text.splitlines():
        s = line.strip()
        low = s.lower()
        if "thermal warning level" in low:
            if "no thermal warning" not in low:
                thermal = s
        elif "performance warning level" in low and "no performance warning" not in low:
            perf = s
    m = re.search(r"CPU_Speed_Limit\s*=\s*(\d+)", text)
    limit = bounded_int(m.group(1)) if m else None
    # Apple silicon prints only "No ... has been recorded" notes under any load (exelban/stats#749): that says
    # nothing, so it is not known. A recorded warning or an Intel Mac's CPU_Speed_Limit says something.
    return Thermal(thermal, perf, limit, known=bool(thermal or perf) or limit is not None)


@dataclass(frozen=True)
class GpuInfo:
    chip: str | None
    gpu_cores: int | None
    metal: str | None
    memory_gb: float | None
    model: str | None


def _indented_fields(text: str) -> dict[str, str]:
    fields: dict[str, str] = {}
    for line in text.splitlines():
        m = re.match(r"^\s*([A-Za-z][A-Za-z0-9 ()]*?):\s+(\S.*?)\s*$", line)
        if m:
            fields.setdefault(m.group(1), m.group(2))
    return fields


def _memory_gb(raw: str | None) -> float | None:
    if not raw:
        return None
    m = re.match(r"([0-9]{1,20}(?:\.[0-9]{1,6})?)\s*(GB|TB|MB)", raw)
    if not m:
        return None
    value = float(m.group(1))
    return value * {"GB": 1.0, "TB": 1024.0, "MB": 1 / 1024}[m.group(2)]


def parse_system_profiler_text(text: str) -> GpuInfo:
    fields = _indented_fields(text)
    cores = None
    if "Chipset Model" in fields and fields.get("Type") == "GPU":
        cores_raw = fields.get("Total Number of Cores")
    else:
        cores_raw = None
        # Hardware and Displays sections both say "Total Number of Cores"; take the GPU's.
        for block in re.split(r"\n(?=\s*Chipset Model:)", text)[1:]:
            cores_raw = _indented_fields(block).get("Total Number of Cores")
    if cores_raw and cores_raw.split():
        cores = bounded_int(cores_raw.split()[0])
    return GpuInfo(
        chip=fields.get("Chip") or fields.get("Chipset Model"),
        gpu_cores=cores,
        metal=fields.get("Metal Support") or fields.get("Metal Family"),
        memory_gb=_memory_gb(fields.get("Memory")),
        model=fields.get("Model Name"),
    )


def parse_system_profiler_json(text: str) -> GpuInfo:
    """`system_profiler -json SPHardwareDataType SPDisplaysDataType`. Raises ValueError if not JSON."""
    data = json.loads(text)
    if not isinstance(data, dict):
        raise ValueError("system_profiler JSON is not an object")
    hw = (data.get("SPHardwareDataType") or [{}])[0]
    displays = data.get("SPDisplaysDataType") or []
    gpu = next((d for d in displays if isinstance(d, dict) and d.get("sppci_model")), None) or (
        displays[0] if displays and isinstance(displays[0], dict) else {}
    )
    cores_raw = gpu.get("sppci_cores")
    metal_raw = gpu.get("spdisplays_mtlgpufamilysupport") or gpu.get("spdisplays_metalfamily") or ""
    metal = metal_raw.replace("spdisplays_", "").replace("metal", "Metal ") if metal_raw else None
    return GpuInfo(
        chip=hw.get("chip_type") or gpu.get("sppci_model"),
        gpu_cores=bounded_int(cores_raw) if isinstance(cores_raw, str) else None,
        metal=metal.strip() if metal else None,
        memory_gb=_memory_gb(hw.get("physical_memory")),
        model=hw.get("machine_name"),
    )


def parse_system_profiler(text: str) -> GpuInfo:
    stripped = text.lstrip()
    if stripped.startswith("{"):
        try:
            return parse_system_profiler_json(stripped)
        except (ValueError, AttributeError, TypeError, IndexError):
            return GpuInfo(None, None, None, None, None)
    return parse_system_profiler_text(text)


# A command's own type beside its parser, laid out as OsVersion above is: alike in layout, not in fields.
@dataclass(frozen=True)
class Uname:
    system: str | None
    release: str | None
    machine: str | None


def parse_uname_a(text: str) -> Uname:
    line = text.strip().splitlines()[0] if text.strip() else ""
    parts = line.split()
    if not parts:
        return Uname(None, None, None)
    machine = parts[-1] if len(parts) > 2 else None
    return Uname(parts[0], parts[2] if len(parts) > 2 else None, machine)
