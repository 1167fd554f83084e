"""API conformance against the real macOS arm64 torch wheels, so the next release's drift is caught here.

For the newest release mpsup targets and the oldest it supports, this reads the wheel's own
`native_functions.yaml`, Python sources, stubs and MPS headers, and checks that:
  - every aten op the mps path runs has an MPS kernel (or a composite that decomposes into ops that
    do), and an op new in a later release fails on older wheels only in a way mpsup calls
    "unsupported";
  - every torch attribute the worker touches directly exists, and every one it reaches through
    getattr/hasattr (optional) is really guarded;
  - the facts mpsup derives from the version (event timing semantics, allocator peak statistics,
    FP8 matmul's API) agree with the wheel's headers and sources.

The wheels are ~70-140 MB each: only the members needed are fetched, by HTTP range requests on the
zip (PyPI's files host answers Range), and cached under pytest's cache directory. Without network
the tests skip with the reason. MPSUP_TORCH_WHEELS=DIR reads local wheels instead."""

from __future__ import annotations

import ast
import json
import os
import re
import struct
import urllib.error
import urllib.request
import zipfile
import zlib
from dataclasses import dataclass
from pathlib import Path

import pytest

from mpsup.worker.ops import is_unsupported_error

VERSIONS = ("2.6.0", "2.15.0")  # the oldest supported release and the newest target
INDEX = "https://pypi.org/simple/torch/"
WORKER = Path(__file__).resolve().parent.parent / "src" / "mpsup" / "worker"
YAML = "torchgen/packaged/ATen/native/native_functions.yaml"
MEMBERS = (
    YAML,
    "torch/__init__.py",
    "torch/functional.py",
    "torch/_C/__init__.pyi",
    "torch/_C/_VariableFunctions.pyi",
    "torch/nn/__init__.py",
    "torch/nn/modules/__init__.py",
    "torch/nn/modules/module.py",
    "torch/nn/functional.py",
    "torch/mps/__init__.py",
    "torch/mps/event.py",
    "torch/backends/mps/__init__.py",
    "torch/accelerator/__init__.py",
    "torch/linalg/__init__.py",
    "torch/_dynamo/__init__.py",
    "torch/utils/_python_dispatch.py",
    "torch/include/ATen/mps/MPSEvent.h",
    "torch/include/ATen/mps/MPSAllocator.h",
    "torch/include/ATen/BlasBackend.h",
    "torch/include/c10/util/Exception.h",
    "torch/export/passes/__init__.py",
)
TIMEOUT_S = 30


# --- reading members of a remote zip by range requests ------------------------------------------


class Offline(Exception):
    """The index or the files host cannot be reached: skip, do not fail."""


def _http(url: str, headers: dict[str, str] | None = None) -> bytes:
    req = urllib.request.Request(url, headers={"User-Agent": "mpsup-tests", **(headers or {})})
    try:
        with urllib.request.urlopen(req, timeout=TIMEOUT_S) as resp:
            if "Range" in (headers or {}) and resp.status != 206:
                raise AssertionError(f"{url}: the server ignored the Range header (status {resp.status})")
            return resp.read()
    except (urllib.error.URLError, TimeoutError, ConnectionError) as exc:
        raise Offline(f"{url}: {exc}") from exc


def _range(url: str, start: int, end: int | None = None) -> bytes:
    spec = f"bytes={start}-{'' if end is None else end}" if start >= 0 else f"bytes={start}"
    return _http(url, {"Range": spec})


@dataclass(frozen=True)
class CentralEntry:
    name: str
    method: int
    crc: int
    compressed: int
    size: int
    offset: int


