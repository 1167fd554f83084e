"""The report's sentences: the verdict and the notes, worded from what analysis.py decided (findings.py)."""

from __future__ import annotations

import math

from mpsup.report.attribution import PhaseAttribution, op_classes, standout
from mpsup.report.findings import (
    AACall,
    AAFloorNote,
    Call,
    Finding,
    HeldNote,
    LayerCall,
    MainFigure,
    Note,
    PhaseCall,
    ProcessFloorNote,
    SetAside,
    ShortSuiteNote,
    StackCall,
    TooSlowNote,
    UnpairedCall,
    UnpairedNote,
)
from mpsup.report.numerics import PhaseNumerics
from mpsup.report.phases import PhaseChange, phase_verdict, stack_sentence
from mpsup.report.training import is_training, training_clause
from mpsup.stats import Interval
from mpsup.units import fmt_bytes, fmt_interval

# What the row times are, on every surface: the report's candidate column is derived, bench's is measured.
# A paired speedup is the median of per-round ratios, not the ratio of two pooled medians: where the two
# medians come from mixtures (two visits, two placements) they can disagree with it.
TIME_NOTE = (
    "baseline_s: the baseline's own median over all its samples (as bench shows it); candidate_s: the "
    "report's candidate column, baseline_s / speedup where the row has a speedup, so the row agrees with the "
    "speedup (the median of the per-round baseline / candidate ratios, not the ratio of the two medians), "
    "else the candidate's own median; candidate_measured_s: the candidate's own median over all its samples "
    "(as bench shows it)"
)
LAYERS_LABEL = "the model estimated from its layers (which cover an unknown share of its forward)"
HOW_TO_RUN_WHOLE = (
    "To measure it whole, give a Transformers or Diffusers folder (config.json beside the weights) and install "
    "transformers or diffusers in the measured environments."
)
FIGURE_LABEL: dict[MainFigure, str] = {
    "forward": "your model's forward",
    "layers": LAYERS_LABEL,
    "suite": "the geometric mean of the suite's BF16 linear layers",
    "measured": "the geometric mean of the measured workloads",
}
# Where the evidence lives that separate runs drift apart by more than their own intervals show.
UNPAIRED_EVIDENCE = "docs/explanation/methodology.md, two separate runs"


def one_environment(run_id: str) -> str:
    """The refusal for a record that measured one environment: what gives a verdict, what gives estimates."""
    return (
        f"run {run_id} measured one environment; for a verdict run `mpsup bench --candidate ...` "
        "(both torches in one run), or put it beside another for estimates only "
        "(`mpsup report --baseline ID --candidate ID`)"
    )


def _span(i: Interval) -> str:
    return fmt_interval(i.estimate, i.low, i.high, 2)


def sides_vs(sides: tuple[str, str]) -> str:
    """`torch 2.15.0 vs torch 2.14.1`: the candidate's side against the baseline's."""
    return f"{sides[1]} vs {sides[0]}"


def verdict_sentence(finding: Finding) -> str:
    """The one sentence a report leads with: the call, then what the run's kind adds."""
    sentence = call_sentence(finding.call)
    if finding.two_torches_as_aa is not None:
        base, cand = finding.two_torches_as_aa
        sentence += f" (Recorded as an A/A run, yet its two sides ran torch {base} and {cand}.)"
    if finding.run_whole_hint:
        sentence += " " + HOW_TO_RUN_WHOLE
    return sentence + mover_sentence(list(finding.movers))


def call_sentence(call: Call) -> str:
    if isinstance(call, LayerCall):
        return layer_sentence(call)
    if isinstance(call, UnpairedCall):
        return unpaired_sentence(call)
    if isinstance(call, PhaseCall):
        worded = phase_verdict(list(call.phases), list(call.noise), sides_vs(call.sides), call.threshold)
        return worded[1] if worded else ""
    if isinstance(call, AACall):
        return aa_sentence(call)
    return mlx_sentence(call)


