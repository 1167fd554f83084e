"""What a Mac says of its state without root and without a subprocess: ctypes into libSystem and the ObjC runtime.

Mac-only: every function here takes the library it calls as an argument (`load_libsystem()`, `load_objc()` on a
Mac), so the tests drive the same ctypes calls through fake libraries made of ctypes callbacks. Each reader
returns None where the Mac does not answer (a missing symbol, a non-zero status): not known, never a default.

- thermal pressure: the notify key com.apple.system.thermalpressurelevel (libSystem `notify_register_check`,
  `notify_get_state`, `notify_cancel`); 0 nominal .. 4 sleeping (libkern/OSThermalNotification.h). A key
  never posted also reads 0, so `NSProcessInfo.thermalState` is read beside it.
- `NSProcessInfo.processInfo.thermalState` (0 nominal .. 3 critical) and `isLowPowerModeEnabled` (macOS 12+),
  through `objc_getClass`, `sel_registerName` and `objc_msgSend` cast to each method's own prototype (arm64
  calls a variadic function differently, so objc_msgSend is never called through its variadic declaration).
- sysctls by name (`sysctlbyname`): kern.memorystatus_vm_pressure_level (1, 2, 4), vm.swapusage (struct
  xsw_usage), iogpu.wired_limit_mb, kern.osversion (the macOS build).
"""

from __future__ import annotations

import ctypes
import struct
import sys
from collections.abc import Callable
from typing import Any

from mpsup.host.parsers import THERMAL_PRESSURE_KEY

LIBSYSTEM = "/usr/lib/libSystem.B.dylib"
LIBOBJC = "/usr/lib/libobjc.A.dylib"
FOUNDATION = "/System/Library/Frameworks/Foundation.framework/Foundation"
NOTIFY_STATUS_OK = 0
# struct xsw_usage (sys/sysctl.h): xsu_total, xsu_avail, xsu_used (u_int64_t), xsu_pagesize (u_int32_t),
# xsu_encrypted (boolean_t).
XSW_USAGE = struct.Struct("=QQQIi")
MAX_SYSCTL_TEXT = 256  # kern.osversion is a dozen characters


def load_libsystem() -> Any | None:
    """libSystem, or None off a Mac (or where it cannot be loaded)."""
    if sys.platform != "darwin":
        return None
    try:
        return ctypes.CDLL(LIBSYSTEM, use_errno=True)
    except OSError:
        return None


def load_objc() -> Any | None:
    """The ObjC runtime with Foundation loaded (NSProcessInfo lives there), or None off a Mac."""
    if sys.platform != "darwin":
        return None
    try:
        ctypes.CDLL(FOUNDATION)
        return ctypes.CDLL(LIBOBJC)
    except OSError:
        return None


class ThermalPressure:
    """The notify key's level, registered once (a token), read at each `read()`, cancelled at `close()`."""

    def __init__(self, lib: Any, key: str = THERMAL_PRESSURE_KEY) -> None:
        self._lib = lib
        self._token: int | None = None
        try:
            lib.notify_register_check.restype = ctypes.c_uint32
            lib.notify_register_check.argtypes = [ctypes.c_char_p, ctypes.POINTER(ctypes.c_int)]
            lib.notify_get_state.restype = ctypes.c_uint32
            lib.notify_get_state.argtypes = [ctypes.c_int, ctypes.POINTER(ctypes.c_uint64)]
            lib.notify_cancel.restype = ctypes.c_uint32
            lib.notify_cancel.argtypes = [ctypes.c_int]
            token = ctypes.c_int(-1)
            if lib.notify_register_check(key.encode(), ctypes.byref(token)) == NOTIFY_STATUS_OK:
                self._token = token.value
        except (AttributeError, OSError, ctypes.ArgumentError):
            self._token = None

    @property
    def registered(self) -> bool:
        return self._token is not None

    def read(self) -> int | None:
        if self._token is None:
            return None
        state = ctypes.c_uint64(0)
        try:
            status = self._lib.notify_get_state(self._token, ctypes.byref(state))
        except (OSError, ctypes.ArgumentError):
            return None
        return int(state.value) if status == NOTIFY_STATUS_OK and state.value < 2**31 else None

    def close(self) -> None:
        if self._token is not None:
            try:
                self._lib.notify_cancel(self._token)
            except (OSError, ctypes.ArgumentError):
                return None
            finally:
                self._token = None