def _central_directory(url: str) -> dict[str, CentralEntry]:
    tail = _range(url, -65536)
    at = tail.rfind(b"PK\x05\x06")
    assert at >= 0, f"{url}: no end-of-central-directory record in the last 64 KiB"
    _sig, _d, _cd, _n_here, _n, cd_size, cd_offset, _clen = struct.unpack("<IHHHHIIH", tail[at : at + 22])
    assert cd_offset != 0xFFFFFFFF, f"{url}: a zip64 wheel; this reader handles plain zips only"
    raw = _range(url, cd_offset, cd_offset + cd_size - 1)
    entries = {}
    pos = 0
    while pos + 46 <= len(raw) and raw[pos : pos + 4] == b"PK\x01\x02":
        (method, crc, comp, size, nlen, xlen, clen, offset) = (
            struct.unpack("<H", raw[pos + 10 : pos + 12])[0],
            *struct.unpack("<III", raw[pos + 16 : pos + 28]),
            *struct.unpack("<HHH", raw[pos + 28 : pos + 34]),
            struct.unpack("<I", raw[pos + 42 : pos + 46])[0],
        )
        name = raw[pos + 46 : pos + 46 + nlen].decode("utf-8")
        entries[name] = CentralEntry(name, method, crc, comp, size, offset)
        pos += 46 + nlen + xlen + clen
    return entries


def _member(url: str, entry: CentralEntry) -> bytes:
    head = _range(url, entry.offset, entry.offset + 29)
    assert head[:4] == b"PK\x03\x04", f"{url}: no local header for {entry.name}"
    nlen, xlen = struct.unpack("<HH", head[26:30])
    start = entry.offset + 30 + nlen + xlen
    data = _range(url, start, start + entry.compressed - 1) if entry.compressed else b""
    if entry.method == 8:
        data = zlib.decompress(data, -15)
    else:
        assert entry.method == 0, f"{entry.name}: compression method {entry.method}"
    assert zlib.crc32(data) == entry.crc and len(data) == entry.size, f"{url}: {entry.name} is corrupt"
    return data


def _wheel_url(version: str, cache: Path) -> tuple[str, str]:
    """The macOS arm64 CPython 3.11 wheel of this release, from the index's JSON (PEP 691) page."""
    known = cache / "urls.json"
    urls = json.loads(known.read_text()) if known.is_file() else {}
    if version not in urls:
        page = json.loads(_http(INDEX, {"Accept": "application/vnd.pypi.simple.v1+json"}))
        pattern = re.compile(rf"^torch-{re.escape(version)}-cp311-(cp311|none)-macosx_\d+_\d+_arm64\.whl$")
        files = [f for f in page["files"] if pattern.match(f["filename"])]
        assert files, f"{INDEX}: no macOS arm64 cp311 wheel of torch {version}"
        urls[version] = [files[0]["filename"], files[0]["url"]]
        known.write_text(json.dumps(urls, indent=1))
    return urls[version][0], urls[version][1]


class Wheel:
    """The members of one wheel that these tests read, cached on disk after the first fetch."""

    def __init__(self, version: str, cache: Path) -> None:
        self.version = version
        self.release = tuple(int(p) for p in version.split(".")[:2])
        local = os.environ.get("MPSUP_TORCH_WHEELS")
        found = sorted(Path(local).glob(f"torch-{version}-cp311-*macosx*arm64.whl")) if local else []
        self._zip = zipfile.ZipFile(found[0]) if found else None
        self.filename = found[0].name if found else ""
        self._url = ""
        self._entries: dict[str, CentralEntry] | None = None
        if not found:
            self.filename, self._url = _wheel_url(version, cache)
        self._dir = cache / self.filename
        self._dir.mkdir(parents=True, exist_ok=True)
        self.surfaces: dict[str, set[str]] = {}  # module -> the names its files define, parsed once

    def read(self, member: str) -> str | None:
        """The member's text, or None when this wheel has no such file."""
        cached = self._dir / member
        missing = self._dir / (member + ".absent")
        if cached.is_file():
            return cached.read_text()
        if missing.is_file():
            return None
        if self._zip is not None:
            data = self._zip.read(member) if member in self._zip.namelist() else None
        else:
            if self._entries is None:
                self._entries = _central_directory(self._url)
            entry = self._entries.get(member)
            data = _member(self._url, entry) if entry else None
        target = cached if data is not None else missing
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data or b"")
        return data.decode("utf-8") if data is not None else None


