# Facts about the interpreter that runs this file, as one JSON line on stdout.
# Standard library only (plus torch, if present), and old syntax on purpose: it must run on
# whatever Python the user points mpsup at, including ones too old for mpsup itself.
import errno
import json
import os
import platform
import shutil
import struct
import sys
import sysconfig
import warnings

_REASON_MAX = 1000


def _externally_managed():
    try:
        stdlib = sysconfig.get_paths()["stdlib"]
    except Exception:
        return None
    return os.path.exists(os.path.join(stdlib, "EXTERNALLY-MANAGED"))


def _has_pip():
    try:
        import importlib.util

        return importlib.util.find_spec("pip") is not None
    except Exception:
        return False


def _torch_facts():
    try:
        import torch
    except Exception as exc:  # ImportError, or a broken install raising anything
        return None, "%s: %s" % (type(exc).__name__, exc)
    facts = {"version": str(torch.__version__).split("+")[0], "version_full": str(torch.__version__)}  # type: dict[str, object]
    # The commit the build was made from: what `mpsup bisect` links between in pytorch/pytorch.
    git = getattr(getattr(torch, "version", None), "git_version", None)
    facts["git_version"] = str(git) if git else None
    mps = getattr(torch.backends, "mps", None)
    facts["mps_built"] = bool(mps and mps.is_built())
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        facts["mps_available"] = bool(mps and mps.is_available())
    if facts["mps_built"] and not facts["mps_available"]:
        reason = _mps_unavailable_reason(torch, caught)
        if reason:
            facts["mps_unavailable_reason"] = reason
    facts["cuda_available"] = bool(torch.cuda.is_available())
    facts["has_compile_shader"] = hasattr(getattr(torch, "mps", None), "compile_shader")
    facts["has_grouped_mm"] = hasattr(torch, "_grouped_mm")
    facts["has_float8_e4m3fn"] = hasattr(torch, "float8_e4m3fn")
    if facts["mps_available"]:
        try:
            x = torch.ones(4, device="mps")
            facts["mps_op_ok"] = float((x * 2).sum().cpu()) == 8.0
        except Exception as exc:
            facts["mps_op_ok"] = False
            facts["mps_error"] = "%s: %s" % (type(exc).__name__, exc)
        for name, fn in (
            ("mps_name", getattr(mps, "get_name", None)),
            ("mps_core_count", getattr(mps, "get_core_count", None)),
            ("recommended_max_memory", getattr(torch.mps, "recommended_max_memory", None)),
        ):
            if fn is not None:
                try:
                    facts[name] = fn()
                except Exception:
                    pass
    return facts, None


def _mps_unavailable_reason(torch, caught):
    # is_available() only says False; torch names the cause when asked for an mps tensor (2.15:
    # "no supported Metal GPU was found"; older builds: "supported on macOS N.0+").
    messages = [str(w.message) for w in caught]
    try:
        torch.empty(1, device="mps")
    except Exception as exc:
        messages.append(str(exc))
    text = " | ".join(m.strip() for m in messages if m and m.strip())
    return text[:_REASON_MAX] or None


def _load_libsystem():
    import ctypes
    import ctypes.util

    # On macOS 11+ the library lives only in the dyld cache, which dlopen still finds by this path.
    for name in ("/usr/lib/libSystem.B.dylib", ctypes.util.find_library("c")):
        if name:
            try:
                return ctypes.CDLL(name, use_errno=True)
            except OSError:
                pass
    return None


def _proc_translated(platform_name=None, load=_load_libsystem):
    """Is *this* process translated by Rosetta 2? True, False, or None when not known.

    Read here, in the target interpreter, because the flag describes the process that asks:
    mpsup's own `sysctl` call would describe mpsup, not the Python being judged.
    """
    if (platform_name or sys.platform) != "darwin":
        return None
    try:
        import ctypes

        libc = load()
        if libc is None:
            return None
        value = ctypes.c_int(0)
        size = ctypes.c_size_t(ctypes.sizeof(value))
        rc = libc.sysctlbyname(
            b"sysctl.proc_translated", ctypes.byref(value), ctypes.byref(size), None, ctypes.c_size_t(0)
        )
        if rc != 0:
            # ENOENT: a macOS without Rosetta (an Intel Mac), so nothing can be translated.
            return False if ctypes.get_errno() == errno.ENOENT else None
        return value.value == 1
    except Exception:
        return None


def _libc():
    # Which manylinux wheels fit this interpreter (empty on macOS and musl).
    try:
        name, version = platform.libc_ver()
    except Exception:
        return None
    return ("%s %s" % (name, version)) if name and version else None


def _mlx_facts():
    """MLX in this Python, for `bench --candidate mlx:PYTHON`: None when not installed (looked up before importing)."""
    import importlib.util

    if importlib.util.find_spec("mlx") is None:
        return None
    try:
        import mlx.core as mx
    except Exception as exc:
        return {"error": "%s: %s" % (type(exc).__name__, exc)}
    metal = getattr(mx, "metal", None)
    facts = {"version": str(getattr(mx, "__version__", "?")), "mlx_lm": importlib.util.find_spec("mlx_lm") is not None}
    try:
        facts["metal"] = bool(metal and metal.is_available())
    except Exception:
        facts["metal"] = False
    return facts


def main():
    torch_facts, torch_error = _torch_facts()
    try:
        load = list(os.getloadavg())
    except (AttributeError, OSError):
        load = None
    doc = {
        "executable": sys.executable,
        "version": "%d.%d.%d" % sys.version_info[:3],
        "implementation": platform.python_implementation().lower(),
        "machine": platform.machine(),
        "bits": struct.calcsize("P") * 8,
        "free_threaded": bool(sysconfig.get_config_var("Py_GIL_DISABLED")),
        "in_venv": sys.prefix != getattr(sys, "base_prefix", sys.prefix),
        "conda": os.path.isdir(os.path.join(sys.prefix, "conda-meta")),
        "externally_managed": _externally_managed(),
        "pip": _has_pip(),
        "uv": shutil.which("uv"),
        "platform": sys.platform,
        "mac_ver": platform.mac_ver()[0] or None,
        "proc_translated": _proc_translated(),
        "libc": _libc(),
        "loadavg": load,
        "cpu_count": os.cpu_count(),
        "torch": torch_facts,
        "mlx": _mlx_facts(),
    }
    if torch_error:
        doc["torch_error"] = torch_error
    sys.stdout.write(json.dumps(doc) + "\n")


if __name__ == "__main__":
    main()
