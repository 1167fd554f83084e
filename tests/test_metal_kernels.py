"""The bundled Metal kernels: manifest/source agreement, and their logic compiled as C++ on the CPU
and checked over their grid against the same torch references (and the same comparison) the Mac
path uses."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from mpsup.metal import METAL_DIR, load_manifest
from mpsup.worker.metal import buffer_len, check_grid, make_input, reference, torch_dtype
from mpsup.worker.smoke import Mismatch, check_kernel_output

COMPAT = Path(__file__).parent / "metal_compat"

# Buffers travel as raw bytes; AnyPtr hands them to whatever pointer type the kernel declares.
DRIVER = """
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include "{source}"

struct AnyPtr {{
    void* p;
    template <class U> operator U*() const {{ return static_cast<U*>(p); }}
}};

static void* buffer(size_t bytes) {{
    void* p = std::aligned_alloc(64, (bytes + 63) / 64 * 64);
    std::memset(p, 0, (bytes + 63) / 64 * 64);
    return p;
}}

int main(int argc, char** argv) {{
    const size_t n = std::strtoull(argv[1], nullptr, 10);
    const size_t in_bytes = std::strtoull(argv[2], nullptr, 10);
    const size_t out_bytes = std::strtoull(argv[3], nullptr, 10);
    void* src = buffer(in_bytes);
    void* dst = buffer(out_bytes);
    FILE* fi = std::fopen(argv[4], "rb");
    if (std::fread(src, 1, in_bytes, fi) != in_bytes) return 3;
    std::fclose(fi);
    for (uint i = 0; i < n / {step}; ++i) {name}(AnyPtr{{src}}, AnyPtr{{dst}}, i{extra});
    FILE* fo = std::fopen(argv[5], "wb");
    std::fwrite(dst, 1, out_bytes, fo);
    std::fclose(fo);
    return 0;
}}
"""
THREAD_ARGS = {
    ("thread_position_in_grid",): ("1", ""),
    ("thread_position_in_grid", "threads_per_grid"): ("1", ", static_cast<uint>(n)"),
    ("threadgroup_position_in_grid",): ("{group}", ""),
}
# Under fast math Metal keeps neither NaN nor exact exp2: a kernel must build such values from bits.
FAST_MATH_UNSAFE = re.compile(r"\b(NAN|INFINITY|HUGE_VALF?|MAXFLOAT|isnan|isinf|isfinite|exp2|nan)\b\s*(\(|\b)")


def _strip_comments(text: str) -> str:
    return re.sub(r"//[^\n]*|/\*.*?\*/", "", text, flags=re.S)


def test_manifest_agrees_with_sources():
    kernels = load_manifest()
    names = {k["name"] for k in kernels}
    assert {
        "copy_f32",
        "read_f32x4",
        "write_f32x4",
        "fma_chain",
        "matrix_chain_f16",
        "matrix_chain_bf16",
        "fp8_e4m3_to_bf16",
        "bf16_to_fp8_e4m3",
        "constant_pad_wan_bf16",
    } <= names
    declared = set()
    for src in METAL_DIR.glob("*.metal"):
        declared |= set(re.findall(r"kernel\s+void\s+(\w+)\s*\(", src.read_text()))
    assert declared == names, "every kernel in a .metal file is in the manifest, and the reverse"
    for k in kernels:
        assert f"void {k['name']}(" in k["source"]
        assert k["grid"] > 0 and k["tolerance"]["atol"] >= 0
        assert tuple(k.get("thread_args", ["thread_position_in_grid"])) in THREAD_ARGS
        for attr in k.get("thread_args", ["thread_position_in_grid"]):
            assert f"[[{attr}]]" in k["source"], (k["name"], attr)
        if k.get("group_size"):
            assert k["grid"] % k["group_size"] == 0 and check_grid(k) % k["group_size"] == 0
        grid = check_grid(k)
        want = reference(k, make_input(k["inputs"][0], grid), grid)  # each named reference exists
        assert want.numel() == buffer_len(k["output"], grid), k["name"]


def test_no_kernel_relies_on_what_fast_math_drops():
    # PYTORCH_MPS_FAST_MATH=1 compiles every shader with fast math: NAN, INFINITY and exp2 are then
    # not guaranteed. torch's own c10/metal/float8.h builds such values from bits; so do ours.
    for src in METAL_DIR.glob("*.metal"):
        hits = FAST_MATH_UNSAFE.findall(_strip_comments(src.read_text()))
        assert not hits, f"{src.name} uses {sorted({h[0] for h in hits})}"
    assert FAST_MATH_UNSAFE.search("magnitude = NAN;") and FAST_MATH_UNSAFE.search("y = exp2(float(e));")


@pytest.fixture(scope="module")
def cxx() -> str:
    compiler = shutil.which("g++") or shutil.which("clang++")
    if compiler is None:
        pytest.skip("no C++ compiler here to run the kernels on the CPU")
    return compiler


def _run_on_cpu(
    entry: dict, cxx: str, tmp_path: Path, *, fast_math: bool = False
) -> tuple[torch.Tensor, torch.Tensor, int]:
    step, extra = THREAD_ARGS[tuple(entry.get("thread_args", ["thread_position_in_grid"]))]
    driver = tmp_path / "driver.cpp"
    driver.write_text(
        DRIVER.format(
            source=METAL_DIR / entry["file"],
            name=entry["name"],
            extra=extra,
            step=step.format(group=entry.get("group_size", 1)),
        )
    )
    exe = tmp_path / "driver"
    flags = ["-O2", "-ffast-math", "-DMPSUP_FAST_MATH"] if fast_math else ["-O1"]
    built = subprocess.run(
        [
            cxx,
            "-std=c++17",
            *flags,
            "-Wno-attributes",
            "-include",
            str(COMPAT / "metal_stdlib"),
            "-I",
            str(COMPAT),
            str(driver),
            "-o",
            str(exe),
        ],
        capture_output=True,
        text=True,
    )
    assert built.returncode == 0, built.stderr[-3000:]
    grid = check_grid(entry)
    src = make_input(entry["inputs"][0], grid)
    out_dtype = torch_dtype(entry["output"]["dtype"])
    out_len = buffer_len(entry["output"], grid)
    (tmp_path / "in.bin").write_bytes(bytes(src.contiguous().view(torch.uint8).tolist()))
    subprocess.run(
        [
            str(exe),
            str(grid),
            str(src.numel() * src.element_size()),
            str(out_len * out_dtype.itemsize),
            str(tmp_path / "in.bin"),
            str(tmp_path / "out.bin"),
        ],
        check=True,
    )
    got = torch.frombuffer(bytearray((tmp_path / "out.bin").read_bytes()), dtype=torch.uint8).view(out_dtype)
    return src, got, grid


@pytest.mark.parametrize("entry", load_manifest(), ids=lambda e: e["name"])
def test_kernel_logic_on_cpu(entry: dict, cxx: str, tmp_path: Path):
    src, got, grid = _run_on_cpu(entry, cxx, tmp_path)
    check_kernel_output(entry, got, reference(entry, src, grid))


# The kernels whose answer is a bit pattern: they must hold under fast math as well.
BIT_EXACT = [
    e for e in load_manifest() if e["name"] in ("fp8_e4m3_to_bf16", "bf16_to_fp8_e4m3", "constant_pad_wan_bf16")
]


@pytest.mark.parametrize("entry", BIT_EXACT, ids=lambda e: e["name"])
def test_bit_exact_kernels_hold_under_fast_math(entry: dict, cxx: str, tmp_path: Path):
    src, got, grid = _run_on_cpu(entry, cxx, tmp_path, fast_math=True)
    check_kernel_output(entry, got, reference(entry, src, grid))


def test_fp8_kernels_cover_every_code(cxx: str, tmp_path: Path):
    kernels = {e["name"]: e for e in load_manifest()}
    dec = kernels["fp8_e4m3_to_bf16"]
    (tmp_path / "dec").mkdir()
    src, got, grid = _run_on_cpu(dec, cxx, tmp_path / "dec")
    assert grid == 256 and sorted(src.tolist()) == list(range(256))
    assert int(torch.isnan(got.float()).sum()) == 2  # 0x7F and 0xFF
    enc = kernels["bf16_to_fp8_e4m3"]
    (tmp_path / "enc").mkdir()
    src, got, grid = _run_on_cpu(enc, cxx, tmp_path / "enc")
    # All 65,536 bfloat16 patterns, bit for bit against torch's own cast: rounding to nearest even,
    # saturation at +-448 (0x7E/0xFE), NaN as 0x7F/0xFF.
    assert grid == 65536 and len(set(src.view(torch.int16).tolist())) == 65536
    want = src.to(torch.float8_e4m3fn).view(torch.uint8)
    assert torch.equal(got, want)
    inf = torch.tensor([float("inf"), -float("inf"), 1e30, 449.0, 464.0], dtype=torch.bfloat16)
    codes = {int(c) for c, s in zip(got.tolist(), src.tolist(), strict=True) if s in inf.tolist()}
    assert codes == {0x7E, 0xFE}


def test_a_wrong_kernel_is_caught():
    # The comparison is not vacuous: one flipped bit in a bit-exact output fails it.
    entry = next(e for e in load_manifest() if e["name"] == "bf16_to_fp8_e4m3")
    src = make_input(entry["inputs"][0], 65536)
    want = reference(entry, src, 65536)
    bad = want.clone()
    bad[12345] ^= 1
    with pytest.raises(Mismatch):
        check_kernel_output(entry, bad, want)


@pytest.mark.mac
@pytest.mark.skipif(
    sys.platform != "darwin", reason="needs an Apple-silicon Mac: compiles the kernels with torch.mps.compile_shader"
)
def test_kernels_on_mps():
    from mpsup.worker.device import Device
    from mpsup.worker.smoke import run_feature

    result = run_feature("metal_kernels", Device("mps"), load_manifest())
    assert result["status"] == "pass", result
