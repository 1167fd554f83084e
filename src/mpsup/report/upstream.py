"""`mpsup report --upstream`: a regression as PyTorch's bug template asks for it.

What regressed and by how much (paired intervals, both builds, the machine), the facts `collect_env` would
print (from the record's environments and conditions, and a bisect's probes), the bisect's answer when a
finished bisect measured this record, and a standalone repro script: plain Python, torch only, that times
the regressed workload's op with the record's shapes and dtype under whichever torch runs it.

Every piece of record text in the body (names, device, versions, ids, a bisect's facts) goes through one
helper, `_Fields`: without --with-paths it replaces the home folder and the user name, then `console.md_code`
makes it inert Markdown. Nothing private by default: no interpreter or model paths, no config identity, no
environment names as typed (they are often paths). The repro script holds no record text at all (numbers,
validated dtypes, op and phase names from fixed lists), so it is never rewritten."""

from __future__ import annotations

import getpass
import json
import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import unquote

from mpsup.console import md_code, md_comment, md_fence, one_line
from mpsup.errors import UserError
from mpsup.report.analysis import Analysis, WorkloadChange
from mpsup.report.numerics_repro import AccuracyIssue, accuracy_issue
from mpsup.report.op_repro import phase_repro
from mpsup.report.repro import Repro, census_matmuls, phase_census, repro_for, script_text
from mpsup.report.repro import census_repro as census_repro
from mpsup.report.repro import workload_repro as workload_repro
from mpsup.runs.schema import MAX_CENSUS_ELEMENTS, RunRecord
from mpsup.stats import finite_or_none
from mpsup.units import fmt_interval, fmt_speedup

COMPARE_URL = "https://github.com/pytorch/pytorch/compare/{good}...{bad}"


@dataclass(frozen=True)
class Upstream:
    markdown: str
    script: str | None
    workload: str


# --- the issue body ---------------------------------------------------------------------------------------

# A git revision reaches the compare URL and the text as it is: hex only, else it is left out.
_REVISION = re.compile(r"[0-9a-f]{7,40}")
# Workload parameters shown where there is no script. Text values are kept only under these keys (a config's
# class names); numbers and flags everywhere. Without --with-paths no path, file name, Hub id or other
# identity of the user's copy of the model is shown: a key that names one is left out whatever its value.
_TEXT_KEYS = frozenset(
    {"name", "kind", "part", "dtype", "phase", "library", "component", "weights", "role", "status", "reason"}
)
_CONFIG_TEXT_KEYS = frozenset({"_class_name", "model_type", "architectures", "torch_dtype", "hidden_act", "act_fn"})
_IDENTITY_KEY = re.compile(r"path|dir|file|url|repo|name_or|commit|^source$|^config_name$", re.IGNORECASE)
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_.]{0,63}")
# An absolute path inside free text (a reason: "cannot open /Volumes/ssd/models/x: ..."), as its own word.
_ABSOLUTE_PATH = re.compile(r"(?<![\w.])(?:~|[A-Za-z]:)?[/\\][^\s'\"),;:]+")
_FREE_TEXT_KEYS = frozenset({"reason", "status"})


def _config_text(key: str, value: Any) -> bool:
    """A config's text shown: class and type names (`_class_name`, `down_block_types`), identifiers only."""
    if key not in _CONFIG_TEXT_KEYS and not key.endswith(("_type", "_types")):
        return False
    items = value if isinstance(value, list) else [value]
    return all(not isinstance(x, str) or _IDENTIFIER.fullmatch(x) for x in items)


def revision(v: Any) -> str | None:
    """A git revision as hex, else None: it becomes part of a URL and of the text."""
    return v.lower() if isinstance(v, str) and _REVISION.fullmatch(v.lower()) else None


def _user_name() -> str:
    try:
        return getpass.getuser()
    except Exception:  # no name for this uid (a container): nothing to hide
        return ""