@pytest.fixture(scope="module", params=VERSIONS)
def wheel(request: pytest.FixtureRequest) -> Wheel:
    try:
        cache = request.config.cache.mkdir("mpsup-torch-wheels")  # type: ignore[union-attr]
    except AttributeError:  # pytest's cache plugin is off
        import tempfile

        cache = Path(tempfile.gettempdir()) / "mpsup-torch-wheels"
        cache.mkdir(exist_ok=True)
    try:
        w = Wheel(request.param, cache)
        for member in MEMBERS:
            w.read(member)
    except Offline as exc:
        pytest.skip(f"the real torch {request.param} wheel cannot be fetched here ({exc})")
    return w


# --- native_functions.yaml without a YAML library ------------------------------------------------


def parse_native_functions(text: str) -> dict[str, dict]:
    """op name (with overload) -> {"dispatch": {key: kernel}, "delegate": op or None}."""
    ops: dict[str, dict] = {}
    current: dict | None = None
    in_dispatch = False
    for line in text.splitlines():
        m = re.match(r"^- func: ([\w.]+)\(", line)
        if m:
            current = {"dispatch": {}, "delegate": None}
            ops[m.group(1)] = current
            in_dispatch = False
            continue
        if current is None:
            continue
        if re.match(r"^  dispatch:\s*$", line):
            in_dispatch = True
            continue
        if in_dispatch:
            m = re.match(r"^    ([\w, ]+):\s*(\S+)", line)
            if m:
                for key in m.group(1).split(","):
                    current["dispatch"][key.strip()] = m.group(2)
                continue
            in_dispatch = False
        m = re.match(r"^  structured_delegate:\s*(\S+)", line)
        if m:
            current["delegate"] = m.group(1)
    return ops


COMPOSITE = {"CompositeImplicitAutograd", "CompositeExplicitAutograd", "CompositeExplicitAutogradNonFunctional"}


def kernel_on_mps(ops: dict[str, dict], name: str) -> str:
    """'mps', 'composite' (decomposes into other ops), 'missing' (no MPS kernel), or 'absent' (no such op)."""
    op = ops.get(name)
    if op is None:
        return "absent"
    if op["delegate"]:
        return kernel_on_mps(ops, op["delegate"])
    keys = set(op["dispatch"])
    if "MPS" in keys:
        return "mps"
    if not keys or keys & COMPOSITE:
        return "composite"
    return "missing"


def test_the_yaml_reader_on_a_sample():
    sample = """- func: _int_mm(Tensor self, Tensor mat2) -> Tensor
  dispatch:
    CPU: _int_mm_cpu
    CUDA, XPU: _int_mm_gpu

- func: gather(Tensor self, int dim, Tensor index, *, bool sparse_grad=False) -> Tensor
  structured_delegate: gather.out

- func: gather.out(Tensor self, int dim, Tensor index, *, bool sparse_grad=False, Tensor(a!) out) -> Tensor(a!)
  structured: True
  dispatch:
    CPU, CUDA: gather_out
    MPS: gather_out_mps

- func: linear(Tensor input, Tensor weight, Tensor? bias=None) -> Tensor
  python_module: nn
"""
    ops = parse_native_functions(sample)
    assert ops["_int_mm"]["dispatch"] == {"CPU": "_int_mm_cpu", "CUDA": "_int_mm_gpu", "XPU": "_int_mm_gpu"}
    assert [kernel_on_mps(ops, n) for n in ("_int_mm", "gather", "linear", "nope")] == [
        "missing",
        "mps",
        "composite",
        "absent",
    ]


# --- the ops the mps path runs --------------------------------------------------------------------


