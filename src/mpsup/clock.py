"""The timestamps mpsup writes: one format for documents, one for file names (both UTC)."""

from __future__ import annotations

from datetime import UTC, datetime


def iso_now() -> str:
    """2026-12-03T12:00:00Z: what records, journals and snapshots say about when."""
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def file_stamp(*, micro: bool = False) -> str:
    """20261203T120000Z (or with microseconds, when two files may be made in one second): sorts by time as a file
    name."""
    return datetime.now(UTC).strftime("%Y%m%dT%H%M%S%fZ" if micro else "%Y%m%dT%H%M%SZ")
