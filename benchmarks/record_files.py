"""Reading the JSON documents the benchmark scripts take (run records, calibration summaries), plain or
gzip-compressed: docs/figures keeps the JSON a claim needs as .json.gz."""

from __future__ import annotations

import gzip
import sys
import zlib
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from mpsup.errors import UserError
from mpsup.safe_files import DEFAULT_MAX_JSON_BYTES, parse_json, read_bytes_bounded


def read_json_object(path: Path, what: str, max_bytes: int = DEFAULT_MAX_JSON_BYTES) -> dict[str, Any]:
    """mpsup.safe_files.read_json_object, also for `NAME.json.gz` (recognised by its gzip magic, not its name)."""
    data = read_bytes_bounded(path, what, max_bytes)
    if data[:2] == b"\x1f\x8b":
        try:
            # Decompressed in bounded steps: a small file must not expand past the same limit.
            d = zlib.decompressobj(wbits=31)
            data = d.decompress(data, max_bytes + 1)
        except (zlib.error, EOFError, gzip.BadGzipFile) as exc:
            raise UserError(f"{path}: {what} is not readable gzip ({exc})") from None
        if len(data) > max_bytes:
            raise UserError(f"{path}: {what} is larger than {max_bytes >> 20} MiB uncompressed; refusing to read it")
    doc = parse_json(data, path, what)
    if not isinstance(doc, dict):
        raise UserError(f"{path}: {what} must be a JSON object, found {type(doc).__name__}")
    return doc