def layer_sentence(c: LayerCall) -> str:
    """A paired run's verdict in words, from its case."""
    what = FIGURE_LABEL[c.figure]
    base, cand = c.torches
    vs = f"torch {cand} vs {base}"
    main = c.main
    if c.case == "none-measured" or main is None:
        return "Inconclusive: no workload was measured in both environments."
    if c.case == "unbounded":
        return (
            f"Inconclusive: too few rounds to bound {what} (n/a: {main.n} rounds; raise --budget); "
            f"its estimate {main.estimate:.2f}x, {vs}."
        )
    span = _span(main)
    mem = ""
    if c.memory_ratio is not None:
        mem = f" and peak memory {'falls' if c.memory_ratio < 1 else 'rises'} {abs(1 - c.memory_ratio):.0%}"
    if c.case == "too-noisy":
        why = ", ".join(c.noise) if c.noise else f"the interval {main.low:.2f}-{main.high:.2f}x is too wide"
        return f"Inconclusive: too noisy to tell ({why}); {what} {span}, {vs}."
    if c.case == "faster-but-some-slower":
        return (
            f"Mixed: {what} is {span} faster with {vs}{mem}, but {c.slower} workload(s) got "
            f"slower (e.g. {c.first_slower})."
        )
    if c.case == "faster":
        where = f"; the gain comes mostly from {c.top_faster}" if c.top_faster else ""
        return f"Upgrade: {what} is estimated {span} faster with {vs}{mem}{where}."
    if c.case == "slower":
        return f"Regression: {what} is {span} with {vs} (slower){mem}."
    if c.case == "split":
        return (
            f"Mixed: no overall change in {what}, {span}; but {c.faster} workload(s) got faster "
            f"and {c.slower} slower with {vs}."
        )
    return f"No measurable benefit for {what}: {span}, with {vs}{mem}.{set_aside_clause(c.set_aside)}"


def set_aside_clause(set_aside: tuple[SetAside, ...]) -> str:
    """The called workloads a no-change verdict leaves out, named, so a reader of the sentence alone sees them."""
    parts = []
    for s in set_aside:
        est = f" {s.top_estimate:.2f}x" if s.top_estimate is not None else ""
        parts.append(f"{s.count} workload(s) called {s.direction} (e.g. {s.top}{est})")
    if not parts:
        return ""
    return f" {' and '.join(parts)}: not enough to move the verdict; see the table."


def unpaired_sentence(c: UnpairedCall) -> str:
    """Two separate runs: the estimate, why it is no call, and how to get one."""
    if c.main is None:
        return "Inconclusive: no workload was measured in both runs."
    base, cand = c.torches
    return (
        f"Inconclusive: two separate runs, not measured side by side: {FIGURE_LABEL[c.figure]} is {_span(c.main)} "
        f"with torch {cand} vs {base}; that interval holds each run's own noise, not the drift between runs, "
        f"which is not measured here (two runs of one torch minutes apart differ by more than their intervals "
        f"show: {UNPAIRED_EVIDENCE}). For a verdict, measure both in one run: "
        "mpsup bench --candidate NAME|VERSION|PATH."
    )


def aa_sentence(c: AACall) -> str:
    """An A/A run's verdict: what it shows is the noise floor, and a difference it sees is noise or setup."""
    stack = c.side.split()[0]
    lead = f"A/A run ({c.side} against itself, the noise floor)"
    if c.case == "none-measured":
        return f"{lead}: inconclusive, no workload was measured on both sides."
    what = FIGURE_LABEL[c.figure]
    if c.phases:
        figure = "; ".join(p.text() for p in c.phases)
    elif c.main is not None and c.main.bounded:
        figure = f"{what} {_span(c.main)}"
    else:
        figure = f"{what} n/a ({c.main.n if c.main else 0} rounds; raise --budget)"
    calls = f"; {c.called} workload(s) called faster or slower" if c.called else ""
    if c.case == "no-change":
        return f"{lead}: no measurable difference; {figure}{calls}."
    if c.case == "inconclusive":
        if not c.measured:
            why = "too few rounds to bound it"
        else:
            why = f"too noisy to tell ({', '.join(c.noise)})" if c.noise else "the interval is too wide to tell"
        return f"{lead}: inconclusive, {why}; {figure}{calls}."
    return (
        f"{lead}: the two sides differ ({figure}{calls}) although both run the same {stack}: that is this "
        f"machine's noise or the workers' setup (placement, warm-up, load), not {'an' if stack == 'MLX' else 'a'} "
        f"{stack} change; an A/A run calls none."
    )


def mlx_sentence(c: StackCall) -> str:
    """torch against MLX, in MLX's terms (phases.stack_sentence), with how the MLX side's weights were held."""
    quantized = (
        f" The MLX side ran {c.mlx_bits}-bit weights (group size 64), torch the checkpoint's dtype: different "
        "numerics and different memory, as most Mac users run MLX."
        if c.mlx_bits is not None
        else ""
    )
    peaks = (_peak_text(c.peaks[0]), _peak_text(c.peaks[1]))
    return stack_sentence(
        list(c.phases),
        device=c.device,
        mlx_side=c.mlx_side,
        torch_side=c.torch_side,
        mlx_is_candidate=c.mlx_is_candidate,
        peaks=peaks,
        quantized=quantized,
    )


