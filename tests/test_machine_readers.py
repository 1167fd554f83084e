"""The machine-state readers: the Mac's through fake libraries made of ctypes callbacks (the same ctypes calls a Mac
makes: argtypes, byref, objc_msgSend cast to each method's prototype), Linux's on a fake /proc and /sys written from
this project's build machine, NVML's through a fake module. Nothing here needs a Mac or a GPU; the one test that
reads a real libSystem is marked `mac`."""

from __future__ import annotations

import ctypes
import struct
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from mpsup.host import darwin, linux, parsers
from mpsup.host.machine_state import MacSource, open_state
from mpsup.host.nvml_state import NvmlState, open_nvml_state, reason_names
from mpsup.host.state_words import reading_words

# --- a fake libSystem: notify and sysctlbyname as C callbacks ------------------------------------------------

REGISTER = ctypes.CFUNCTYPE(ctypes.c_uint32, ctypes.c_char_p, ctypes.POINTER(ctypes.c_int))
GET_STATE = ctypes.CFUNCTYPE(ctypes.c_uint32, ctypes.c_int, ctypes.POINTER(ctypes.c_uint64))
CANCEL = ctypes.CFUNCTYPE(ctypes.c_uint32, ctypes.c_int)
SYSCTLBYNAME = ctypes.CFUNCTYPE(
    ctypes.c_int, ctypes.c_char_p, ctypes.c_void_p, ctypes.POINTER(ctypes.c_size_t), ctypes.c_void_p, ctypes.c_size_t
)


class FakeLibSystem:
    """libSystem's notify and sysctl entry points, answering from `levels` (one per get_state) and `sysctls`."""

    def __init__(self, levels: list[int], sysctls: dict[str, bytes], register_status: int = 0) -> None:
        self.levels = list(levels)
        self.sysctls = sysctls
        self.calls: list[tuple[Any, ...]] = []

        def register(name: bytes, token: Any) -> int:
            self.calls.append(("register", name))
            token[0] = 42
            return register_status

        def get_state(token: int, state: Any) -> int:
            self.calls.append(("get_state", token))
            if not self.levels:
                return 1  # NOTIFY_STATUS_INVALID_NAME: what a failed read says
            state[0] = self.levels.pop(0)
            return 0

        def cancel(token: int) -> int:
            self.calls.append(("cancel", token))
            return 0

        def sysctlbyname(name: bytes, old: int, oldlen: Any, new: int, newlen: int) -> int:
            value = self.sysctls.get(name.decode())
            if value is None:
                return -1  # ENOENT: a name this Mac lacks
            size = oldlen[0]
            if len(value) > size:
                return -1  # ENOMEM: the caller's buffer is too small
            ctypes.memmove(old, value, len(value))
            oldlen[0] = len(value)
            return 0

        # Kept on the object: a callback must outlive every call made through it.
        self.notify_register_check = REGISTER(register)
        self.notify_get_state = GET_STATE(get_state)
        self.notify_cancel = CANCEL(cancel)
        self.sysctlbyname = SYSCTLBYNAME(sysctlbyname)


def _int32(v: int) -> bytes:
    return struct.pack("=i", v)


# struct xsw_usage from `sysctl vm.swapusage`'s real figures (tests/snapshots.py: 2048.00M total, 1024.25M used)
SWAP = struct.pack("=QQQIi", 2048 << 20, int(1023.75 * 2**20), int(1024.25 * 2**20), 16384, 1)


def test_thermal_pressure_reads_each_level_through_one_token_and_cancels_it() -> None:
    lib = FakeLibSystem([0, 1, 2, 3, 4, 7], {})
    reader = darwin.ThermalPressure(lib)
    assert reader.registered
    got = [parsers.thermal_pressure_name(reader.read()) for _ in range(7)]
    # libkern/OSThermalNotification.h's five levels; a level this mpsup does not know is said as a number, never
    # nominal; a failed read (status 1) is not known.
    assert got == ["nominal", "moderate", "heavy", "trapping", "sleeping", "level 7", None]
    reader.close()
    assert lib.calls[0] == ("register", parsers.THERMAL_PRESSURE_KEY.encode())
    assert lib.calls[-1] == ("cancel", 42)
    assert {c[1] for c in lib.calls if c[0] == "get_state"} == {42}
    assert reader.read() is None  # cancelled: nothing is read with a token given back


def test_a_key_that_cannot_be_registered_is_not_known() -> None:
    reader = darwin.ThermalPressure(FakeLibSystem([0], {}, register_status=1000000))
    assert not reader.registered and reader.read() is None
    assert not darwin.ThermalPressure(SimpleNamespace()).registered  # a libSystem without notify at all