def scrub(text: str, home: str | None = None, user: str | None = None) -> str:
    """The home folder and the user name, wherever they appear in record text, become ~ and <user>: in any
    case (a Mac's disk ignores it), URL-encoded (`%2FUsers%2F...`, decoded first) and beside digits or
    punctuation (`<user>_ssd`, `<user>2`). A name inside a longer run of letters is left, since matching
    there would rewrite words and op names ("ann" in "channels")."""
    home = str(Path.home()) if home is None else home
    user = _user_name() if user is None else user
    for _ in range(3):  # %252F is %2F encoded once more
        if "%" not in text:
            break
        decoded = unquote(text)
        if decoded == text:
            break
        text = decoded
    if len(home.rstrip("/")) > 1:
        text = re.sub(re.escape(home.rstrip("/")), "~", text, flags=re.IGNORECASE)
    if len(user) >= 3:
        text = re.sub(rf"(?<![^\W\d_]){re.escape(user)}(?![^\W\d_])", "<user>", text, flags=re.IGNORECASE)
    return text


@dataclass(frozen=True)
class _Fields:
    """The one way record text enters the body: scrubbed unless --with-paths, then inert Markdown."""

    keep_paths: bool

    def plain(self, v: Any, limit: int = 200) -> str:
        """For inside a fenced block, where nothing is live: one line, scrubbed."""
        text = one_line(v, limit)
        return text if self.keep_paths else one_line(scrub(text), limit)

    def __call__(self, v: Any, *, table: bool = False, limit: int = 200) -> str:
        return md_code(self.plain(v, limit), table=table, limit=limit)

    def params(self, w: dict[str, Any]) -> dict[str, Any]:
        """A workload's parameters for the body: everything with --with-paths; else numbers and flags, class
        names, and no key that names a path or the model's identity (a config's `_name_or_path`)."""
        params = {k: v for k, v in w.items() if k not in ("envs", "rounds", "ratios", "source", "tags")}
        if self.keep_paths:
            return params
        out: dict[str, Any] = {}
        for k, v in params.items():
            if k == "config" and isinstance(v, dict):
                # A config's private keys (`_name_or_path`, `_commit_hash`) are its copy's identity.
                shown = {ck: cv for ck, cv in v.items() if ck == "_class_name" or not ck.startswith("_")}
                out[k] = {
                    ck: kept
                    for ck, cv in shown.items()
                    if not _IDENTITY_KEY.search(ck) and (kept := self._value(cv, _config_text(ck, cv))) is not None
                }
            elif not _IDENTITY_KEY.search(k) and (kept := self._value(v, k in _TEXT_KEYS)) is not None:
                out[k] = _ABSOLUTE_PATH.sub("<path>", kept) if k in _FREE_TEXT_KEYS and isinstance(kept, str) else kept
        return out

    def _value(self, v: Any, text_ok: bool) -> Any:
        """A number or flag as it is; text only where `text_ok` (scrubbed); a list if all of it is kept."""
        if v is None or isinstance(v, (bool, int, float)):
            return v
        if isinstance(v, str):
            return scrub(v) if text_ok else None
        if isinstance(v, list) and len(v) <= 64:
            kept = [self._value(x, text_ok) for x in v]
            return kept if all(x is not None or y is None for x, y in zip(kept, v, strict=True)) else None
        return None


def _call_time(s: float | None) -> str:
    if s is None:
        return "n/a"
    return f"{s * 1e3:.3f} ms" if s >= 1e-3 else f"{s * 1e6:.1f} us"


def _interval(c: WorkloadChange) -> str:
    """`0.800x (95% CI 0.780-0.820x)`; the estimate alone where too few rounds bound no interval."""
    sp = c.speedup
    if sp is None:
        return "n/a"
    return fmt_interval(sp.estimate, sp.low, sp.high) if sp.bounded else fmt_speedup(sp.estimate)


