"""The MPS environment variables the doctor reads, and how each torch reads PYTORCH_ENABLE_MPS_FALLBACK."""

from __future__ import annotations

import re

from mpsup.host.facts import _version_tuple
from mpsup.host.snapshot import MPS_ENV_PREFIXES

# How torch reads PYTORCH_ENABLE_MPS_FALLBACK, from the machine code of the real macOS wheels' MPSFallback
# registration: 2.15 compares the text with "0" (set to anything else, "" included, is on); 2.6 parses it with
# std::stoi (leading spaces, a sign, digits: "00" and " 0" are off, and text with no number throws at import).
# Releases between those two are not read here: where the rules disagree, both are said.
FALLBACK_TEXT_RULE_FROM = (2, 15)
FALLBACK_STOI_RULE_UNTIL = (2, 6)
# strtol's leading white space, a sign, leading zeros (any number of them still reads as a small number), digits.
_STOI = re.compile(r"[ \t\n\v\f\r]*([+-]?)0*([0-9]+)")
# A 32-bit int has at most 10 digits; more (past leading zeros) is out of std::stoi's range for certain.
_INT32_DIGITS = 10


def _fallback_by_text(value: str) -> bool:
    return value != "0"


def _fallback_by_stoi(value: str) -> bool | None:
    """std::stoi's reading; None where it throws: no number (std::invalid_argument), or a number beyond a 32-bit
    int (std::out_of_range), which torch 2.6 does not catch, so importing it fails."""
    m = _STOI.match(value)
    if not m or len(m.group(2)) > _INT32_DIGITS:
        return None
    number = int(m.group(1) + m.group(2))
    if not -(2**31) <= number < 2**31:
        return None
    return number != 0


def mps_fallback_on(value: str | None, torch_version: str | None) -> bool | None:
    """Whether this torch runs ops without an MPS kernel on the CPU; None: it depends on a build between the two
    rules read, or torch 2.6 cannot parse the value (it throws while importing)."""
    if value is None:
        return False
    release = _version_tuple(torch_version or "")[:2]
    if release and release >= FALLBACK_TEXT_RULE_FROM:
        return _fallback_by_text(value)
    if release and release <= FALLBACK_STOI_RULE_UNTIL:
        return _fallback_by_stoi(value)
    by_text, by_stoi = _fallback_by_text(value), _fallback_by_stoi(value)
    return by_text if by_text == by_stoi else None


MPS_ENV_EFFECTS: dict[str, str] = {
    "PYTORCH_ENABLE_MPS_FALLBACK": "unsupported ops silently run on the CPU, so timings mix CPU and GPU",
    "PYTORCH_MPS_HIGH_WATERMARK_RATIO": "caps MPS memory as a share of the recommended size; 0.0 removes the cap "
    "and can freeze the Mac",
    "PYTORCH_MPS_LOW_WATERMARK_RATIO": "sets when the allocator starts freeing cached memory",
    "PYTORCH_MPS_FAST_MATH": "enables Metal fast math: faster, less precise results",
    "PYTORCH_MPS_PREFER_METAL": "prefers Metal kernels over MPSGraph for matmul",
    "PYTORCH_DEBUG_MPS_ALLOCATOR": "allocator debugging output, which slows allocation",
    "PYTORCH_MPS_LOG_PROFILE_INFO": "profiling logs, which add overhead",
    "PYTORCH_MPS_TRACE_SIGNPOSTS": "OS signposts for Instruments, which add overhead",
    "OMP_NUM_THREADS": "limits CPU threads (the CPU reference and CPU-side work)",
    "MTL_SHADER_VALIDATION": "Metal validates every shader call, which slows kernels many times over",
    "MTL_DEBUG_LAYER": "Metal's API validation layer, which slows every command",
}
# Metal's own debugging variables, on unless "0": what they slow is what bench measures.
METAL_DEBUG = ("MTL_SHADER_VALIDATION", "MTL_DEBUG_LAYER")


def active_variables(env: dict[str, str]) -> dict[str, str]:
    """The variables of `env` that change how torch's MPS backend runs."""
    return {k: v for k, v in env.items() if k in MPS_ENV_EFFECTS or k.startswith(MPS_ENV_PREFIXES)}


def describe(active: dict[str, str], torch_version: str | None) -> tuple[str, list[str]]:
    """One summary of what each set variable does for this torch, and the variables to unset while benchmarking."""

    def effect(k: str) -> str:
        return MPS_ENV_EFFECTS.get(k, "read by Metal" if k.startswith(("MTL_", "METAL_")) else "read by torch MPS")

    effects = {k: f"{k}={v}: {effect(k)}" for k, v in sorted(active.items())}
    risky = []
    fallback = mps_fallback_on(active.get("PYTORCH_ENABLE_MPS_FALLBACK"), torch_version)
    if "PYTORCH_ENABLE_MPS_FALLBACK" in active:
        value = active["PYTORCH_ENABLE_MPS_FALLBACK"]
        shown = repr(value) if len(value) <= 40 else f"{value[:40]!r}... ({len(value)} characters)"
        release = _version_tuple(torch_version or "")[:2]
        effects["PYTORCH_ENABLE_MPS_FALLBACK"] = f"PYTORCH_ENABLE_MPS_FALLBACK={shown}: " + (
            "off"
            if fallback is False
            else f"on, {MPS_ENV_EFFECTS['PYTORCH_ENABLE_MPS_FALLBACK']} (mpsup bench sets 0 in its workers)"
            if fallback
            else "torch 2.6 cannot read it (std::stoi throws on no number or one beyond a 32-bit int), so "
            "importing torch fails"
            if release and release <= FALLBACK_STOI_RULE_UNTIL
            else "on for torch 2.15 (anything but '0' is on), off or an import error for torch 2.6 (std::stoi)"
        )
    if fallback is not False:
        risky.append("PYTORCH_ENABLE_MPS_FALLBACK")
    risky += [k for k in METAL_DEBUG if k in active and active[k].strip() != "0"]
    ratio = active.get("PYTORCH_MPS_HIGH_WATERMARK_RATIO")
    if ratio is not None:
        try:
            if float(ratio) == 0.0:
                risky.append("PYTORCH_MPS_HIGH_WATERMARK_RATIO")
        except ValueError:
            risky.append("PYTORCH_MPS_HIGH_WATERMARK_RATIO")
    return "; ".join(effects.values()), risky