def test_sysctls_by_name_read_ints_text_and_the_swap_struct() -> None:
    lib = FakeLibSystem(
        [],
        {
            "kern.memorystatus_vm_pressure_level": _int32(4),
            "iogpu.wired_limit_mb": _int32(0),
            "kern.osversion": b"24D60\x00",
            "vm.swapusage": SWAP,
            "hw.memsize": struct.pack("=q", 64 << 30),
        },
    )
    assert darwin.sysctl_int(lib, "kern.memorystatus_vm_pressure_level") == 4
    assert darwin.sysctl_int(lib, "iogpu.wired_limit_mb") == 0
    assert darwin.sysctl_int(lib, "hw.memsize") == 64 << 30
    assert darwin.sysctl_text(lib, "kern.osversion") == "24D60"
    assert darwin.swap_used_bytes(lib) == int(1024.25 * 2**20)
    assert darwin.sysctl_int(lib, "no.such.name") is None
    assert darwin.sysctl_text(lib, "no.such.name") is None


def test_a_sysctl_of_an_unexpected_size_is_not_known() -> None:
    lib = FakeLibSystem([], {"vm.swapusage": SWAP[:16], "kern.memorystatus_vm_pressure_level": b"\x01\x00"})
    assert darwin.swap_used_bytes(lib) is None
    assert darwin.sysctl_int(lib, "kern.memorystatus_vm_pressure_level") is None


# --- a fake ObjC runtime: one C function answers objc_msgSend under every prototype it is cast to ---------------

GET_CLASS = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_char_p)
SEL = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_char_p)
# Receiver, selector and one argument: the widest call the reader makes (respondsToSelector:). A call cast to a
# two-argument prototype leaves the third register unread; the answer comes back in the return register, read as
# a long or a BOOL as the caller's prototype says (x86-64 and arm64 both return these in one register).
MSG_SEND = ctypes.CFUNCTYPE(ctypes.c_long, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p)
CLASS, INFO = 0x1000, 0x2000


class FakeObjc:
    def __init__(self, thermal_state: int = 2, low_power: bool = True, knows: tuple[bytes, ...] | None = None) -> None:
        self.selectors: dict[bytes, int] = {}
        self.sent: list[str] = []
        knows = knows if knows is not None else (b"thermalState", b"isLowPowerModeEnabled")

        def get_class(name: bytes) -> int:
            return CLASS if name == b"NSProcessInfo" else 0

        def sel(name: bytes) -> int:
            return self.selectors.setdefault(name, 0x100 + len(self.selectors))

        def send(receiver: int, selector: int, arg: int | None) -> int:
            name = next(k for k, v in self.selectors.items() if v == selector)
            self.sent.append(name.decode())
            if receiver == CLASS and name == b"processInfo":
                return INFO
            if receiver != INFO:
                return 0
            if name == b"respondsToSelector:":
                asked = next((k for k, v in self.selectors.items() if v == arg), b"")
                return int(asked in knows)
            return {b"thermalState": thermal_state, b"isLowPowerModeEnabled": int(low_power)}.get(name, 0)

        self.objc_getClass = GET_CLASS(get_class)
        self.sel_registerName = SEL(sel)
        self.objc_msgSend = MSG_SEND(send)


@pytest.mark.skipif(sys.maxsize < 2**32, reason="the fake objc_msgSend returns through a 64-bit register")
def test_process_info_asks_nsprocessinfo_through_objc_msgsend() -> None:
    objc = FakeObjc(thermal_state=2, low_power=True)
    assert darwin.process_info(objc) == {"thermal_state": 2, "low_power_mode": True}
    # Each method is asked whether it exists first: isLowPowerModeEnabled is macOS 12+.
    assert objc.sent[:2] == ["processInfo", "respondsToSelector:"]
    assert parsers.thermal_state_name(2) == "serious"


def test_process_info_without_a_method_or_a_class_is_not_known() -> None:
    older = FakeObjc(thermal_state=0, low_power=False, knows=(b"thermalState",))
    assert darwin.process_info(older) == {"thermal_state": 0, "low_power_mode": None}
    no_class = FakeObjc()
    no_class.objc_getClass = GET_CLASS(lambda name: 0)
    assert darwin.process_info(no_class) == {"thermal_state": None, "low_power_mode": None}


def test_the_mac_source_reads_every_figure_in_words() -> None:
    lib = FakeLibSystem([2], {"kern.memorystatus_vm_pressure_level": _int32(2), "vm.swapusage": SWAP})
    source = MacSource(lib, FakeObjc(thermal_state=1, low_power=False))
    assert source.read() == {
        "thermal_pressure": "heavy",
        "thermal_state": "fair",
        "low_power_mode": False,
        "memory_pressure": "warn",
        "swap_used_bytes": int(1024.25 * 2**20),
    }
    source.close()
    assert ("cancel", 42) in lib.calls