def bisect_for(run_id: str, journals: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The newest finished bisect that measured this record as one of its steps."""
    for doc in journals:
        if any(isinstance(s, dict) and s.get("run_id") == run_id for s in doc.get("steps", [])):
            return doc
    return None


def _bisect_section(doc: dict[str, Any], f: _Fields) -> list[str]:
    names = [str(e) for e in doc.get("environments", [])]
    n = len(names)
    facts = doc.get("facts") if isinstance(doc.get("facts"), dict) else {}
    assert isinstance(facts, dict)

    def fact(i: int, key: str) -> Any:
        got = facts.get(str(i))
        return got.get(key) if isinstance(got, dict) else None

    def label(i: int) -> str:
        typed = f" {f(names[i])}" if f.keep_paths else ""
        torch, rev = fact(i, "torch"), revision(fact(i, "git_version"))
        return f"build {i + 1} of {n}{typed}: torch {f(torch) if torch else '?'} (git {rev or '?'})"

    res = doc.get("result") if isinstance(doc.get("result"), dict) else {}
    assert isinstance(res, dict)
    steps = [s for s in doc.get("steps", []) if isinstance(s, dict)]
    lines = ["#### Bisect", ""]
    status, lg, fb = res.get("status"), res.get("last_good"), res.get("first_bad")
    known = isinstance(lg, int) and isinstance(fb, int) and 0 <= lg < n and 0 <= fb < n
    if status == "found" and known:
        assert isinstance(lg, int) and isinstance(fb, int)
        lines += [f"- first bad: {label(fb)}", f"- last good: {label(lg)}"]
        g, b = revision(fact(lg, "git_version")), revision(fact(fb, "git_version"))
        if g and b and g != b:
            lines.append(f"- changes between them: {COMPARE_URL.format(good=g, bad=b)}")
        elif g and b:
            lines.append("- both report the same git revision: the change is outside torch's source")
    elif known:
        assert isinstance(lg, int) and isinstance(fb, int)
        lines.append(
            f"- not settled ({f(status)}): the first bad build is after {label(lg)} and at or before {label(fb)}"
        )
    minutes = float(doc.get("elapsed_s") or 0.0) / 60.0
    lines += [
        f"- {len(steps)} paired runs over {n} builds in {minutes:.1f} min; each step measures build 1 (good) "
        "against one other, interleaved",
        "",
        "| step | build | speedup (good/this, 95% CI) | call | step is |",
        "|---|---|---|---|---|",
    ]
    for k, s in enumerate(steps, 1):
        figures = s.get("figures")
        for fig in figures if isinstance(figures, list) else []:
            if not isinstance(fig, dict):
                continue
            est, low, high = (_printable(fig.get(k)) for k in ("speedup", "low", "high"))
            speed = fmt_interval(est, low, high)
            raw = s.get("index")
            idx = raw if isinstance(raw, int) and not isinstance(raw, bool) and 0 <= raw < 10**6 else -1
            lines.append(
                f"| {k} | {idx + 1 if idx >= 0 else '?'} | {speed} | "
                f"{f(fig.get('change'), table=True)} | {f(s.get('verdict'), table=True)} |"
            )
    return [*lines, ""]


def _printable(v: Any) -> float | None:
    """A journal's figure as a finite number short enough to print in full (1e308 with three decimals is 312
    characters), else None."""
    if not isinstance(v, (int, float)) or isinstance(v, bool) or not abs(v) < 1e300:
        return None
    return finite_or_none(float(v))


def _versions(record: dict[str, Any], bisect: dict[str, Any] | None, f: _Fields, moved: str | None = None) -> list[str]:
    """What collect_env would print, one line each, for inside a fenced block (where nothing is live); `moved`: the
    report's line on how the machine moved during the run (host/moved.py), record text like the rest."""
    envs = [e for e in record.get("environments") or [] if isinstance(e, dict)]
    hyg = record.get("hygiene") if isinstance(record.get("hygiene"), dict) else {}
    assert isinstance(hyg, dict)
    py = None
    if bisect and isinstance(bisect.get("facts"), dict):
        py = next((g.get("python") for g in bisect["facts"].values() if isinstance(g, dict) and g.get("python")), None)
    revs: dict[str, Any] = {}
    if bisect and isinstance(bisect.get("facts"), dict):
        # The bisect probed both builds of each step: build 1 is the baseline, the step's build the candidate.
        step = next(
            (s for s in bisect.get("steps", []) if isinstance(s, dict) and s.get("run_id") == record.get("id")), {}
        )
        for role, key in (("good", "0"), ("bad", str(step.get("index")))):
            got = bisect["facts"].get(key)
            revs[role] = revision(got.get("git_version")) if isinstance(got, dict) else None
    py = py or next((e["python_version"] for e in envs if isinstance(e.get("python_version"), str)), None)
    lines = []
    for e in envs:
        role = {"baseline": "good", "candidate": "bad"}.get(str(e.get("label")), f.plain(e.get("label"), 40))
        rev = f" (git {revs[role]})" if revs.get(role) else ""
        lines.append(f"PyTorch version ({role}): {f.plain(e.get('torch_version'))}{rev}")
    first = envs[0] if envs else {}
    lines += [
        f"OS: {f.plain(first.get('platform') or 'not recorded')}",
        f"Python version: {f.plain(py or 'not recorded')}",
        f"Device: {f.plain(record.get('device'))} ({f.plain(first.get('device_name') or 'unknown')})",
        f"Machine: {f.plain(first.get('machine') or 'not recorded')}",
        f"CPU threads in the measuring processes: {f.plain(first.get('threads') or 'not recorded')}",
    ]
    if _printable(first.get("memory_limit")) is not None:
        lines.append(f"Memory the device may use: {first['memory_limit'] / 2**30:.1f} GiB")
    for when in ("before", "after"):
        h = hyg.get(when)
        if isinstance(h, dict) and h:
            shown = ", ".join(f"{k}={v}" for k, v in h.items() if v is not None) or "nothing recorded"
            lines.append(f"Conditions {when} the run: {f.plain(shown, 1000)}")
    if moved:
        lines.append(f"During the run: {f.plain(moved, 1000)}")
    return lines


