"""Snapshot -> facts: what the checks need to know, each field None when not known."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from mpsup.host import parsers
from mpsup.host import snapshot as snap


@dataclass(frozen=True)
class HostFacts:
    kernel: str | None  # "Darwin", "Linux", ...
    kernel_machine: str | None  # machine from `uname -a`
    arm64_hardware: bool | None  # hw.optional.arm64, or proven by a translated process
    # sysctl.proc_translated as mpsup's own `sysctl` call saw it: it describes mpsup's process, so it
    # never judges the target Python (python_translated does, read by the probe inside it).
    mpsup_translated: bool | None
    macos_version: str | None
    macos_build: str | None
    macos_version_source: str | None
    compat_version_seen: str | None  # 10.16 or 16.0 style version a Python may report
    cpu_brand: str | None
    memory_bytes: int | None
    gpu: parsers.GpuInfo
    battery: parsers.Battery | None
    low_power_mode: bool | None
    thermal: parsers.Thermal | None
    env: dict[str, str]
    interpreter: dict[str, Any] | None
    environments: list[dict[str, Any]] | None  # install-rc's candidates; None: not recorded
    energy_meter: dict[str, Any] | None = None  # the meter an MPS run would read, or why none; None: not recorded
    swap: parsers.Swap | None = None  # `sysctl vm.swapusage`; None: not read
    memory_pressure: str | None = None  # normal, warn, critical; None: not read
    energy_mode: str | None = None  # automatic, low, high (pmset -g powermode / lowpowermode); None: not read
    wired_limit_mb: int | None = None  # iogpu.wired_limit_mb (0: macOS's default); None: not read
    # What a bench reads at each visit, read once at capture: {"device", "values", "reads", "absent"}; None: not
    # recorded (older snapshots)
    readings: dict[str, Any] | None = None

    def reading(self, key: str) -> Any:
        """One machine-state figure (host/machine_state.py), None where not read."""
        values = (self.readings or {}).get("values")
        return values.get(key) if isinstance(values, dict) else None

    @property
    def is_macos(self) -> bool | None:
        if self.kernel is not None:
            return self.kernel == "Darwin"
        if self.interpreter and self.interpreter.get("platform"):
            return self.interpreter.get("platform") == "darwin"
        return None

    @property
    def torch(self) -> dict[str, Any] | None:
        return (self.interpreter or {}).get("torch")

    @property
    def python_translated(self) -> bool | None:
        """Whether the target Python runs under Rosetta 2, from the probe; None in older snapshots."""
        value = (self.interpreter or {}).get("proc_translated")
        return value if isinstance(value, bool) else None


def _version_tuple(v: str) -> tuple[int, ...]:
    out = []
    for part in v.split("."):
        number = parsers.bounded_int(part)
        if number is None:
            break
        out.append(number)
    return tuple(out)


def is_compat_version(v: str | None) -> bool:
    # Pythons built against old SDKs see macOS 11+ as 10.16; some see macOS 26 as 16.0.
    return v is not None and _version_tuple(v)[:2] in ((10, 16), (16, 0))


def _macos_version(s: snap.Snapshot, sysctl: dict[str, str]) -> tuple[str | None, str | None, str | None]:
    candidates: list[tuple[str, parsers.OsVersion]] = []
    plist = s.files.get(snap.SYSTEM_VERSION_PLIST)
    if plist:
        candidates.append(("SystemVersion.plist", parsers.parse_system_version_plist(plist)))
    sw = s.output(snap.SW_VERS)
    if sw:
        candidates.append(("sw_vers", parsers.parse_sw_vers(sw)))
    if sysctl.get("kern.osproductversion"):
        candidates.append(("kern.osproductversion", parsers.OsVersion("macOS", sysctl["kern.osproductversion"], None)))
    build = next((c.build for _, c in candidates if c.build), None) or sysctl.get("kern.osversion")
    # Prefer a source that is not a compatibility alias: a process can be shown 10.16 by all of them.
    for source, c in candidates:
        if c.version and not is_compat_version(c.version):
            return c.version, build, source
    for source, c in candidates:
        if c.version:
            return c.version, build, source
    return None, build, None


def _arm64_hardware(sysctl: dict[str, str], some_process_translated: bool) -> bool | None:
    arm64 = parsers.sysctl_int(sysctl, "hw.optional.arm64")
    if arm64 is not None:
        return arm64 == 1
    # Only Apple silicon runs Rosetta 2; an Intel Mac has no hw.optional.arm64 but names its CPU.
    if some_process_translated:
        return True
    if sysctl.get("machdep.cpu.brand_string", "").startswith("Intel"):
        return False
    return None


def _sysctl_text(s: snap.Snapshot) -> str:
    """Every sysctl line the snapshot holds. An older snapshot asked for all keys at once, and sysctl, exiting
    non-zero on a key this Mac lacks, had still printed the others: they are read whatever its exit code."""
    main = s.output(snap.SYSCTL)
    if main is not None:
        return main + "\n" + (s.output(snap.SYSCTL_TRANSLATED) or "")
    combined = s.commands.get(snap.SYSCTL_COMBINED)
    return combined.stdout if combined is not None else ""


def facts_from_snapshot(s: snap.Snapshot) -> HostFacts:
    uname_text = s.output(snap.UNAME)
    uname = parsers.parse_uname_a(uname_text) if uname_text else parsers.Uname(None, None, None)
    sysctl_text = _sysctl_text(s)
    sysctl = parsers.parse_sysctl(sysctl_text)
    version, build, source = _macos_version(s, sysctl)
    interp = s.interpreter
    compat = None
    if interp and is_compat_version(interp.get("mac_ver")):
        compat = interp.get("mac_ver")
    elif is_compat_version(sysctl.get("kern.osproductversioncompat")):
        compat = sysctl.get("kern.osproductversioncompat")
    translated = parsers.sysctl_int(sysctl, "sysctl.proc_translated")
    prof_text = s.output(snap.SYSTEM_PROFILER)
    gpu = parsers.parse_system_profiler(prof_text) if prof_text else parsers.GpuInfo(None, None, None, None, None)
    batt_text = s.output(snap.PMSET_BATT)
    pm_text = s.output(snap.PMSET)
    therm_text = s.output(snap.PMSET_THERM)
    return HostFacts(
        kernel=uname.system,
        kernel_machine=uname.machine,
        arm64_hardware=_arm64_hardware(
            sysctl, translated == 1 or bool(interp and interp.get("proc_translated") is True)
        ),
        mpsup_translated=None if translated is None else translated == 1,
        macos_version=version,
        macos_build=build,
        macos_version_source=source,
        compat_version_seen=compat,
        cpu_brand=sysctl.get("machdep.cpu.brand_string"),
        memory_bytes=parsers.sysctl_int(sysctl, "hw.memsize"),
        gpu=gpu,
        battery=parsers.parse_pmset_batt(batt_text) if batt_text else None,
        low_power_mode=parsers.low_power_mode(parsers.parse_pmset_settings(pm_text)) if pm_text else None,
        thermal=parsers.parse_pmset_therm(therm_text) if therm_text else None,
        env=dict(s.env),
        interpreter=interp,
        environments=s.environments,
        energy_meter=s.energy_meter,
        swap=parsers.parse_swapusage(swap_text) if (swap_text := s.output(snap.SWAP)) else None,
        memory_pressure=parsers.memory_pressure(pressure) if (pressure := s.output(snap.PRESSURE)) else None,
        energy_mode=parsers.energy_mode(parsers.parse_pmset_settings(pm_text)) if pm_text else None,
        wired_limit_mb=_wired_limit(s.output(snap.WIRED_LIMIT)),
        readings=s.readings,
    )


def _wired_limit(text: str | None) -> int | None:
    return parsers.sysctl_int(parsers.parse_sysctl(text), "iogpu.wired_limit_mb") if text else None
