"""The bundled Metal kernels: manifest/source agreement, and their logic compiled as C++ on the CPU
and checked over their grid against the same torch references the Mac path uses."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from mpsup.metal import METAL_DIR, load_manifest
from mpsup.worker.metal import make_input, reference

COMPAT = Path(__file__).parent / "metal_compat"

DRIVER = """
#include <cstdio>
#include <cstdlib>
#include <vector>
#include "{source}"

int main(int argc, char** argv) {{
    size_t n = std::strtoull(argv[1], nullptr, 10);
    std::vector<{in_t}> src(n);
    std::vector<{out_t}> dst(n);
    FILE* fi = std::fopen(argv[2], "rb");
    if (std::fread(src.data(), sizeof({in_t}), n, fi) != n) return 3;
    std::fclose(fi);
    for (uint i = 0; i < n; ++i) {name}(src.data(), dst.data(), i);
    FILE* fo = std::fopen(argv[3], "wb");
    std::fwrite(dst.data(), sizeof({out_t}), n, fo);
    std::fclose(fo);
    return 0;
}}
"""
C_TYPES = {"fp32": "float", "uint8": "uchar", "bf16": "bfloat"}
TORCH = {"fp32": torch.float32, "uint8": torch.uint8, "bf16": torch.bfloat16}


def test_manifest_agrees_with_sources():
    kernels = load_manifest()
    names = {k["name"] for k in kernels}
    assert {"copy_f32", "fma_chain", "fp8_e4m3_to_bf16"} <= names
    declared = set()
    for src in METAL_DIR.glob("*.metal"):
        declared |= set(re.findall(r"kernel\s+void\s+(\w+)\s*\(", src.read_text()))
    assert declared == names, "every kernel in a .metal file is in the manifest, and the reverse"
    for k in kernels:
        assert f"void {k['name']}(" in k["source"]
        assert k["grid"] > 0 and k["tolerance"]["atol"] >= 0
        reference(k["reference"], make_input(k["inputs"][0], 8))  # each named reference exists


def test_metal_sources_ship_in_the_package():
    import tomllib

    cfg = tomllib.loads((Path(__file__).parent.parent / "pyproject.toml").read_text())
    data = cfg["tool"]["setuptools"]["package-data"]["mpsup"]
    assert "metal/*.metal" in data and "metal/*.json" in data


@pytest.fixture(scope="module")
def cxx() -> str:
    compiler = shutil.which("g++") or shutil.which("clang++")
    if compiler is None:
        pytest.skip("no C++ compiler here to run the kernels on the CPU")
    return compiler


@pytest.mark.parametrize("entry", load_manifest(), ids=lambda e: e["name"])
def test_kernel_logic_on_cpu(entry: dict, cxx: str, tmp_path: Path):
    in_dt, out_dt = entry["inputs"][0]["dtype"], entry["output"]["dtype"]
    driver = tmp_path / "driver.cpp"
    driver.write_text(DRIVER.format(source=METAL_DIR / entry["file"], in_t=C_TYPES[in_dt], out_t=C_TYPES[out_dt],
                                    name=entry["name"]))
    exe = tmp_path / "driver"
    subprocess.run([cxx, "-std=c++17", "-O1", "-Wno-attributes", "-I", str(COMPAT), str(driver), "-o", str(exe)],
                   check=True, capture_output=True, text=True)
    grid = min(int(entry["grid"]), 1 << 16)
    src = make_input(entry["inputs"][0], grid)
    (tmp_path / "in.bin").write_bytes(bytes(src.contiguous().view(torch.uint8).tolist()))
    subprocess.run([str(exe), str(grid), str(tmp_path / "in.bin"), str(tmp_path / "out.bin")], check=True)
    raw = (tmp_path / "out.bin").read_bytes()
    got = torch.frombuffer(bytearray(raw), dtype=torch.uint8).view(TORCH[out_dt])
    want = reference(entry["reference"], src)
    assert got.shape == want.shape
    if entry["reference"] == "fp8_e4m3_decode":
        # All 256 codes against torch's own float8_e4m3fn conversion, bit for bit (NaNs as NaN).
        assert grid == 256
        nan = torch.isnan(want.float())
        assert torch.equal(torch.isnan(got.float()), nan)
        assert int(nan.sum()) == 2  # 0x7F and 0xFF
        assert torch.equal(got[~nan].view(torch.int16), want[~nan].view(torch.int16))
    else:
        tol = entry["tolerance"]
        torch.testing.assert_close(got, want, rtol=tol["rtol"], atol=tol["atol"])


@pytest.mark.mac
@pytest.mark.skipif(sys.platform != "darwin", reason="needs an Apple-silicon Mac: compiles the kernels with torch.mps.compile_shader")
def test_kernels_on_mps():
    from mpsup.worker.device import Device
    from mpsup.worker.smoke import run_feature

    result = run_feature("metal_kernels", Device("mps"), load_manifest())
    assert result["status"] == "pass", result