@dataclass(frozen=True)
class OpUse:
    op: str
    where: str
    since: tuple[int, int] | None = None  # the release that brought its MPS kernel; None: always needed


MPS_OPS = (
    OpUse("mm", "roofline matmul, grouped-mm loop"),
    OpUse("linear", "linear workloads (F.linear)"),
    OpUse("addmm", "F.linear with a bias"),
    OpUse("constant_pad_nd", "pad workloads and pad smoke tests (F.pad, constant)"),
    OpUse("_copy_from", "every copy to, from and on MPS; dtype casts"),
    OpUse("cat", "fp8_cat smoke test"),
    OpUse("index_select", "embedding workloads (F.embedding), fp8_index"),
    OpUse("embedding", "embedding workloads"),
    OpUse("index.Tensor", "fp8_index smoke test"),
    OpUse("gather", "fp8_index smoke test"),
    OpUse("eq.Tensor", "fp8_eq_ne smoke test"),
    OpUse("ne.Tensor", "fp8_eq_ne smoke test"),
    OpUse("eye.m_out", "fp8_eye smoke test"),
    OpUse("_mps_convolution", "conv3d workloads (F.conv3d)"),
    OpUse("uniform_", "random inputs (rand)"),
    OpUse("random_.from", "random int8 and index inputs (randint)"),
    OpUse("_grouped_mm", "MoE grouped workloads, grouped_mm smoke tests", since=(2, 15)),
    OpUse("_int_mm", "int8 workloads, int_mm smoke test", since=(2, 15)),
    OpUse("_scaled_mm_v2", "FP8 matmul through F.scaled_mm", since=(2, 15)),
)


def _dispatcher_error(op: str) -> RuntimeError:
    # c10's dispatcher words a missing kernel this way (its format string is in libtorch_cpu).
    return RuntimeError(
        f"Could not run 'aten::{op.split('.')[0]}' with arguments from the 'MPS' backend. This could be "
        "because the operator doesn't exist for this backend, or was omitted during the selective/custom build process"
    )


def test_every_op_of_the_mps_path_has_a_kernel_or_reports_unsupported(wheel: Wheel):
    ops = parse_native_functions(wheel.read(YAML) or "")
    assert len(ops) > 2000, f"torch {wheel.version}: native_functions.yaml did not parse"
    problems = []
    for use in MPS_OPS:
        state = kernel_on_mps(ops, use.op)
        new_here = use.since is not None and wheel.release >= use.since
        if use.since is None and state not in ("mps", "composite"):
            problems.append(f"aten::{use.op} ({use.where}): {state} on MPS")
        elif new_here and state != "mps":
            problems.append(f"aten::{use.op} ({use.where}): MPS kernel expected from {use.since}, found {state}")
        elif state in ("missing", "absent") and not is_unsupported_error(_dispatcher_error(use.op)):
            problems.append(f"aten::{use.op}: its 'no MPS kernel' error would be reported as a failure")
    assert not problems, f"torch {wheel.version}:\n" + "\n".join(problems)


def test_fp8_matmul_on_mps_goes_through_scaled_mm_v2(wheel: Wheel):
    # torch._scaled_mm has CPU, CUDA and XPU kernels only: on MPS FP8 matmul exists solely as
    # _scaled_mm_v2, which F.scaled_mm calls. mpsup must therefore prefer F.scaled_mm.
    ops = parse_native_functions(wheel.read(YAML) or "")
    assert kernel_on_mps(ops, "_scaled_mm") in ("missing", "absent")
    functional = wheel.read("torch/nn/functional.py") or ""
    if kernel_on_mps(ops, "_scaled_mm_v2") == "mps":
        tree = ast.parse(functional)
        fn = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "scaled_mm")
        args = [a.arg for a in fn.args.args]
        # How worker/ops.py calls it: six positional arguments, then output_dtype by keyword.
        assert args[:6] == ["mat_a", "mat_b", "scale_a", "scale_recipe_a", "scale_b", "scale_recipe_b"], args
        assert "output_dtype" in args
        assert "_ScalingType as ScalingType" in functional and "torch._scaled_mm_v2(" in functional


