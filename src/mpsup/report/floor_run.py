"""Which stored A/A run is this run's noise floor: the same device, machine, baseline torch, model and workloads,
run under the same conditions (an A/A of another OS build or energy mode measured another machine's noise)."""

from __future__ import annotations

from mpsup.runs.apart import conditions_differ
from mpsup.runs.schema import Environment, RunRecord


def side_version(env: Environment) -> str:
    """The torch version, or an MLX environment's `MLX 0.32.4` (its torch_version is none)."""
    return env.side if env.stack == "mlx" else str(env.torch_version)


def _fingerprint(record: RunRecord) -> tuple[str, str, str, str]:
    envs = record.environments or (Environment(label=""),)
    return (str(record.device), str(envs[0].device_name), side_version(envs[0]), side_version(envs[-1]))


def matching_aa(record: RunRecord, stored: list[RunRecord], passed: list[str] | None = None) -> RunRecord | None:
    """The newest `--aa` run of the same device, machine, baseline torch and model that measured every paired
    workload of `record`, in the same dtype (stored runs are oldest first), and that ran under the same OS build,
    energy mode and power source where both runs read them: one that did not is passed over, and said in
    `passed`."""
    # By name, dtype and a phase's size, of the same model: another model's `model/prefill`, the fp32 run of a
    # model measured in bf16 here, or its step at another resolution has the same names and says nothing about
    # this run's noise.
    names = {w.identity for w in record.workloads if w.ratios}
    model = record.model.fingerprint if record.model else None
    envs = record.environments or (Environment(label=""),)
    # torch against MLX: MLX's own A/A first (its noise is the one no torch A/A shows), else torch's.
    sides = sorted(envs[:2], key=lambda e: e.stack != "mlx") if envs[0].stack != envs[-1].stack else envs[:1]
    for env in sides:
        want = (str(record.device), str(env.device_name), side_version(env), model)
        for cand in reversed(stored):
            theirs = (*_fingerprint(cand)[:3], cand.model.fingerprint if cand.model else None)
            if cand.mode != "aa" or cand.id == record.id or theirs != want:
                continue
            have = {w.identity for w in cand.workloads if w.ratios}
            if not (names and names <= have):
                continue
            differ = conditions_differ(record.hygiene.before, cand.hygiene.before)
            if differ:
                if passed is not None:
                    passed.append(
                        f"A/A run {cand.id} not used as this run's noise floor: it ran under other conditions "
                        f"({'; '.join(differ)})"
                    )
                continue
            return cand
    return None
