"""Records on disk: atomic writes, schema'd JSON, tolerant loading."""

from __future__ import annotations

import json
import math
import os
import tempfile
from pathlib import Path
from typing import Any


def atomic_write_text(path: Path, text: str) -> None:
    """Write via a temp file in the same folder and rename, so a reader never sees half a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def finite_json(doc: Any) -> Any:
    """NaN and infinities become null: json.dumps would write them as bare words no parser accepts."""
    if isinstance(doc, float):
        return doc if math.isfinite(doc) else None
    if isinstance(doc, dict):
        return {k: finite_json(v) for k, v in doc.items()}
    if isinstance(doc, (list, tuple)):
        return [finite_json(v) for v in doc]
    return doc


def atomic_write_json(path: Path, doc: Any) -> None:
    atomic_write_text(path, json.dumps(finite_json(doc), indent=1, allow_nan=False) + "\n")