def test_open_state_on_a_mac_says_what_it_could_not_load() -> None:
    state = open_state("mps", platform="darwin", libsystem=lambda: None, objc=lambda: None)
    assert state.sources == [] and set(state.absent) == {
        "thermal pressure, memory pressure, swap",
        "thermal state, Low Power Mode",
    }
    assert state.read() == {}


@pytest.mark.mac
@pytest.mark.skipif(sys.platform != "darwin", reason="reads this Mac's own libSystem and Foundation")
def test_a_real_mac_answers_every_reader() -> None:
    state = open_state("mps")
    values = state.read()
    assert values["thermal_pressure"] in parsers.THERMAL_PRESSURE_LEVELS.values()
    assert values["thermal_state"] in parsers.THERMAL_STATES.values()
    assert values["memory_pressure"] in parsers.PRESSURE_LEVELS.values()
    assert isinstance(values["swap_used_bytes"], int)
    state.close()


# --- Linux: /proc and /sys ----------------------------------------------------------------------------------

# Captured on this project's build VM (Linux 6.18.44, 2 CPUs, 2026-12-07) while another job ran beside it.
PSI_CPU = "some avg10=0.76 avg60=6.97 avg300=5.99 total=29739419\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=0\n"
LOADAVG = "1.46 1.14 0.54 3/117 4626\n"
MEMINFO = "MemTotal:       24683724 kB\nSwapCached:            0 kB\nSwapTotal:       2097148 kB\nSwapFree:        1048572 kB\n"
STAT = "cpu  10132153 0 2133282 1239381 0 0 14 139 0 0\ncpu0 5066076 0 1066641 619690 0 0 7 70 0 0\n"


