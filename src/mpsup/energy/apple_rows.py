"""IOReport "Energy Model" rows -> joules per part: each row's own unit, names matched exactly, dies summed.

The rows differ by chip: M1-M4 name the CPU total `CPU Energy`, Ultra chips prefix it per die (`DIE_0_CPU
Energy`), M5 renames the clusters; the GPU total is `GPU Energy` (in nJ) beside per-die `GPU0_0` rows (in mJ)
on some chips. Matching by substring counts a cluster inside its total, or the GPU twice, so a row counts
only under its exact name. Clusters, cores, GPU SRAM, ISP and the rest are left out: either inside a total
counted here or not part of what a model run draws."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

UNITS = {"nJ": 1e-9, "uJ": 1e-6, "µJ": 1e-6, "mJ": 1e-3, "J": 1.0, "kJ": 1e3}
_DIE = re.compile(r"DIE_(\d+)_(.+)")
_EXACT = {
    "cpu": re.compile(r"CPU Energy"),
    "gpu": re.compile(r"GPU Energy"),
    "ane": re.compile(r"ANE(\d+(_\d+)?)?"),
    "dram": re.compile(r"DRAM(\d+(_\d+)?)?"),
}
# Per-die GPU rows: counted only where a chip has no `GPU Energy` row, which would hold the same energy.
_GPU_DIES = re.compile(r"GPU(\d+(_\d+)?)?")

Rows = Mapping[str, tuple[float, str]]  # channel name -> (value, unit label)


@dataclass(frozen=True)
class Classified:
    joules: dict[str, float]  # per part present in the rows
    skipped: tuple[str, ...] = ()  # rows of an unknown unit, by name


def base_name(name: str) -> str:
    """The name without a multi-die chip's `DIE_<n>_` prefix."""
    m = _DIE.fullmatch(name)
    return m.group(2) if m else name


def classify(rows: Rows) -> Classified:
    joules: dict[str, float] = {}
    skipped: list[str] = []
    has_gpu_total = any(base_name(n) == "GPU Energy" for n in rows)
    for name, (value, unit) in rows.items():
        base = base_name(name)
        part = next((p for p, rx in _EXACT.items() if rx.fullmatch(base)), None)
        if part is None and not has_gpu_total and _GPU_DIES.fullmatch(base):
            part = "gpu"
        if part is None:
            continue
        scale = UNITS.get(unit.strip())
        if scale is None:
            skipped.append(name)
            continue
        joules[part] = joules.get(part, 0.0) + float(value) * scale
    return Classified(joules, tuple(skipped))
