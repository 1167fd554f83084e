"""Bench output: progress on stderr, tables per part, and the JSON summary."""

from __future__ import annotations

import math
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from mpsup.render import safe
from mpsup.stats import geometric_mean

PART_TITLES = {
    "linear": "BF16 linear layers of real models",
    "moe": "MoE grouped matmul vs per-expert loop",
    "fp8": "FP8",
    "pad": "Constant padding (Wan2.2 VAE decoder)",
    "roofline": "Roofline probes",
    "model": "Your model's workloads",
}


def fmt_time(s: float | None) -> str:
    if s is None or math.isnan(s):
        return "-"
    if s < 1e-3:
        return f"{s * 1e6:.1f} us"
    if s < 1:
        return f"{s * 1e3:.2f} ms"
    return f"{s:.2f} s"


def fmt_bytes(n: float | None) -> str:
    if not n:
        return "-"
    for unit, size in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return f"{n:.0f} B"


@contextmanager
def bench_progress(console: Console) -> Iterator[Any]:
    progress = Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                        TimeElapsedColumn(), TextColumn("{task.fields[current]}"), console=console, transient=False)
    task = None

    def on_event(event: str, info: dict[str, Any]) -> None:
        nonlocal task
        if event == "start":
            # Shown only once measuring starts: an error before then stays one line, not a line and an empty bar.
            progress.start()
            task = progress.add_task("bench", total=info["total"], current="")
        elif task is not None and event == "workload":
            progress.update(task, current=safe(info["name"]))
        elif task is not None and event in ("done", "smoke"):
            if event == "smoke" and info.get("env") not in (None, "baseline"):
                return
            progress.advance(task)

    try:
        yield on_event
    finally:
        progress.stop()


def _rate(env: dict[str, Any]) -> str:
    med = env.get("median")
    if not med:
        return "-"
    flops, moved = env.get("flops_per_call"), env.get("bytes_per_call")
    parts = []
    if flops:
        parts.append(f"{flops / med / 1e12:.2f} TFLOP/s")
    if moved:
        parts.append(f"{moved / med / 1e9:.1f} GB/s")
    return ", ".join(parts) or "-"


def _memory(env: dict[str, Any]) -> str:
    m = env.get("memory") or {}
    return fmt_bytes(m.get("peak_allocated") or m.get("driver_allocated") or m.get("peak_rss"))


