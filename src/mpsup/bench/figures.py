"""What one run's figures add up to: the roofline it measured, where the time goes, how well each
median is known, and a model's estimated forward time. Computed here, printed by bench/screen.py."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class RunFigures:
    copy_bandwidth: float | None  # bytes/s, the best roofline copy
    matmul_rate: float | None  # FLOP/s, the best roofline matmul
    decode_bandwidth: float | None  # bytes/s, the best single-token linear layer
    time_shares: tuple[tuple[str, float], ...]  # (part, share of the run's time), largest first
    median_width: float | None  # relative half-width of the median workload's interval
    widest_width: float | None


def _best(ws: list[dict[str, Any]], label: str, key: str) -> float | None:
    rates = [e[key] / e["median"] for w in ws for e in [w["envs"].get(label, {})] if e.get("median") and e.get(key)]
    return max(rates) if rates else None


def run_figures(record: dict[str, Any]) -> RunFigures:
    """The first environment's figures (a single run has one)."""
    label = record["environments"][0]["label"]
    ws = record["workloads"]
    roof = [w for w in ws if w.get("part") == "roofline"]
    decode = [w for w in ws if w.get("part") == "linear" and w.get("tokens") == 1]
    spent: dict[str, float] = {}
    for w in ws:
        med = w["envs"].get(label, {}).get("median")
        # A phase holds its layers' time, and an op replayed from a phase is a piece of it: counting both twice.
        if med and w.get("part") not in ("phase", "op"):
            part = w.get("part", "other")
            spent[part] = spent.get(part, 0.0) + w.get("count", 1) * med
    total = sum(spent.values())
    shares = tuple((k, v / total) for k, v in sorted(spent.items(), key=lambda kv: -kv[1])) if total else ()
    widths = sorted(
        (e["ci_high"] - e["ci_low"]) / 2 / e["median"]
        for w in ws
        for e in [w["envs"].get(label, {})]
        if e.get("median") and e.get("ci_low") is not None and e.get("ci_high") is not None
    )
    return RunFigures(
        copy_bandwidth=_best(roof, label, "bytes_per_call"),
        matmul_rate=_best(roof, label, "flops_per_call"),
        decode_bandwidth=_best(decode, label, "bytes_per_call"),
        time_shares=shares,
        median_width=widths[len(widths) // 2] if widths else None,
        widest_width=widths[-1] if widths else None,
    )


def _layer_times(record: dict[str, Any], label: str) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """The layer workloads one forward runs, each with its measured figures in `label`. Not the whole-model
    phases: they are the model measured whole (model/coverage.py), and adding them to its layers would count
    the model twice. Not an "alternative" either: another way to run a layer already counted (FP8 scaled_mm
    beside the upcast bf16 path), which would count that layer twice."""
    return [
        (w, env)
        for w in record["workloads"]
        for env in [w["envs"].get(label, {})]
        if env.get("median")
        and "alternative" not in w.get("tags", ())
        and w.get("part") not in ("phase", "op")  # an op replayed from a phase's census is a piece of a phase
        and w.get("kind") != "end_to_end"  # a .pt2 or module:function forward is the model, not a layer of it
    ]


def model_forward_estimate(record: dict[str, Any], label: str) -> dict[str, float | None] | None:
    """Sum over the layer workloads of count x median, with an interval from the per-workload intervals summed
    end to end (conservative: it treats the workloads' errors as if they all leaned the same way)."""
    layers = _layer_times(record, label) if record.get("model") else []
    if not layers:  # no model, or none of its layers measured (a config alone, a .pt2 timed end to end)
        return None
    est = low = high = 0.0
    bounded = True
    for w, env in layers:
        c = w.get("count", 1)
        est += c * env["median"]
        if env.get("ci_low") is None or env.get("ci_high") is None:
            bounded = False
        else:
            low += c * env["ci_low"]
            high += c * env["ci_high"]
    return {"estimate": est, "low": low if bounded else None, "high": high if bounded else None}


def model_role_shares(record: dict[str, Any], label: str) -> tuple[tuple[str, float], ...]:
    """(role, share of the layer estimate), largest first: over the same workloads as `model_forward_estimate`,
    so the shares add up to the estimate they split."""
    spent: dict[str, float] = {}
    for w, env in _layer_times(record, label):
        role = w.get("role") or w["kind"]
        spent[role] = spent.get(role, 0.0) + w.get("count", 1) * env["median"]
    total = sum(spent.values())
    return tuple((k, v / total) for k, v in sorted(spent.items(), key=lambda kv: -kv[1])) if total else ()