def _tree(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


def test_the_linux_parsers_read_real_proc_text() -> None:
    assert linux.parse_psi_some(PSI_CPU) == (0.76, 29739419)
    assert linux.parse_loadavg(LOADAVG) == (1.46, 3)
    assert linux.parse_swap_used(MEMINFO) == (2097148 - 1048572) * 1024
    assert linux.parse_steal_ticks(STAT) == 139
    assert linux.parse_psi_some("full avg10=1.0 total=5\n") == (None, None)
    assert linux.parse_loadavg("") == (None, None) and linux.parse_steal_ticks("") is None
    assert linux.parse_number("-5000\n") == -5000 and linux.parse_number("x") is None


def test_the_linux_reader_reads_what_exists_and_says_what_does_not(tmp_path: Path) -> None:
    root = _tree(
        tmp_path,
        {
            "proc/loadavg": LOADAVG,
            "proc/pressure/cpu": PSI_CPU,
            "proc/meminfo": MEMINFO,
            "proc/stat": STAT,
            "sys/devices/system/cpu/cpu0/cpufreq/scaling_cur_freq": "2400000\n",
            "sys/devices/system/cpu/cpu1/cpufreq/scaling_cur_freq": "3500000\n",
            "sys/devices/system/cpu/cpu2/cpufreq/scaling_cur_freq": "3600000\n",
            "sys/class/thermal/thermal_zone0/temp": "54000\n",
            "sys/class/thermal/thermal_zone1/temp": "-273000\n",  # a sensor that is not there
        },
    )
    reader = linux.LinuxReader(root)
    got = reader.read()
    assert got["cpu_mhz"] == 3500 and got["cpu_temp_c"] == 54.0
    assert got["cpu_pressure_us"] == 29739419 and got["cpu_pressure_avg10"] == 0.76
    assert got["memory_pressure_us"] is None and got["load1"] == 1.46 and got["runnable"] == 3
    assert got["swap_used_bytes"] == (2097148 - 1048572) * 1024
    assert reader.absent() == {"memory_pressure_us": "no /proc/pressure/memory (PSI needs Linux 4.20 or later)"}


def test_a_vm_without_cpufreq_or_thermal_zones_says_so(tmp_path: Path) -> None:
    state = open_state("cpu", platform="linux", linux_root=_tree(tmp_path, {"proc/loadavg": LOADAVG}))
    assert state.read()["cpu_mhz"] is None
    assert state.absent["CPU clock"] == "no cpufreq in /sys, as in most VMs"
    assert state.absent["CPU temperature"] == "no thermal zones in /sys, as in most VMs"


def test_a_huge_proc_file_is_read_only_up_to_its_bound(tmp_path: Path) -> None:
    big = tmp_path / "loadavg"
    big.write_text("1.0 " + "9" * (linux.MAX_FILE_BYTES * 4))
    assert len(linux.read_small(big) or "") == linux.MAX_FILE_BYTES
    assert linux.read_small(tmp_path / "absent") is None


# --- NVML ------------------------------------------------------------------------------------------------------


class FakeNvml:
    """pynvml's calls the reader makes. `old`: a pynvml before the rename to ClocksEventReasons."""

    def __init__(self, mask: int = 0x4 | 0x40, *, old: bool = False, fail: tuple[str, ...] = ()) -> None:
        self.mask, self.fail, self.shut = mask, fail, 0
        if old:
            self.nvmlDeviceGetCurrentClocksThrottleReasons = lambda h: self.mask
        else:
            self.nvmlDeviceGetCurrentClocksEventReasons = lambda h: self.mask

    def __getattr__(self, name: str) -> Any:
        raise AttributeError(name)

    def nvmlInit(self) -> None: ...

    def nvmlShutdown(self) -> None:
        self.shut += 1

    def nvmlDeviceGetHandleByIndex(self, i: int) -> str:
        return f"h{i}"

    def nvmlDeviceGetName(self, h: str) -> bytes:
        return b"NVIDIA H100 80GB HBM3"

    def _maybe(self, name: str, value: Any) -> Any:
        if name in self.fail:
            raise RuntimeError("NVML_ERROR_NOT_SUPPORTED")
        return value

    def nvmlDeviceGetClockInfo(self, h: str, clock: int) -> int:
        return self._maybe("clock", 1980 if clock == 1 else 0)

    def nvmlDeviceGetTemperature(self, h: str, sensor: int) -> int:
        return self._maybe("temp", 61)

    def nvmlDeviceGetPowerUsage(self, h: str) -> int:
        return self._maybe("power", 412345)

    def nvmlDeviceGetUtilizationRates(self, h: str) -> Any:
        return self._maybe("util", SimpleNamespace(gpu=97, memory=40))

    def nvmlDeviceGetComputeRunningProcesses(self, h: str) -> list[Any]:
        return self._maybe("procs", [SimpleNamespace(pid=1), SimpleNamespace(pid=2), SimpleNamespace(pid=3)])


def test_nvml_reasons_are_named_and_an_unknown_bit_is_kept() -> None:
    assert reason_names(0x1) == ["idle"]
    assert reason_names(0x4 | 0x40) == ["power cap", "thermal slowdown (hardware)"]
    assert reason_names(0x1000) == ["bit 0x1000"]


@pytest.mark.parametrize("old", [False, True])
def test_the_nvml_state_reads_every_figure(old: bool) -> None:
    nvml = FakeNvml(old=old)
    reader, why = open_nvml_state({}, nvml)
    assert why is None and isinstance(reader, NvmlState) and reader.name == "GPU 0 (NVIDIA H100 80GB HBM3)"
    assert reader.read() == {
        "gpu_events": ["power cap", "thermal slowdown (hardware)"],
        "gpu_sm_mhz": 1980,
        "gpu_temp_c": 61,
        "gpu_power_w": 412.3,
        "gpu_util": 97,
        "gpu_processes": 3,
    }
    reader.close()
    assert nvml.shut == 1


def test_an_nvml_figure_the_card_does_not_give_is_not_known() -> None:
    reader, _ = open_nvml_state({}, FakeNvml(fail=("power", "procs", "temp")))
    assert reader is not None
    got = reader.read()
    assert got["gpu_power_w"] is None and got["gpu_processes"] is None and got["gpu_temp_c"] is None
    assert got["gpu_sm_mhz"] == 1980


def test_without_nvidia_ml_py_the_gpu_state_is_not_known_and_said(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", None)  # import pynvml raises ImportError
    reader, why = open_nvml_state({})
    assert reader is None and why is not None and "nvidia-ml-py is not installed" in why
    state = open_state("cuda", platform="linux")
    assert "nvidia-ml-py is not installed" in state.absent["GPU state (NVML)"]
    assert all("gpu" not in k for k in state.read())  # the host's readers still read
    assert open_nvml_state({"CUDA_VISIBLE_DEVICES": "GPU-1234"}, FakeNvml())[0] is None


def test_a_reading_in_words_leaves_counters_and_unknowns_out() -> None:
    words = reading_words(
        {
            "thermal_pressure": "heavy",
            "low_power_mode": False,
            "swap_used_bytes": 1 << 30,
            "cpu_pressure_us": 12345,
            "cpu_mhz": None,
            "gpu_events": [],
            "gpu_power_w": 412.3,
        }
    )
    assert words == [
        "thermal pressure heavy",
        "Low Power Mode off",
        "swap in use 1.0 GiB",
        "GPU clock-event reasons: none",
        "GPU power 412.3 W",
    ]