def render_run(record: dict[str, Any], console: Console) -> None:
    envs = record["environments"]
    env = envs[0]
    console.print(f"[bold]torch {safe(env.get('torch_version'))}[/] on {safe(env.get('device_name'))} "
                  f"({safe(record['device'])}, {safe(env.get('threads'))} CPU threads) · run {safe(record['id'])}")
    if record.get("smoke"):
        t = Table(title="Smoke tests (device vs CPU reference)", title_justify="left")
        t.add_column("feature")
        for e in envs:
            t.add_column(safe(e["label"]))
        for s in record["smoke"]:
            cells = []
            for e in envs:
                r = s["envs"].get(e["label"], {})
                style = {"pass": "green", "fail": "red", "crash": "red", "unsupported": "yellow"}.get(r.get("status"), "")
                msg = safe(r.get("status", "?"))
                if r.get("status") != "pass" and r.get("message"):
                    msg += f": {safe(str(r['message'])[:70])}"
                cells.append(f"[{style}]{msg}[/]" if style else msg)
            t.add_row(safe(s["feature"]), *cells)
        console.print(t)
    parts: dict[str, list[dict[str, Any]]] = {}
    for w in record["workloads"]:
        parts.setdefault(w.get("part", "other"), []).append(w)
    for part, ws in parts.items():
        t = Table(title=PART_TITLES.get(part, safe(part)), title_justify="left")
        t.add_column("workload")
        t.add_column("source", overflow="fold", max_width=28)
        for e in envs:
            t.add_column(f"{safe(e['label'])} median", justify="right")
        t.add_column("95% CI", justify="right")
        t.add_column("achieved", justify="right")
        t.add_column("peak mem", justify="right")
        for w in ws:
            first = w["envs"].get(envs[0]["label"], {})
            if w["status"] not in ("ok",) and not first.get("median"):
                t.add_row(safe(w["name"]), safe(w.get("source", "")), *[f"[yellow]{safe(w['status'])}[/]"] + [""] * (len(envs) - 1),
                          safe(str(w.get("reason") or "")[:60]), "", "")
                continue
            meds = [fmt_time(w["envs"].get(e["label"], {}).get("median")) for e in envs]
            ci = f"{fmt_time(first.get('ci_low'))} - {fmt_time(first.get('ci_high'))}"
            t.add_row(safe(w["name"]), safe(w.get("source", "")), *meds, ci, _rate(first), _memory(first))
        console.print(t)
    linear = [w["envs"][envs[0]["label"]]["median"] for w in record["workloads"]
              if w.get("part") == "linear" and w["envs"].get(envs[0]["label"], {}).get("median")]
    if linear:
        console.print(f"Suite geometric mean time over {len(linear)} linear shapes: {fmt_time(geometric_mean(linear))}")
    model = record.get("model")
    if model:
        label = envs[0]["label"]
        timed = [(w, w["envs"].get(label, {}).get("median")) for w in record["workloads"]]
        total = sum(w.get("count", 1) * m for w, m in timed if m)
        fwd = model_forward_estimate(record, label)
        by_role: dict[str, float] = {}
        for w, m in timed:
            if m:
                by_role[w.get("role") or w["kind"]] = by_role.get(w.get("role") or w["kind"], 0.0) + w.get("count", 1) * m
        shares = ", ".join(f"{safe(k)} {v / total:.0%}" for k, v in sorted(by_role.items(), key=lambda kv: -kv[1])) if total else ""
        span = f" (95% CI {fmt_time(fwd['low'])} - {fmt_time(fwd['high'])})" if fwd and fwd["low"] is not None else ""
        console.print(f"[bold]{safe(model['path'])}[/] ({safe(model['format'])}): estimated forward time {fmt_time(total)}{span}, "
                      f"summed over every token count measured; share by kind: {shares}")
        console.print(f"Linear weights: {fmt_bytes(model['linear_weight_bytes'])} now, "
                      f"{fmt_bytes(model['fp8_weight_bytes'])} as float8_e4m3fn")
        if model.get("not_measured"):
            console.print(f"{len(model['not_measured'])} tensors not measured (see the run record for why)")
    if record.get("interrupted"):
        console.print(f"[yellow]Interrupted ({safe(record.get('signal', 'SIGINT'))}): this record is partial; "
                      f"{len(record['workloads'])} finished workloads are kept.[/]")
    elif record.get("partial"):
        console.print(f"[yellow]Stopped early: this record is partial ({safe(record.get('failure', 'unknown reason'))}).[/]")
    for change in record.get("hygiene", {}).get("changed", []):
        console.print(f"[yellow]Conditions changed during the run: {safe(change)}[/]")


def model_forward_estimate(record: dict[str, Any], label: str) -> dict[str, float | None] | None:
    """Sum over workloads of count x median, with an interval from the per-workload intervals summed
    end to end (conservative: it treats the workloads' errors as if they all leaned the same way)."""
    if not record.get("model"):
        return None
    est = low = high = 0.0
    bounded = True
    for w in record["workloads"]:
        env = w["envs"].get(label, {})
        if not env.get("median"):
            continue
        c = w.get("count", 1)
        est += c * env["median"]
        if env.get("ci_low") is None or env.get("ci_high") is None:
            bounded = False
        else:
            low += c * env["ci_low"]
            high += c * env["ci_high"]
    return {"estimate": est, "low": low if bounded else None, "high": high if bounded else None}


def run_summary(record: dict[str, Any], path: str | None) -> dict[str, Any]:
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
        "smoke": {s["feature"]: {k: v["status"] for k, v in s["envs"].items()} for s in record.get("smoke", [])},
        "workloads": [
            {"name": w["name"], "kind": w["kind"], "status": w["status"],
             "median_s": w["envs"].get(label, {}).get("median"),
             "ci_low_s": w["envs"].get(label, {}).get("ci_low"), "ci_high_s": w["envs"].get(label, {}).get("ci_high")}
            for w in record["workloads"]
        ],
    }