# --- the torch attributes the worker touches --------------------------------------------------------


def _chain(node: ast.AST) -> str | None:
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
        return ".".join(reversed(parts))
    return None


ROOTS = {"torch": "torch", "F": "torch.nn.functional"}


def worker_attribute_uses() -> tuple[set[str], set[str]]:
    """(attributes used directly, attributes reached through getattr/hasattr) in the worker sources,
    as dotted names from torch; a local alias of a guarded attribute counts as that attribute."""
    direct: set[str] = set()
    guarded: set[str] = set()
    for path in sorted(WORKER.glob("*.py")):
        tree = ast.parse(path.read_text())
        aliases = dict(ROOTS)
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("torch."):
                for alias in node.names:
                    direct.add(f"{node.module}.{alias.name}")
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Name)
                and node.func.id in ("getattr", "hasattr")
                and len(node.args) >= 2
                and isinstance(node.args[1], ast.Constant)
                and isinstance(node.args[1].value, str)
            ):
                base = _chain(node.args[0])
                if base and base.split(".")[0] in aliases:
                    guarded.add(
                        aliases[base.split(".")[0]] + base[len(base.split(".")[0]) :] + "." + node.args[1].value
                    )
            if (
                isinstance(node, ast.Assign)
                and len(node.targets) == 1
                and isinstance(node.targets[0], ast.Name)
                and isinstance(node.value, ast.Call)
                and isinstance(node.value.func, ast.Name)
                and node.value.func.id == "getattr"
                and len(node.value.args) >= 2
                and isinstance(node.value.args[1], ast.Constant)
            ):
                base = _chain(node.value.args[0])
                if base and base.split(".")[0] in aliases:
                    aliases[node.targets[0].id] = (
                        aliases[base.split(".")[0]]
                        + base[len(base.split(".")[0]) :]
                        + "."
                        + str(node.value.args[1].value)
                    )
        parents = {id(child) for n in ast.walk(tree) if isinstance(n, ast.Attribute) for child in [n.value]}
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and id(node) not in parents:
                chain = _chain(node)
                if chain and chain.split(".")[0] in aliases:
                    head = chain.split(".")[0]
                    direct.add(aliases[head] + chain[len(head) :])
    # The CUDA path is not the mps path; torch.Tensor methods are not module attributes.
    keep = {a for a in direct if not a.startswith(("torch.cuda", "torch.Tensor.")) and a not in guarded}
    return keep, guarded


MODULE_FILES = {
    "torch": ("torch/__init__.py", "torch/functional.py", "torch/_C/__init__.pyi", "torch/_C/_VariableFunctions.pyi"),
    # Module's own members (register_parameter: weights built without values) are in modules/module.py.
    "torch.nn": ("torch/nn/__init__.py", "torch/nn/modules/__init__.py", "torch/nn/modules/module.py"),
    "torch.nn.functional": ("torch/nn/functional.py",),
    "torch.mps": ("torch/mps/__init__.py",),
    "torch.mps.event": ("torch/mps/event.py",),
    "torch.backends.mps": ("torch/backends/mps/__init__.py",),
    "torch.accelerator": ("torch/accelerator/__init__.py",),
    "torch.linalg": ("torch/linalg/__init__.py",),
    "torch._dynamo": ("torch/_dynamo/__init__.py",),
    "torch._inductor.config": ("torch/_inductor/config.py",),
    "torch.utils._python_dispatch": ("torch/utils/_python_dispatch.py",),  # the whole-model op census
    "torch.utils.checkpoint": ("torch/utils/checkpoint.py",),  # the streamed LoRA reference's blocks
    "torch.export.passes": ("torch/export/passes/__init__.py",),  # a .pt2 moved to the device
    "torch.library": ("torch/library.py",),  # the float64 reference's kernels by definition
}
SUBMODULES = {
    "torch.nn",
    "torch.nn.functional",
    "torch.mps",
    "torch.mps.event",
    "torch.backends",
    "torch.backends.mps",
    "torch.accelerator",
    "torch.linalg",
    "torch._dynamo",
    "torch._inductor",
    "torch._inductor.config",  # imported inside a try (compile smoke test); its member behind hasattr
    "torch.export",
    "torch.export.passes",
    "torch.library",
}


