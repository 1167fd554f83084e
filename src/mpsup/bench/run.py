"""`mpsup bench` as one call: environments + workloads -> a saved run record."""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path
from typing import Any

from mpsup.bench.record import new_record, save_record
from mpsup.bench.runner import BenchOptions, EnvSpec, Progress, Runner, _no_progress
from mpsup.bench.workloads import Workload
from mpsup.host.hygiene import conditions_changed, hygiene_now


def run_bench(
    envs: list[EnvSpec],
    workloads: list[Workload],
    options: BenchOptions,
    *,
    mode: str = "single",
    model: dict[str, Any] | None = None,
    progress: Progress = _no_progress,
    save: bool = True,
) -> tuple[dict[str, Any], Path | None]:
    runner = Runner(envs, options, progress)
    before = hygiene_now()
    try:
        facts = runner.start()
        record = new_record(mode, options.device, facts, {
            "budget_s": options.policy.budget_s, "threads": options.threads, "memory_share": options.memory_share,
            "policy": {k: v for k, v in asdict(options.policy).items()},
        })
        record["model"] = model
        record["hygiene"]["before"] = before
        progress("start", {"total": len(workloads) + (len(runner.smoke_features()) if options.smoke else 0)})
        try:
            if options.smoke:
                record["smoke"] = runner.smoke()
            for w in workloads:
                progress("workload", {"name": w.name})
                record["workloads"].append(runner.measure(w))
                progress("done", {"name": w.name, "status": record["workloads"][-1]["status"]})
        except KeyboardInterrupt:
            record["partial"] = True
            record["interrupted"] = True
    finally:
        runner.close()
    after = hygiene_now()
    record["hygiene"]["after"] = after
    record["hygiene"]["changed"] = conditions_changed(before, after)
    record["crashes"] = {s.env.label: s.crashes for s in runner.sessions}
    path = save_record(record) if save else None
    return record, path