def _sysctl_bytes(lib: Any, name: str, size: int) -> bytes | None:
    """The raw value of one sysctl, at most `size` bytes; None where it is absent or larger."""
    try:
        fn = lib.sysctlbyname
        fn.restype = ctypes.c_int
        size_p = ctypes.POINTER(ctypes.c_size_t)
        fn.argtypes = [ctypes.c_char_p, ctypes.c_void_p, size_p, ctypes.c_void_p, ctypes.c_size_t]
        buf = ctypes.create_string_buffer(size)
        length = ctypes.c_size_t(size)
        if fn(name.encode(), ctypes.cast(buf, ctypes.c_void_p), ctypes.byref(length), None, 0) != 0:
            return None
    except (AttributeError, OSError, ctypes.ArgumentError):
        return None
    return buf.raw[: min(length.value, size)]


def sysctl_int(lib: Any, name: str) -> int | None:
    """An integer sysctl (4 or 8 bytes, as the kernel gives it)."""
    raw = _sysctl_bytes(lib, name, 8)
    if raw is None or len(raw) not in (4, 8):
        return None
    return int.from_bytes(raw, sys.byteorder, signed=True)


def sysctl_text(lib: Any, name: str) -> str | None:
    raw = _sysctl_bytes(lib, name, MAX_SYSCTL_TEXT)
    if raw is None:
        return None
    text = raw.split(b"\0", 1)[0].decode("utf-8", errors="replace").strip()
    return text or None


def swap_used_bytes(lib: Any) -> int | None:
    """vm.swapusage's xsu_used."""
    raw = _sysctl_bytes(lib, "vm.swapusage", XSW_USAGE.size)
    if raw is None or len(raw) != XSW_USAGE.size:
        return None
    _total, _avail, used, _page, _encrypted = XSW_USAGE.unpack(raw)
    return int(used)


def _send(objc: Any, restype: Any, *argtypes: Any) -> Callable[..., Any]:
    """objc_msgSend under one method's own prototype: receiver, selector, then the method's arguments."""
    address = ctypes.cast(objc.objc_msgSend, ctypes.c_void_p).value
    if not address:
        raise OSError("objc_msgSend has no address")
    return ctypes.CFUNCTYPE(restype, ctypes.c_void_p, ctypes.c_void_p, *argtypes)(address)


def process_info(objc: Any) -> dict[str, Any]:
    """NSProcessInfo's `thermal_state` (0-3) and `low_power_mode` (bool); each None where not answered."""
    out: dict[str, Any] = {"thermal_state": None, "low_power_mode": None}
    try:
        objc.objc_getClass.restype = ctypes.c_void_p
        objc.objc_getClass.argtypes = [ctypes.c_char_p]
        objc.sel_registerName.restype = ctypes.c_void_p
        objc.sel_registerName.argtypes = [ctypes.c_char_p]
        cls = objc.objc_getClass(b"NSProcessInfo")
        if not cls:
            return out
        info = _send(objc, ctypes.c_void_p)(cls, objc.sel_registerName(b"processInfo"))
        if not info:
            return out
        responds = _send(objc, ctypes.c_bool, ctypes.c_void_p)
        respond_sel = objc.sel_registerName(b"respondsToSelector:")
        for key, name, restype in (
            ("thermal_state", b"thermalState", ctypes.c_long),
            ("low_power_mode", b"isLowPowerModeEnabled", ctypes.c_bool),
        ):
            sel = objc.sel_registerName(name)
            if sel and responds(info, respond_sel, sel):
                value = _send(objc, restype)(info, sel)
                out[key] = bool(value) if restype is ctypes.c_bool else int(value)
    except (AttributeError, OSError, ctypes.ArgumentError, TypeError):
        return out
    return out