def _surface(text: str) -> set[str]:
    """Names a module defines or imports at top level (and the members of its classes, as Class.member)."""
    tree = ast.parse(text)
    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
            if isinstance(node, ast.ClassDef):
                names |= {
                    f"{node.name}.{m.name}"
                    for m in node.body
                    if isinstance(m, (ast.FunctionDef, ast.AnnAssign)) and hasattr(m, "name")
                }
        elif isinstance(node, ast.Assign):
            names |= {t.id for t in node.targets if isinstance(t, ast.Name)}
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names |= {(a.asname or a.name).split(".")[0] for a in node.names}
        elif isinstance(node, ast.If):  # TYPE_CHECKING blocks and version branches
            names |= _surface(ast.unparse(ast.Module(body=node.body + node.orelse, type_ignores=[])))
    return names


def _cpp_enum(header: str, enum: str) -> set[str]:
    m = re.search(rf"enum class {enum}\b[^{{]*{{([^}}]*)}}", header)
    return (
        {re.sub(r"\s*=.*", "", v).strip() for v in re.sub(r"//[^\n]*", "", m.group(1)).split(",") if v.strip()}
        if m
        else set()
    )


def exists_in(wheel: Wheel, dotted: str) -> bool:
    if dotted in SUBMODULES:
        return True
    if dotted.startswith("torch.ops.") and dotted.count(".") == 2:
        return True  # an op namespace (torch.ops.aten): made on first access, in every torch since 1.x
    if dotted.count(".") == 1 and dotted.endswith("__") and dotted.split(".")[1].startswith("__"):
        return True  # a module's own dunders (torch.__file__, torch.__version__) exist in every module
    if dotted.startswith("torch.nn.functional.ScalingType."):
        # A pybind11 enum: its values are the C++ enum's, declared in ATen/BlasBackend.h.
        return dotted.rsplit(".", 1)[1] in _cpp_enum(
            wheel.read("torch/include/ATen/BlasBackend.h") or "", "ScalingType"
        )
    module, _, name = dotted.rpartition(".")
    while module and module not in MODULE_FILES:
        module, _, outer = module.rpartition(".")
        name = f"{outer}.{name}"
    files = MODULE_FILES.get(module)
    assert files, f"no module file known for {dotted}: add it to MODULE_FILES and MEMBERS"
    if module not in wheel.surfaces:
        surface: set[str] = set()
        for member in files:
            text = wheel.read(member)
            if text is not None:
                surface |= _surface(text)
        wheel.surfaces[module] = surface
    return name in wheel.surfaces[module]


def test_the_scan_sees_guards_and_direct_uses():
    direct, guarded = worker_attribute_uses()
    assert {
        "torch.mps.synchronize",
        "torch.mps.empty_cache",
        "torch.mps.event.Event",
        "torch.nn.functional.pad",
        "torch.backends.mps.is_built",
        "torch.backends.mps.is_available",
        "torch.set_warn_always",  # CPU fallbacks heard: worker/core.py FallbackWatch
        "torch.is_warn_always_enabled",
        "torch.export.passes.move_to_device_pass",
    } <= direct
    assert {
        "torch.mps.compile_shader",
        "torch.nn.functional.scaled_mm",
        "torch._int_mm",
        "torch._scaled_mm",
        "torch.accelerator.reset_peak_memory_stats",
        "torch.backends.mps.get_name",
        "torch.float8_e4m3fn",
    } <= guarded
    assert not direct & guarded


