"""The wheel carries the top-level metal/ folder as the package mpsup.metal, and every package under src/mpsup/;
the editable install finds the shaders too."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
METAL = ROOT / "metal"


def _wheel_names(tmp_path: Path) -> set[str]:
    # Built from a copy: setuptools writes build/ and *.egg-info beside the sources, and other runs may share the checkout.
    src = tmp_path / "src-copy"
    src.mkdir()
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        if (ROOT / name).exists():
            shutil.copy2(ROOT / name, src / name)
    shutil.copytree(ROOT / "src", src / "src", ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    shutil.copytree(METAL, src / "metal", ignore=shutil.ignore_patterns("__pycache__"))
    out = tmp_path / "wheels"
    proc = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", str(src), "--no-deps", "--no-build-isolation", "-q", "-w", str(out)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    (wheel,) = out.glob("mpsup-*.whl")
    with zipfile.ZipFile(wheel) as zf:
        return set(zf.namelist())


@pytest.fixture(scope="module")
def wheel_names(tmp_path_factory: pytest.TempPathFactory) -> set[str]:
    return _wheel_names(tmp_path_factory.mktemp("wheel"))


def test_the_wheel_carries_every_shader_and_the_manifest(wheel_names: set[str]):
    shaders = sorted(p.name for p in METAL.glob("*.metal"))
    assert shaders, "no shader in metal/"
    manifest = json.loads((METAL / "manifest.json").read_text())
    wanted = {f"mpsup/metal/{name}" for name in [*shaders, "manifest.json", "__init__.py"]}
    wanted |= {f"mpsup/metal/{entry['file']}" for entry in manifest["kernels"]}
    assert wanted - wheel_names == set()


def test_the_wheel_carries_every_module_under_src(wheel_names: set[str]):
    # The package list in pyproject.toml is explicit (metal/ is mapped from outside src/): a new package must join it.
    modules = {
        p.relative_to(ROOT / "src").as_posix()
        for p in (ROOT / "src" / "mpsup").rglob("*.py")
        if "__pycache__" not in p.parts
    }
    assert modules - wheel_names == set()


def test_the_editable_install_finds_the_shaders(tmp_path: Path):
    code = (
        "import json, mpsup.metal as m; ks = m.load_manifest(); "
        "print(json.dumps({'dir': str(m.METAL_DIR), 'n': len(ks), 'sources': all(k['source'] for k in ks)}))"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path, timeout=60, check=True
    )
    found = json.loads(proc.stdout)
    if Path(found["dir"]).resolve() != METAL.resolve():
        pytest.skip(f"mpsup is installed from a wheel here ({found['dir']}), not editable")
    assert found["n"] == len(json.loads((METAL / "manifest.json").read_text())["kernels"]) and found["sources"]


def test_a_checkout_on_pythonpath_finds_the_shaders(tmp_path: Path):
    """`PYTHONPATH=src` with nothing installed (site disabled: no editable finder) still finds mpsup.metal."""
    code = "import mpsup.metal as m; print(len(m.load_manifest()), m.METAL_DIR)"
    env = {"PYTHONPATH": str(ROOT / "src"), "PATH": "/usr/bin:/bin"}
    proc = subprocess.run(
        [sys.executable, "-S", "-c", code], capture_output=True, text=True, cwd=tmp_path, env=env, timeout=60
    )
    assert proc.returncode == 0, proc.stderr[-500:]
    count, where = proc.stdout.split(maxsplit=1)
    assert int(count) == len(json.loads((METAL / "manifest.json").read_text())["kernels"])
    assert Path(where.strip()).resolve() == METAL.resolve()
