"""`bench --json`: the finished run as one JSON document (its keys and values are a public interface)."""

from __future__ import annotations

from typing import Any

from mpsup.bench.figures import model_forward_estimate
from mpsup.errors import UserError
from mpsup.host.moved import run_conditions
from mpsup.model.coverage import census, phase_figures
from mpsup.runs.schema import as_record


def run_summary(record: dict[str, Any], path: str | None) -> dict[str, Any]:
    """The run as `--json` prints it, read key for key from the document bench wrote (`path`: where it was saved):
    its keys and values are an interface scripts read, so this takes the JSON, not the typed record."""
    counts: dict[str, int] = {}
    for w in record["workloads"]:
        counts[w["status"]] = counts.get(w["status"], 0) + 1
    label = record["environments"][0]["label"]
    return {
        "id": record["id"],
        "path": path,
        "mode": record["mode"],
        "device": record["device"],
        "partial": record["partial"],
        "interrupted": bool(record.get("interrupted")),
        "signal": record.get("signal"),
        "failure": record.get("failure"),
        "environments": record["environments"],
        "status_counts": counts,
        "model": record.get("model"),
        "model_forward_s": model_forward_estimate(record, label),
        "model_phases": phase_figures(record, label),
        "model_census": census(record, label),
        "smoke": {s["feature"]: {k: v["status"] for k, v in s["envs"].items()} for s in record.get("smoke", [])},
        # What was read of the machine, and whether it moved (host/moved.py): the report's `conditions` object.
        "machine_state": record.get("machine_state"),
        "energy_meter": record.get("energy_meter"),
        "conditions": _conditions(record),
        "workloads": [
            {
                "name": w["name"],
                "kind": w["kind"],
                "status": w["status"],
                "median_s": w["envs"].get(label, {}).get("median"),
                "ci_low_s": w["envs"].get(label, {}).get("ci_low"),
                "ci_high_s": w["envs"].get(label, {}).get("ci_high"),
            }
            for w in record["workloads"]
        ],
    }


def _conditions(record: dict[str, Any]) -> dict[str, Any] | None:
    try:
        return run_conditions(as_record(record, "the run record")).to_json()
    except UserError:  # a record the reader refuses has its own line already; no conditions to add to it
        return None