def _guard_covers(wheel: Wheel, used: str, guarded: set[str]) -> bool:
    """A use under a guarded attribute (F.ScalingType.RowWise after getattr(F, "ScalingType", None))
    needs nothing when the guarded attribute is absent: the guard turns it into "unsupported"."""
    parts = used.split(".")
    return any(
        ".".join(parts[:i]) in guarded and not exists_in(wheel, ".".join(parts[:i])) for i in range(2, len(parts))
    )


def test_every_attribute_the_worker_needs_exists(wheel: Wheel):
    direct, guarded = worker_attribute_uses()
    missing = sorted(a for a in direct if not exists_in(wheel, a) and not _guard_covers(wheel, a, guarded))
    assert not missing, f"torch {wheel.version} lacks what the worker uses unguarded: {missing}"
    for member in ("Event.record", "Event.elapsed_time"):
        assert exists_in(wheel, f"torch.mps.event.{member}"), member


def test_optional_attributes_absent_from_old_wheels_are_guarded(wheel: Wheel):
    # The optional ones an old wheel lacks are exactly those the worker only reaches through getattr.
    direct, guarded = worker_attribute_uses()
    absent = sorted(a for a in guarded if not exists_in(wheel, a) and not a.startswith("torch.Tensor"))
    assert not set(absent) & direct
    if wheel.release == (2, 6):
        # What 2.6 lacks, as its sources show: each one guarded, each feature "unsupported" there.
        assert {"torch.mps.compile_shader", "torch.nn.functional.scaled_mm", "torch.backends.mps.get_name"} <= set(
            absent
        )


# --- facts mpsup derives from the version, against the headers ------------------------------------


def test_event_timing_semantics_match_the_headers(wheel: Wheel, monkeypatch: pytest.MonkeyPatch):
    import torch

    from mpsup.worker import device as device_mod

    header = wheel.read("torch/include/ATen/mps/MPSEvent.h") or ""
    cpu_clock = "CLOCK_MONOTONIC_RAW" in header and "getTime()" in header
    gpu_time = "GPU completion time" in header
    assert cpu_clock != gpu_time, f"torch {wheel.version}: MPSEvent.h says neither or both"
    want = "gpu" if gpu_time else "cpu-callback"
    monkeypatch.setattr(torch, "__version__", wheel.version)
    # The build's own header decides (a 2.15 nightly from before the change says cpu-callback)...
    monkeypatch.setattr(device_mod, "_mps_event_header", lambda: header)
    assert device_mod.event_timing_in_header(header) == want
    assert device_mod.event_timing("mps") == want
    # ...and without one, the release does; a 2.15 nightly is then unknown, never compared.
    monkeypatch.setattr(device_mod, "_mps_event_header", lambda: None)
    assert device_mod.event_timing("mps") == want
    monkeypatch.setattr(torch, "__version__", f"{wheel.release[0]}.{wheel.release[1]}.0.dev20260901")
    assert device_mod.event_timing("mps") == (None if wheel.release == (2, 15) else want)


def test_a_warn_once_fires_again_under_warn_always_in_the_headers(wheel: Wheel):
    # worker/core.py FallbackWatch turns warn-always on so that MPSFallback.mm's TORCH_WARN_ONCE fires for every op;
    # that holds only while the macro consults WarningUtils::get_warnAlways() before its once-only flag.
    header = wheel.read("torch/include/c10/util/Exception.h") or ""
    # The definition that is not STRIP_ERROR_MESSAGES's one-line no-op: its continued lines.
    m = re.search(r"#define TORCH_WARN_ONCE\(\.\.\.\)[ \t]*\\\n((?:.*\\\n)*.*)", header)
    assert m, f"torch {wheel.version}: no TORCH_WARN_ONCE in c10/util/Exception.h"
    body = m.group(1)
    assert "get_warnAlways()" in body and body.index("get_warnAlways()") < body.index("_TORCH_WARN_ONCE")
    assert "set_warn_always" in _surface(wheel.read("torch/__init__.py") or "")
    assert "is_warn_always_enabled" in _surface(wheel.read("torch/__init__.py") or "")


