"""A run record's whole-model phases as figures, and how much of each phase its layer workloads explain.

Pure functions of the record's JSON (bench renders them for one environment; report for the baseline):
the phase's median scaled to the whole model where only a prefix of its blocks was built, tokens/s where
tokens apply, peak memory, the ops that fell back to the CPU, and the layer coverage: the sum of count x
median over the layers that one call of the phase runs, over the phase's median."""

from __future__ import annotations

from typing import Any

from mpsup.model.phases import phase_of

INFERENCE_TOKEN_PHASES = ("prefill", "decode", "forward")
# A language model's training step counts tokens too: those that carry a loss (a UNet's counts images).
TOKEN_PHASES = (*INFERENCE_TOKEN_PHASES, "train_step")


def phase_workloads(record: dict[str, Any]) -> list[dict[str, Any]]:
    return [w for w in record.get("workloads", []) if w.get("part") == "phase" and phase_of(w)]


def phase_info(env: Any) -> dict[str, Any]:
    """What the worker said of a phase call (env.phase). A record read from disk has it checked
    (runs.schema); bench's own record comes from the worker's answer, so anything else reads as nothing."""
    info = env.get("phase") if isinstance(env, dict) else None
    return info if isinstance(info, dict) else {}


def fallback_ops(env: Any) -> tuple[str, ...]:
    """The ops a phase ran on the CPU instead of the device."""
    ops = phase_info(env).get("fallback_ops")
    return tuple(op for op in ops if isinstance(op, str)) if isinstance(ops, list) else ()


FIT_KEYS = ("need_bytes", "allowed_bytes", "capacity_bytes")


def fit_of(env: Any) -> dict[str, float] | None:
    """What the depth fit weighed for this build (worker/whole_model.py `_depth_for`), where it says: the whole
    model's bytes with its activations, what one build may hold, the device's safe memory and the share."""
    fit = phase_info(env).get("fit")
    if not isinstance(fit, dict):
        return None
    got = {k: fit.get(k) for k in (*FIT_KEYS, "share")}
    ok = all(isinstance(v, int | float) and not isinstance(v, bool) and 0 <= v < 2**62 for v in got.values())
    return {k: float(v) for k, v in got.items() if v is not None} if ok else None


def fit_note(phase: str, fit: dict[str, float], scaled: str | None, environments: int) -> str:
    """One line: whether the model ran whole, and what the fit rule weighed."""
    gib = 2**30
    each = f"{fit['need_bytes'] / gib:.1f} GiB with its activations"
    allowed = (
        f"the {fit['allowed_bytes'] / gib:.1f} GiB a build may hold ({fit['share']:.0%} of "
        f"{fit['capacity_bytes'] / gib:.1f} GiB" + (f"; {environments} builds at once)" if environments > 1 else ")")
    )
    if scaled:
        return f"{phase}: ran {scaled} blocks: the whole model needs {each}, over {allowed}"
    return f"{phase}: the model runs whole: {each}, within {allowed}"


def scale_of(env: dict[str, Any]) -> float:
    """Whole model / what ran: layers over the blocks built (1 when every block ran)."""
    info = phase_info(env)
    layers, depth = info.get("layers"), info.get("depth")
    # Bounded as the record reader bounds them: an int past a float's range would overflow the division.
    if type(layers) is int and type(depth) is int and 0 < depth < layers <= 10**9:
        return layers / depth
    return 1.0


def scaled_from(env: dict[str, Any]) -> str | None:
    """The blocks run, as "8 of 32", where only a prefix of them ran; else None (said beside every scaled figure)."""
    info = phase_info(env)
    return f"{info.get('depth')} of {info.get('layers')}" if scale_of(env) != 1.0 else None


def _layers_of(record: dict[str, Any], phase_w: dict[str, Any]) -> list[dict[str, Any]] | None:
    """The layer workloads one call of this phase runs, or None where the record cannot tell."""
    phase = str(phase_w.get("phase"))
    layers = [
        w for w in record.get("workloads", []) if w.get("part") == "model" and "alternative" not in w.get("tags", ())
    ]
    if phase in INFERENCE_TOKEN_PHASES and phase_w.get("library") == "transformers" and not phase_w.get("component"):
        tokens = 1 if phase == "decode" else phase_w.get("tokens")
        # generate() asks for the last position's logits only: the head then runs on one token.
        envs = phase_w.get("envs", {}).values()
        kept = any(phase_info(e).get("logits_kept") == 1 for e in envs)
        return [w for w in layers if w.get("tokens") == (1 if kept and w.get("role") == "output-head" else tokens)]
    if phase == "step" and phase_w.get("component"):
        return [w for w in layers if phase_w["component"] in w.get("tags", ())]
    return None  # a VAE's decode and encode layers are not told apart; a text encoder runs at 77 tokens


