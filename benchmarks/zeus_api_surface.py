"""The public API of a zeus-apple-silicon macOS wheel, without a Mac: the names its package exports and the method
and field names its compiled extension registers (nanobind keeps them as strings), written as JSON for
tests/test_energy_meters.py to check the fake against.

    pip download zeus-apple-silicon --no-deps --only-binary=:all: --platform macosx_14_0_arm64 \\
        --python-version 3.11 -d /tmp/zas
    python benchmarks/zeus_api_surface.py /tmp/zas/zeus_apple_silicon-*.whl \\
        > tests/fixtures/energy/zeus_apple_silicon_api.json
"""

from __future__ import annotations

import argparse
import json
import re
import zipfile
from pathlib import Path

METHODS = ("begin_window", "end_window", "get_cumulative_energy")
FIELDS = (
    "cpu_total_mj",
    "efficiency_cores_mj",
    "performance_cores_mj",
    "efficiency_cluster_mj",
    "performance_cluster_mj",
    "efficiency_core_manager_mj",
    "performance_core_manager_mj",
    "dram_mj",
    "gpu_mj",
    "gpu_sram_mj",
    "ane_mj",
)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        epilog=__doc__.split("\n\n")[1],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("wheel", type=Path, help="a zeus-apple-silicon macOS wheel")
    wheel = parser.parse_args().wheel
    with zipfile.ZipFile(wheel) as z:
        init = z.read("zeus_apple_silicon/__init__.py").decode()
        ext = next(n for n in z.namelist() if n.startswith("zeus_apple_silicon/zeus_ext") and n.endswith(".so"))
        strings = set(re.findall(rb"[A-Za-z_][A-Za-z0-9_]{2,}", z.read(ext)))
    exports = re.findall(r"import ([\w, ]+)", init)[0].replace(" ", "").split(",")
    doc = {
        "wheel": wheel.name,
        "exports": exports,
        "methods": [m for m in METHODS if m.encode() in strings],
        "metric_fields": [f for f in FIELDS if f.encode() in strings],
        "keyword_restart": b"restart" in strings,
    }
    print(json.dumps(doc, indent=2))


if __name__ == "__main__":
    main()
