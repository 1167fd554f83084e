# Facts about the interpreter that runs this file, as one JSON line on stdout.
# Standard library only (plus torch, if present), and old syntax on purpose: it must run on
# whatever Python the user points mpsup at, including ones too old for mpsup itself.
import json
import os
import platform
import shutil
import struct
import sys
import sysconfig


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
    facts = {"version": str(torch.__version__).split("+")[0], "version_full": str(torch.__version__)}
    mps = getattr(torch.backends, "mps", None)
    facts["mps_built"] = bool(mps and mps.is_built())
    facts["mps_available"] = bool(mps and mps.is_available())
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


def _libc():
    # Which manylinux wheels fit this interpreter (empty on macOS and musl).
    try:
        name, version = platform.libc_ver()
    except Exception:
        return None
    return ("%s %s" % (name, version)) if name and version else None


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
        "libc": _libc(),
        "loadavg": load,
        "cpu_count": os.cpu_count(),
        "torch": torch_facts,
    }
    if torch_error:
        doc["torch_error"] = torch_error
    sys.stdout.write(json.dumps(doc) + "\n")


if __name__ == "__main__":
    main()