def test_move_to_device_pass_takes_a_device(wheel: Wheel):
    # worker/end_to_end.py passes a torch.device; both wheels' pass takes a device, a name or a mapping.
    source = wheel.read("torch/export/passes/__init__.py") or ""
    tree = ast.parse(source)
    fn = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "move_to_device_pass")
    assert [a.arg for a in fn.args.args] == ["ep", "location"]
    assert "torch.device" in ast.unparse(fn.args.args[1].annotation or ast.Constant(""))


# --- strings of the wheel's libtorch_cpu (a local wheel only: ~190-420 MB, too big to fetch by ranges) ---


def _library_strings(wheel: Wheel, pattern: re.Pattern[bytes]) -> set[bytes]:
    if wheel._zip is None:
        pytest.skip("reads the wheel's libtorch_cpu: set MPSUP_TORCH_WHEELS=DIR (a folder holding the wheels)")
    found: set[bytes] = set()
    tail = b""
    with wheel._zip.open("torch/lib/libtorch_cpu.dylib") as fh:
        while chunk := fh.read(1 << 24):
            buf = tail + chunk
            found |= {m.group(0) for m in pattern.finditer(buf)}
            tail = buf[-256:]
    return found


def test_the_library_s_words_are_those_the_worker_reads(wheel: Wheel):
    from mpsup.worker.core import FALLBACK
    from mpsup.worker.main import MPS_ENV_PREFIXES, _classify

    parts = (
        rb"' is not currently supported \x00",
        rb"on the MPS backend and will fall back to run on the CPU\.",
        rb"Invalid buffer size: \x00",
        rb"PYTORCH_[A-Z_]*(?:MPS|METAL)[A-Z_]*\x00",
    )
    found = _library_strings(wheel, re.compile(b"|".join(parts)))
    # MPSFallback.mm's warning is "The operator '", the op, and these two parts: the worker's pattern reads it.
    assert {b"' is not currently supported \x00", b"on the MPS backend and will fall back to run on the CPU."} <= found
    text = "The operator 'aten::col2im' is not currently supported on the MPS backend and will fall back to run on the CPU."
    assert (m := FALLBACK.search(text)) and m.group(1) == "aten::col2im"
    # MPSAllocator's refusal of a buffer past the device's largest is out of memory, not an error.
    assert b"Invalid buffer size: \x00" in found
    assert _classify(RuntimeError("Invalid buffer size: 24.00 GiB")) == "oom"
    # Every variable this torch reads about MPS is one a worker records (its run record's mps_env).
    names = {s[:-1].decode() for s in found if s.startswith(b"PYTORCH_")}
    assert "PYTORCH_ENABLE_MPS_FALLBACK" in names and "PYTORCH_MPS_HIGH_WATERMARK_RATIO" in names
    assert all(n.startswith(MPS_ENV_PREFIXES) for n in names), sorted(names)


def test_allocator_peak_statistics_where_the_headers_have_them(wheel: Wheel):
    # mpsup reads torch.accelerator's peak only if resetting it works; the MPS allocator keeps the
    # statistics from 2.13 (MPSAllocator.h: getDeviceStats/resetPeakStats).
    header = wheel.read("torch/include/ATen/mps/MPSAllocator.h") or ""
    has_stats = "getDeviceStats" in header and "resetPeakStats" in header
    assert has_stats == (wheel.release >= (2, 13))
    acc = wheel.read("torch/accelerator/__init__.py") or ""
    if has_stats:
        assert {"reset_peak_memory_stats", "memory_stats"} <= _surface(acc)