def coverage(record: dict[str, Any], phase_w: dict[str, Any], label: str) -> float | None:
    env = phase_w.get("envs", {}).get(label, {})
    whole = env.get("median")
    layers = _layers_of(record, phase_w)
    # No layer of this phase listed (a config without weights) or measured (decode's 1-token ones at --tokens
    # 8): unknown, where 0% would say the layers explain nothing.
    if not whole or not layers:
        return None
    explained = 0.0
    for w in layers:
        med = w.get("envs", {}).get(label, {}).get("median")
        if not med:
            return None  # a layer not measured: the share is not known
        explained += w.get("count", 1) * med
    return explained / (whole * scale_of(env))


def phase_figures(record: dict[str, Any], label: str) -> dict[str, dict[str, Any]]:
    """bench --json's `model_phases`: {phase: median_s, ci_low_s, ci_high_s, tokens_per_s, peak_memory_bytes,
    source, ...}, for one environment."""
    out: dict[str, dict[str, Any]] = {}
    for w in phase_workloads(record):
        phase = phase_of(w)
        assert phase is not None
        env = w.get("envs", {}).get(label, {})
        scale = scale_of(env)
        med = env.get("median")
        low, high = env.get("ci_low"), env.get("ci_high")
        memory = env.get("memory") or {}
        peak = memory.get("peak_allocated") or memory.get("workload_peak")
        tokens = None
        counts_tokens = phase.split("/")[0] in TOKEN_PHASES and w.get("library") != "diffusers"
        if med and counts_tokens and env.get("items_per_call"):
            tokens = env["items_per_call"] / (med * scale)
        doc: dict[str, Any] = {
            "median_s": med * scale if med else None,
            "ci_low_s": low * scale if low is not None else None,
            "ci_high_s": high * scale if high is not None else None,
            "tokens_per_s": tokens,
            "peak_memory_bytes": peak,
            "source": "whole-model",
            # This environment's own: a phase the candidate could not run was told as the baseline's.
            "status": env.get("status") or w.get("status"),
        }
        reason = env.get("reason") or (w.get("reason") if not med else None)
        if reason:
            doc["reason"] = reason
        if (blocks := scaled_from(env)) is not None:
            doc["scaled_from_blocks"] = blocks
            doc["depth_forced"] = bool(w.get("depth"))  # --depth, or the model did not fit whole
        if fit := fit_of(env):
            doc["fit"] = fit
        if memory.get("driver_allocated_max"):
            doc["driver_memory_max_bytes"] = memory["driver_allocated_max"]
        if ops := fallback_ops(env):
            doc["fallback_ops"] = list(ops)
        doc["layer_coverage"] = coverage(record, w, label)
        out[phase] = doc
    return out


def census(record: dict[str, Any], label: str) -> dict[str, Any]:
    """Each phase's op census as the worker counted it (one call, before timing)."""
    out: dict[str, Any] = {}
    for w in phase_workloads(record):
        census = phase_info(w.get("envs", {}).get(label)).get("census")
        if isinstance(census, dict) and census:
            out[str(phase_of(w))] = census
    return out


# The layers timed alone can add up to more than the phase they sit in (noise, or caches a layer alone does
# not share): said as what it is, never "explain more than all of it".
OVER_WHOLE_NOTE = (
    "above 100%: the layers timed alone took longer than inside the model (noise, or caches and threads a "
    "layer alone does not share); the phase's own time is the answer"
)


def coverage_phrase(share: float) -> str:
    """The clause a phase line ends with: how much of the phase its layer workloads account for."""
    if share <= 1.0:
        return f"the layer workloads explain {share:.0%} of it"
    return f"the layer workloads, timed alone, add up to {share:.0%} of it (more than the whole)"