def _regressions(
    analysis: Analysis, record: RunRecord, bisect: dict[str, Any] | None
) -> tuple[WorkloadChange, list[WorkloadChange]]:
    """The workloads called slower, the one to report first: the bisect's target, else the slowest phase (a model
    run whole is about its phases: a layer beside them is one piece of one), else the slowest layer (an op
    replayed from a phase speaks through its phase's attribution); and all of them, slowest first."""
    slower = sorted(
        (c for c in analysis.workloads if c.change == "slower" and c.speedup),
        key=lambda c: c.speedup.estimate if c.speedup else 1.0,
    )
    if not slower:
        raise UserError(
            f"run {record.id}: no workload was called slower ({analysis.verdict}); --upstream reports a regression"
        )
    listed = (bisect or {}).get("targets")
    targets = [str(t) for t in listed] if isinstance(listed, list) else []
    phase = next((c for c in slower if c.part == "phase"), None)
    main = next(
        (c for c in slower if c.name in targets), phase or next((c for c in slower if c.part != "op"), slower[0])
    )
    return main, slower


def _bug_section(analysis: Analysis, slower: list[WorkloadChange], main: WorkloadChange, f: _Fields) -> list[str]:
    """The suggested title, one sentence on the regression, and the slowed workloads' table."""
    assert main.speedup is not None
    good, bad = f(analysis.baseline_torch), f(analysis.candidate_torch)
    slowdown = 1.0 / main.speedup.estimate if main.speedup.estimate > 0 else math.inf
    # Two environments of one version (a setting, a library, a build flag differs): "slower in torch 2.11
    # than 2.11" reads as a typo, so the builds are named as what they are.
    if analysis.baseline_torch == analysis.candidate_torch:
        builds = f"in one torch {bad} environment than another"
        takes = f"in the bad environment as in the good one, both torch {bad},"
    else:
        builds = f"in torch {bad} than {good}"
        takes = f"with torch {bad} as with torch {good}"
    device = f(analysis.device)
    title = f"[{f(analysis.device.upper())}] {f(main.name)} {slowdown:.2f}x slower {builds}"
    lines = [
        f"<!-- Suggested title: {md_comment(title)} -->",
        "",
        "### 🐛 Describe the bug",
        "",
        f"{f(main.name)} takes {slowdown:.2f}x as long {takes} on {f(analysis.machine)} ({device}): speedup "
        f"(good time / bad time) {_interval(main)}.",
        "",
        "| workload | time, good build | time, bad build (good / speedup) | speedup (95% CI) | rounds |",
        "|---|---|---|---|---|",
    ]
    for c in slower[:10]:
        lines.append(
            # Derived, as the report's column: the bad build's own median could read faster beside "slower".
            f"| {f(c.name, table=True)} | {_call_time(c.baseline_s)} | {_call_time(c.candidate_s)} | "
            f"{_interval(c)} | {len(c.ratios)} |"
        )
    if len(slower) > 10:
        lines.append(f"| ... {len(slower) - 10} more | | | | |")
    return lines


