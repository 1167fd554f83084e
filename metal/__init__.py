"""The bundled Metal kernels: sources and their manifest, shipped inside the wheel."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

METAL_DIR = Path(__file__).parent


def load_manifest() -> list[dict[str, Any]]:
    """Each kernel's manifest entry with its source text attached (so the worker needs no files)."""
    doc = json.loads((METAL_DIR / "manifest.json").read_text())
    kernels = []
    for entry in doc["kernels"]:
        kernels.append({**entry, "source": (METAL_DIR / entry["file"]).read_text()})
    return kernels