def _peak_text(peak: float | None) -> str:
    return "-" if peak is None else fmt_bytes(peak)


def mover_clause(phase: str, attr: PhaseAttribution) -> str | None:
    """ "64% of the decode change is cat 1x8x1024x128 (float16), 64 calls per token, 0.42x" (an op called with
    several shapes is named once, all its calls added up), then "; scaled_dot_product_attention moved most (0.40x,
    13% of the change)" where a kind that stands apart (attribution.standout) is not among them; or None where no
    op carries a fifth of the change."""
    movers = [c for c in op_classes(attr) if c.share_of_change is not None and c.share_of_change >= 0.2][:2]
    if not movers:
        return None
    per = "per token" if phase.split("/")[0] == "decode" else f"per {phase}"
    parts = []
    for cls in movers:
        assert cls.share_of_change is not None
        top = cls.calls[0]
        nb, nc = cls.count_baseline, cls.count_candidate
        counts = f"{nc} calls {per}" if nb == nc else f"{nb} -> {nc} calls {per}"
        if len(cls.calls) == 1:
            sp = f", {top.speedup.estimate:.2f}x" if top.speedup else ""
            what = f"{top.op} {top.shapes} ({top.dtypes})"
        else:
            speeds = sorted(c.speedup.estimate for c in cls.calls if c.speedup)
            sp = f", {speeds[0]:.2f}-{speeds[-1]:.2f}x" if speeds else ""
            what = f"{cls.op} in {len(cls.calls)} shapes (the largest move: {top.shapes}, {top.dtypes})"
        parts.append(f"{cls.share_of_change:.0%} of the {phase} change is {what}, {counts}{sp}")
    apart = standout_clause(attr, {c.op for c in movers})
    return "; ".join([*parts, apart] if apart else parts)


def standout_clause(attr: PhaseAttribution, named: set[str]) -> str | None:
    """ "scaled_dot_product_attention moved most (0.40x, 13% of the change)" where a kind stands apart from the
    rest (attribution.standout) and is not already named: the biggest share is where the time went, and a kind
    that moved far more than every other is the lead."""
    apart = standout(attr)
    if apart is None or apart.op in named:
        return None
    share = next((c.share_of_change for c in op_classes(attr) if c.op == apart.op), None)
    of = f", {share:.0%} of the change" if share is not None else ""
    return f"{apart.op} moved most ({apart.interval.estimate:.2f}x{of})"


def spread_clause(phase: str, attr: PhaseAttribution) -> str | None:
    """ "the prefill change is spread over 6 op kinds alike (0.52-0.56x): something every call shares (threads,
    launch, allocation, synchronisation), not one kernel", or for kinds that moved unalike with none apart, "...
    spread over 4 op kinds, each slower, none apart (0.13-0.43x): more likely something every call shares ...
    than one kernel", where attribution.spread_of finds it, else None. Kinds that did not move the phase's way
    are named in the band ("0.52-0.56x; mul and mean (3% of the time) not shown to move"), and then most calls
    share it."""
    spread = attr.spread
    if spread is None:
        return None
    band = f"{spread.low:.2f}-{spread.high:.2f}x"
    said = []
    for call in ("same", "faster", "slower"):
        ops = [(op, share) for op, share, c in spread.others if c == call]
        if ops:
            share = sum(s for _, s in ops)
            part = "under 1%" if share < 0.005 else f"{share:.0%}"
            what = "not shown to move" if call == "same" else call
            said.append(f"{' and '.join(op for op, _ in ops)} ({part} of the time) {what}")
    if said:
        band += "; " + ", ".join(said)
    shared = f"something {spread.sharers} (threads, launch, allocation, synchronisation)"
    if spread.alike:
        return f"the {phase} change is spread over {spread.op_kinds} op kinds alike ({band}): {shared}, not one kernel"
    way = "slower" if (attr.change_s or 0.0) > 0 else "faster"
    return (
        f"the {phase} change is spread over {spread.op_kinds} op kinds, each {way}, none apart ({band}): "
        f"more likely {shared} than one kernel"
    )


def rest_clause(phase: str, attr: PhaseAttribution) -> str | None:
    """ "62% of the decode change is in its 97 other calls, replayed together (mul 20, add 15, ...)", where those
    calls carry a fifth of the change and no op of its own does, else None."""
    rest = attr.together
    if rest is None or rest.share_of_change is None or rest.share_of_change < 0.2:
        return None
    return (
        f"no single op carries a fifth of the {phase} change; {rest.share_of_change:.0%} of it is in the calls "
        f"replayed together ({rest.shapes}); a larger --budget replays more of them one by one"
    )