def _repro_section(
    rec: dict[str, Any], main: WorkloadChange, repro: Repro | None, script: str | None, f: _Fields
) -> list[str]:
    """The standalone script that times the regression, or what the record holds of a workload with none."""
    w: dict[str, Any] = next((w for w in rec.get("workloads", []) if w.get("name") == main.name), {})
    census = phase_census(w) if w.get("part") == "phase" else None
    oversized = census_matmuls(census)[1] if census is not None else 0
    left_out = (
        f" ({oversized} matmul(s) of its census left out: an operand or the result has more than "
        f"2^{MAX_CENSUS_ELEMENTS.bit_length() - 1} elements, which no storage holds)"
        if oversized
        else ""
    )
    if script and repro:
        return [
            f"For {f(main.name)}, it times {repro.what}{left_out}. Run it with each build's interpreter"
            + ("; pass your model's config.json with --config" if "load_config()" in script else "")
            + "; it prints the median time per call and its spread.",
            "",
            *md_fence(script.rstrip("\n"), "python"),
            "",
        ]
    return [
        f"No standalone script for a {f(w.get('kind'))} workload{left_out}; what the record holds of it:",
        "",
        *md_fence(json.dumps(f.params(w), indent=1, default=str)[:4000], "json"),
        "",
    ]


def build_upstream(
    analysis: Analysis,
    record: RunRecord,
    bisect: dict[str, Any] | None = None,
    keep_paths: bool = False,
) -> Upstream:
    """The issue body and the repro script for the record's worst regression (its slowest workload, or the
    one the bisect followed)."""
    f = _Fields(keep_paths)
    rec = record.to_json()
    accuracy = accuracy_issue(analysis, rec, f)
    if accuracy is not None:
        return _accuracy_upstream(analysis, record, rec, accuracy, bisect, f)
    main, slower = _regressions(analysis, record, bisect)
    repro = repro_for(rec, main.name)
    script = script_text(repro) if repro else None
    # A whole-model phase: the ops that moved it, or the phase itself (report/op_repro.py).
    device = str(rec.get("device")) if rec.get("device") in ("mps", "cuda", "cpu") else "cpu"
    phased = phase_repro(analysis, rec, main.name, device)
    if phased is not None:
        repro, script = Repro(phased.what, "", device), phased.script
    lines = _bug_section(analysis, slower, main, f)
    lines += [
        "",
        f"Measured with mpsup (run {f(record.id)}): {analysis.method}. Each build ran in its own worker "
        "processes, interleaved round by round.",
        "",
    ]
    if bisect:
        lines += _bisect_section(bisect, f)
    lines += [*(phased.markdown if phased else []), "#### Repro", ""]
    lines += _repro_section(rec, main, repro, script, f)
    lines += ["### Versions", "", *md_fence("\n".join(_versions(rec, bisect, f, analysis.conditions.line))), ""]
    return Upstream(markdown="\n".join(lines), script=script, workload=main.name)


def _accuracy_upstream(
    analysis: Analysis,
    record: RunRecord,
    rec: dict[str, Any],
    issue: AccuracyIssue,
    bisect: dict[str, Any] | None,
    f: _Fields,
) -> Upstream:
    """Answers that got worse lead the issue (a wrong result outranks a slow one): the errors' table, then any
    slowdown, then the script that computes the named op in each build and in float64."""
    lines = list(issue.lines)
    slower = [c for c in analysis.workloads if c.change == "slower" and c.speedup and c.part != "op"]
    if slower:
        lines += ["", "It is also slower: " + "; ".join(f"{f(c.name)} {_interval(c)}" for c in slower[:5]) + "."]
    lines += [
        "",
        f"Measured with mpsup (run {f(record.id)}): the float64 reference ran in the good build's interpreter, on "
        "the CPU, from the values both builds computed on (their digests match).",
        "",
    ]
    if bisect:
        lines += _bisect_section(bisect, f)
    lines += ["#### Repro", ""]
    if issue.script:
        lines += [
            "Run it with each build's interpreter, the good build first (it computes the float64 result and saves "
            "it; the bad build reads it, so no float64 result of the bad build's enters its own error): "
            "`python repro.py --truth truth.pt`. Each prints its build's error against float64:",
            "",
            *md_fence(issue.script.rstrip("\n"), "python"),
            "",
        ]
    else:
        lines += ["No standalone script for this answer: the phase's own error is in the table above.", ""]
    lines += ["### Versions", "", *md_fence("\n".join(_versions(rec, bisect, f, analysis.conditions.line))), ""]
    return Upstream(markdown="\n".join(lines), script=issue.script, workload=issue.workload)