def mover_sentence(movers: list[tuple[PhaseChange, PhaseAttribution]]) -> str:
    """What the verdict sentence adds for each phase that changed: its top mover(s), or that no op explains it."""
    said = [
        spread_clause(p.phase, attr)
        or mover_clause(p.phase, attr)
        or "; ".join(
            x
            for x in (
                rest_clause(p.phase, attr) or f"no single op carries a fifth of the {p.phase} change",
                standout_clause(attr, set()),
            )
            if x
        )
        for p, attr in movers
    ]
    return (" Which op: " + "; ".join(said) + ".") if said else ""


def note_text(note: Note) -> str:
    """One note on what the figures rest on."""
    if isinstance(note, UnpairedNote):
        return (
            "Unpaired: no workload is called faster or slower. Each interval shows one run's own noise; two runs "
            f"of the same torch minutes apart differ by more than their intervals show ({UNPAIRED_EVIDENCE})."
        )
    if isinstance(note, AAFloorNote):
        return (
            f"A/A floor from run {note.run_id}: a workload's threshold is the larger of {note.threshold:.0%} "
            f"and how far that A/A run landed from 1x ({note.raised} of {note.floors} raised)."
        )
    if isinstance(note, ShortSuiteNote):
        return (
            f"The suite figure leaves out {note.short} of {note.linear} linear shape(s) too short of rounds to "
            "bound (n/a); raise --budget to include them."
        )
    if isinstance(note, HeldNote):
        return (
            f"Not called: {note.count} workload(s) whose visits (fresh setups, in alternating order) disagreed on "
            f"the direction (e.g. {note.first}); a change in torch moves every visit the same way, which worker set "
            "up first does not."
        )
    if isinstance(note, TooSlowNote):
        at = f" at --budget {note.budget_s:g}" if note.budget_s else ""
        hint = f"`mpsup bench --budget {note.budget_needed_s:g}` measures them all, " if note.budget_needed_s else ""
        return (
            f"Not measured: {note.count} workload(s) too slow to measure{at} on this machine (e.g. {note.first}); "
            f"{hint}`--only NAME` measures one."
        )
    assert isinstance(note, ProcessFloorNote)
    return (
        f"Between-process floor: two fresh pairs of worker processes disagreed by up to a median "
        f"{math.expm1(note.worst):.1%} on workloads of similar duration, so {note.count} "
        f"workload(s) need a change beyond their floor (up to {math.expm1(note.highest):.0%}) "
        f"before it is called; one run cannot tell a smaller change there from process placement."
    )


def _times(ratio: float) -> str:
    return f"{ratio:.0f}x" if ratio >= 10 else f"{ratio:.1f}x"


def numerics_clause(pn: PhaseNumerics, baseline_torch: str) -> str:
    """The phase's answers in a few words: "same accuracy"; "less accurate: linear 1x128x1024,1024x1024 (float32)
    is 40x further from float64 than in 2.13.0"; "answers not compared (why)"."""
    if is_training(pn.phase):  # a training step names its worst parameter group
        return training_clause(pn, baseline_torch)
    n = pn.numerics
    m = n.main
    code = f"; the model code differs too ({pn.libraries[0]} vs {pn.libraries[1]})" if pn.libraries else ""
    if n.verdict == "not compared":
        return f"answers not compared ({n.reason})"
    if n.verdict == "identical":
        return "identical answers" + code
    if n.verdict == "same accuracy":
        return "same accuracy" + code
    top = pn.top_op
    if n.verdict == "broken" and m is not None:
        if m.candidate_nonfinite > m.baseline_nonfinite:
            what = f"{m.candidate_nonfinite} NaN or Inf in its {m.name} where float64 has none"
        else:
            what = f"its {m.name} {m.candidate_error:.0%} of their scale from float64" if m.candidate_error else ""
        who = f"; the first op to break: {top.op} {top.shapes} ({top.dtypes})" if top else ""
        return f"broken: {what}{who}{code}"
    ratio = m.ratio if m else None
    if n.verdict == "more accurate":
        far = f" ({_times(1 / ratio)} closer to float64 than in {baseline_torch})" if ratio else ""
        return "more accurate" + far + code
    if top is not None and top.numerics.main is not None and top.numerics.main.ratio is not None:
        return (
            f"less accurate: {top.op} {top.shapes} ({top.dtypes}) is {_times(top.numerics.main.ratio)} further "
            f"from float64 than in {baseline_torch}{code}"
        )
    far = f": {_times(ratio)} further from float64 than in {baseline_torch}" if ratio else ""
    return "less accurate" + far + code
