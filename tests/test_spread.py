"""A change every op shares is said as such, not blamed on the biggest op (report/attribution.py: spread_of), and one
op kind that moved is still named (report/wording.py: spread_clause before mover_clause)."""

from __future__ import annotations

import math
import random
from typing import Any

import pytest

from mpsup.report.analysis import analyze
from mpsup.report.attribution import (
    SPREAD_ALPHA,
    KindRatio,
    OpShare,
    PhaseAttribution,
    common_band,
    heterogeneity_p,
    kind_apart,
    kind_ratios,
    spread_of,
)
from mpsup.report.findings import PhaseCall
from mpsup.report.phases import PhaseChange
from mpsup.report.wording import mover_clause, mover_sentence, spread_clause
from mpsup.stats import Interval, chi2_sf
from tests.test_attribution import _op, record

# (op, speedup, its 95% interval's relative half-width, baseline time in the phase)
Kind = tuple[str, float, float, float]


def _share(op: str, speedup: float, width: float, base_s: float, *, view: bool = False) -> OpShare:
    cand = base_s / speedup
    interval = Interval(speedup, speedup * (1 - width), speedup * (1 + width), 24)
    return OpShare(
        name=f"model/op/{op}",
        op=op,
        shapes="1x512x256",
        dtypes="float32",
        overload=f"aten.{op}.default",
        count_baseline=4,
        count_candidate=4,
        baseline_s=base_s,
        candidate_s=cand,
        speedup=interval,
        change="slower" if speedup < 1 else "faster",
        change_s=cand - base_s,
        share_of_change=None,
        view=view,
    )


def _attr(kinds: list[Kind], views: int = 0, phase: str = "prefill") -> PhaseAttribution:
    """A phase of these op kinds and nothing else: its change is theirs, each kind's share its change over it."""
    raw = [_share(op, sp, w, t) for op, sp, w, t in kinds]
    raw += [_share(f"view{i}", 1.0, 0.2, 1e-6, view=True) for i in range(views)]
    base = sum(o.baseline_s or 0.0 for o in raw)
    delta = sum(o.change_s or 0.0 for o in raw)
    ops = tuple(
        sorted(
            (OpShare(**{**o.__dict__, "share_of_change": (o.change_s or 0.0) / delta}) for o in raw),
            key=lambda o: -abs(o.change_s or 0.0),
        )
    )
    return PhaseAttribution(phase, f"model/{phase}", base, base + delta, delta, ops, 1.0, 1.0, 1.0, 0.0)


FEWER_THREADS: list[Kind] = [
    ("linear", 0.52, 0.02, 0.020),
    ("scaled_dot_product_attention", 0.55, 0.03, 0.004),
    ("mul", 0.56, 0.04, 0.001),
    ("add", 0.54, 0.04, 0.001),
    ("silu", 0.53, 0.05, 0.0005),
]


def _changed(phase: str, speedup: float) -> PhaseChange:
    sp = Interval(speedup, speedup * 0.98, speedup * 1.02)
    return PhaseChange(
        phase, f"model/{phase}", sp, "slower", baseline_s=0.01, candidate_s=0.01 / speedup, coverage=None
    )


def test_every_kind_alike_is_spread_and_said_before_the_biggest_op() -> None:
    attr = _attr(FEWER_THREADS, views=3)
    spread = spread_of(attr)
    assert spread is not None and spread.op_kinds == 5  # the views are no kinds
    assert spread.low == pytest.approx(0.52, abs=0.002) and spread.high == pytest.approx(0.56, abs=0.002)
    assert attr.to_json()["spread"] == {
        "op_kinds": 5,
        "low": spread.low,
        "high": spread.high,
        "alike": True,
        "others": [],
    }
    clause = spread_clause("prefill", attr)
    assert clause == (
        "the prefill change is spread over 5 op kinds alike (0.52-0.56x): something every call shares (threads, "
        "launch, allocation, synchronisation), not one kernel"
    )
    # what the mover clause alone would say: linear, with most of the change
    assert (mover_clause("prefill", attr) or "").startswith("78% of the prefill change is linear")
    said = mover_sentence([(_changed("prefill", 0.53), attr)])
    assert said == f" Which op: {clause}." and "linear" not in said


def test_one_kind_that_moved_beside_others_that_did_not_is_named() -> None:
    attr = _attr(
        [
            ("scaled_dot_product_attention", 0.08, 0.05, 0.004),
            ("linear", 1.0, 0.01, 0.020),
            ("mul", 0.99, 0.02, 0.001),
            ("add", 1.01, 0.02, 0.001),
        ]
    )
    assert spread_of(attr) is None and attr.to_json()["spread"] is None and spread_clause("prefill", attr) is None
    said = mover_sentence([(_changed("prefill", 0.4), attr)])
    assert "of the prefill change is scaled_dot_product_attention" in said and "spread" not in said


@pytest.mark.parametrize("width", [0.01, 0.04, 0.08])
def test_one_kind_at_half_beside_others_at_091_is_not_spread(width: float) -> None:
    """One kind slowed 2x, the others 1.1x: every kind moved the same way, but not alike, however precise."""
    attr = _attr(
        [
            ("linear", 0.5, width, 0.010),
            ("scaled_dot_product_attention", 0.91, width, 0.004),
            ("mul", 0.91, width, 0.003),
            ("add", 0.91, width, 0.003),
        ]
    )
    assert all(k.interval.high < 1 for k in kind_ratios(attr))  # each kind did move
    assert heterogeneity_p(kind_ratios(attr)) < SPREAD_ALPHA
    assert spread_of(attr) is None
    assert "of the prefill change is linear" in mover_sentence([(_changed("prefill", 0.7), attr)])


def test_fewer_than_three_kinds_with_an_interval_is_no_spread() -> None:
    two = _attr(FEWER_THREADS[:2], views=4)
    assert len(kind_ratios(two)) == 2 and spread_of(two) is None
    # a third kind whose interval is unbounded (too few rounds) does not count
    unbounded = _share("mul", 0.55, 0.0, 0.001)
    unbounded = OpShare(**{**unbounded.__dict__, "speedup": Interval(0.55, -math.inf, math.inf, 3)})
    three = _attr(FEWER_THREADS[:2])
    three = PhaseAttribution(**{**three.__dict__, "ops": (*three.ops, unbounded)})
    assert [k.op for k in kind_ratios(three)] == ["linear", "scaled_dot_product_attention"]
    assert spread_of(three) is None
    assert spread_of(_attr(FEWER_THREADS[:3])) is not None


def test_a_kind_that_did_not_move_vetoes_where_it_holds_a_tenth_of_the_time_and_noise_alone_is_no_spread() -> None:
    # embedding unmoved with 12% of the kinds' time: one cause most calls share is not what this shows
    still = _attr([*FEWER_THREADS, ("embedding", 1.0, 0.01, 0.0037)])
    assert spread_of(still) is None
    # a kind called faster while the phase got slower vetoes with a tenth of the time too
    against = _attr([*FEWER_THREADS, ("embedding", 1.3, 0.01, 0.0037)])
    assert spread_of(against) is None
    # kinds whose intervals are too wide to call any of them changed: consistent, but nothing shown moved
    noisy = _attr([(op, 0.8, 0.4, t) for op, _, _, t in FEWER_THREADS])
    assert heterogeneity_p(kind_ratios(noisy)) > SPREAD_ALPHA and spread_of(noisy) is None


def test_a_small_kind_that_did_not_move_is_named_beside_the_spread() -> None:
    """One CPU thread where there were two (benchmarks/op_attribution.py llama-threads): linear, attention and mul
    each read 0.60-0.64x, a norm's mean, too small to split over threads, 1.01x with about 2% of the time."""
    attr = _attr(
        [
            ("linear", 0.63, 0.04, 0.0100),
            ("scaled_dot_product_attention", 0.64, 0.05, 0.0025),
            ("mul", 0.60, 0.06, 0.0010),
            ("mean", 1.01, 0.03, 0.0003),
        ]
    )
    spread = spread_of(attr)
    assert spread is not None and spread.op_kinds == 3 and spread.alike
    assert spread.low == pytest.approx(0.60, abs=0.005) and spread.high == pytest.approx(0.64, abs=0.005)
    [(op, share, call)] = spread.others
    assert (op, call) == ("mean", "same") and share == pytest.approx(0.3 / 13.8, rel=0.01)
    assert attr.to_json()["spread"]["others"] == [{"op": "mean", "share_of_time": share, "change": "same"}]
    assert spread_clause("prefill", attr) == (
        "the prefill change is spread over 3 op kinds alike (0.60-0.64x; mean (2% of the time) not shown to move): "
        "something most calls share (threads, launch, allocation, synchronisation), not one kernel"
    )
    # a small kind a little faster without the pool's overhead (mean 1.056x, 1.028-1.085, on this CPU) is named
    # as such
    faster = _attr([*FEWER_THREADS[:3], ("mean", 1.056, 0.028, 0.0003)])
    assert spread_of(faster) is not None
    assert "; mean (1% of the time) faster): something most calls share" in (spread_clause("prefill", faster) or "")
    # kinds of one call are said together, with their time together
    two = _attr([*FEWER_THREADS[:3], ("mean", 1.0, 0.03, 0.0003), ("to", 1.0, 0.03, 0.0001)])
    assert "(0.52-0.56x; mean and to (2% of the time) not shown to move)" in (spread_clause("prefill", two) or "")
    tiny = _attr([*FEWER_THREADS[:3], ("to", 1.0, 0.03, 0.00001)])
    assert "; to (under 1% of the time) not shown to move" in (spread_clause("prefill", tiny) or "")
    # two kinds that moved beside one that did not are no spread
    assert spread_of(_attr([*FEWER_THREADS[:2], ("mean", 1.01, 0.03, 0.0003)])) is None


def test_a_spread_gain_is_spread_too() -> None:
    faster = _attr([(op, 1.8 + i * 0.03, 0.03, t) for i, (op, _, _, t) in enumerate(FEWER_THREADS)])
    spread = spread_of(faster)
    assert spread is not None and spread.low == pytest.approx(1.8) and spread.high == pytest.approx(1.92)
    # the phase's direction decides: kinds that all got faster do not explain a phase that got slower
    flipped = PhaseAttribution(**{**faster.__dict__, "change_s": -(faster.change_s or 0.0)})
    assert spread_of(flipped) is None


def test_a_kind_of_several_shapes_is_one_kind_weighted_by_time() -> None:
    attr = _attr([("linear", 0.50, 0.02, 0.030), ("linear", 0.60, 0.02, 0.010), ("mul", 0.55, 0.02, 0.001)])
    kinds = {k.op: k for k in kind_ratios(attr)}
    assert set(kinds) == {"linear", "mul"}
    expected = math.exp((0.03 * math.log(0.5) + 0.01 * math.log(0.6)) / 0.04)
    assert kinds["linear"].interval.estimate == pytest.approx(expected)
    # two shapes measured apart: the kind's interval is narrower than either call's
    lin = kinds["linear"].interval
    assert (lin.high - lin.low) / lin.estimate < 0.04


def test_kinds_alike_are_rarely_called_unalike_and_kinds_apart_always_are() -> None:
    """Kinds that share one move, each measured with its own noise (3 to 8 kinds, intervals +-1% to +-16%): the
    two tests together call them unalike in at most 5% of draws (2% measured); one kind 25% off the rest they
    call unalike, however many kinds there are."""
    rng = random.Random(7)
    draws, unalike, apart = 2000, 0, 0
    for _ in range(draws):
        n = rng.randint(3, 8)
        ses = [rng.uniform(0.005, 0.08) for _ in range(n)]
        alike = [KindRatio(f"k{i}", math.log(0.54) + rng.gauss(0, se), se) for i, se in enumerate(ses)]
        unalike += heterogeneity_p(alike) < SPREAD_ALPHA or not common_band(alike)
        precise = [KindRatio(f"k{i}", math.log(0.54 * (1.25 if i == 0 else 1.0)), 0.01) for i in range(n)]
        apart += heterogeneity_p(precise) < SPREAD_ALPHA or not common_band(precise)
    assert unalike / draws <= 0.05
    assert apart == draws


# The caching allocator off on an H100 (benchmarks/op_attribution.py llama-alloc, prefill): a cost added to every
# call, so the short calls slowed most in ratio; linear, the longest, least, and it carries the largest share.
ALLOCATOR_OFF: list[Kind] = [
    ("mul", 0.125, 0.01, 0.00008),
    ("to", 0.131, 0.10, 0.00009),
    ("scaled_dot_product_attention", 0.179, 0.065, 0.00006),
    ("linear", 0.427, 0.09, 0.0011),
]


def test_kinds_that_all_moved_unalike_with_none_apart_are_spread_not_alike() -> None:
    attr = _attr(ALLOCATOR_OFF)
    kinds = kind_ratios(attr)
    assert heterogeneity_p(kinds) < SPREAD_ALPHA  # not alike: short calls moved most
    assert kind_apart(kinds, "slower") is None  # mul and to moved most, together
    spread = spread_of(attr)
    assert spread is not None and not spread.alike and spread.op_kinds == 4
    assert spread.low == pytest.approx(0.125, abs=0.002) and spread.high == pytest.approx(0.427, abs=0.005)
    assert attr.to_json()["spread"]["alike"] is False
    assert spread_clause("prefill", attr) == (
        "the prefill change is spread over 4 op kinds, each slower, none apart (0.13-0.43x): more likely something "
        "every call shares (threads, launch, allocation, synchronisation) than one kernel"
    )
    # the biggest share is linear's, the wrong lead here
    assert (mover_clause("prefill", attr) or "").split("%")[1].startswith(" of the prefill change is linear")
    assert "linear" not in mover_sentence([(_changed("prefill", 0.26), attr)])


def test_the_kind_that_moved_most_standing_apart_is_named_however_the_rest_moved() -> None:
    """Attention at 0.40x beside linear at 0.80x and mul at 0.85x (a kernel slowed beside a slower Python hook):
    every kind moved, unalike, and the one that moved most stands clear of the rest."""
    attr = _attr(
        [
            ("scaled_dot_product_attention", 0.40, 0.08, 0.002),
            ("linear", 0.80, 0.02, 0.020),
            ("mul", 0.85, 0.04, 0.001),
        ]
    )
    assert kind_apart(kind_ratios(attr), "slower") is not None
    assert spread_of(attr) is None and spread_clause("prefill", attr) is None


def test_a_kind_that_stands_apart_is_named_beside_the_biggest_share() -> None:
    """The mixed candidate on an H100: linear carries the largest share at 0.86x (every call through a Python
    hook), attention moved far more (0.40x) with a smaller share. The lead is attention, said beside linear."""
    attr = _attr(
        [
            ("linear", 0.86, 0.02, 0.012),
            ("scaled_dot_product_attention", 0.40, 0.08, 0.00025),
            ("embedding", 0.97, 0.2, 0.0001),
        ]
    )
    said = mover_sentence([(_changed("prefill", 0.8), attr)])
    assert "of the prefill change is linear" in said
    assert "; scaled_dot_product_attention moved most (0.40x, " in said
    # named once where it is itself the biggest share
    alone = _attr([("scaled_dot_product_attention", 0.40, 0.08, 0.004), ("linear", 0.97, 0.02, 0.012)])
    once = mover_sentence([(_changed("prefill", 0.8), alone)])
    assert once.count("scaled_dot_product_attention") == 1 and "moved most" not in once
    # kinds that moved together have no standout
    assert "moved most" not in mover_sentence([(_changed("prefill", 0.26), _attr(ALLOCATOR_OFF))])


def test_a_standout_is_said_where_no_op_carries_a_fifth() -> None:
    """Attention moved most (0.42x) with under a fifth of the change, the rest spread thin over ops that barely
    moved: the sentence says no op carries a fifth, then which kind moved most."""
    kinds: list[Kind] = [("scaled_dot_product_attention", 0.42, 0.05, 0.0003)]
    kinds += [(f"op{i}", 0.95, 0.02, 0.006) for i in range(6)]
    said = mover_sentence([(_changed("decode", 0.8), _attr(kinds, phase="decode"))])
    assert "no single op carries a fifth of the decode change; scaled_dot_product_attention moved most (0.42x" in said


def test_one_kind_at_2x_beside_others_at_11x_is_never_spread_over_noisy_draws() -> None:
    """The Show's built candidate, drawn 2,000 times: one kind at 0.5x and 2 to 7 others at 0.91x, each measured
    with its own noise (intervals +-1% to +-8%): never spread, alike or not."""
    rng = random.Random(11)
    for _ in range(2000):
        n = rng.randint(3, 8)
        kinds = []
        for i in range(n):
            width = rng.uniform(0.01, 0.08)
            se = math.log((1 + width) / (1 - width)) / (2 * 1.959963984540054)
            kinds.append(KindRatio(f"k{i}", math.log(0.5 if i == 0 else 0.91) + rng.gauss(0, se), se))
        alike = heterogeneity_p(kinds) >= SPREAD_ALPHA and common_band(kinds)
        assert not alike and kind_apart(kinds, "slower") is not None


def test_one_kind_far_off_with_a_wide_interval_is_caught_by_the_band() -> None:
    """0.5x (0.3-0.8) beside two kinds at 0.91x (0.85-0.97): Q over 2 degrees of freedom alone lets it pass
    (p ~ 0.06); no speedup lies in all three intervals, so it is no spread."""
    attr = _attr(
        [
            ("silu", 0.5, 0.0, 0.002),
            ("linear", 0.91, 0.06, 0.010),
            ("mul", 0.91, 0.06, 0.003),
        ]
    )
    ops = tuple(
        OpShare(**{**o.__dict__, "speedup": Interval(0.5, 0.3, 0.8, 24)}) if o.op == "silu" else o for o in attr.ops
    )
    attr = PhaseAttribution(**{**attr.__dict__, "ops": ops})
    kinds = kind_ratios(attr)
    assert all(k.interval.high < 1 for k in kinds)
    assert heterogeneity_p(kinds) > SPREAD_ALPHA and not common_band(kinds)
    assert spread_of(attr) is None


def test_chi2_tail_matches_the_tables() -> None:
    for x, df in ((3.841459, 1), (5.991465, 2), (7.814728, 3), (9.487729, 4), (11.070498, 5), (16.918978, 9)):
        assert chi2_sf(x, df) == pytest.approx(0.05, abs=1e-6)
    assert chi2_sf(1.0, 7) == pytest.approx(0.994829, abs=1e-6) and chi2_sf(0.0, 2) == 1.0


def _fewer_threads_record(sdpa: float, others: float) -> dict[str, Any]:
    """test_attribution's decode phase (10 ms), its ops replaced: SDPA (2 ms) at `sdpa`, linear (3 ms), mul and
    add (1 ms together) at about `others`, a view; the 4 ms the ops leave do not move."""
    ops_s = 0.002 / sdpa + 0.003 / others + 0.0006 / (others * 1.02) + 0.0004 / (others * 0.98)
    doc = record(sdpa_speedup=sdpa, phase_speedup=0.010 / (ops_s + 0.004))
    counts = {"baseline": 2, "candidate": 2}
    doc["workloads"] = [
        doc["workloads"][0],
        _op("model/op/sdpa/a", "aten.scaled_dot_product_attention.default", "1x8x1x64", 0.001, sdpa, counts, 2),
        _op("model/op/linear/b", "aten.linear.default", "1x1x256, 256x256", 0.0015, others, counts, 3),
        _op("model/op/mul/c", "aten.mul.Tensor", "1x8", 0.0003, others * 1.02, counts, 4),
        _op("model/op/add/d", "aten.add.Tensor", "1x8", 0.0002, others * 0.98, counts, 5),
        _op("model/op/view/e", "aten.view.default", "1x8", 1e-6, 1.0, counts, 6),
    ]
    return doc


def test_the_report_says_spread_in_its_sentence_and_json() -> None:
    a = analyze(_fewer_threads_record(0.55, 0.54))
    assert isinstance(a.finding.call, PhaseCall) and a.verdict == "regression"
    assert "Which op: the decode change is spread over 4 op kinds alike (0.53-0.55x)" in a.sentence
    spread = a.to_json()["phase_attribution"]["decode"]["spread"]
    assert spread["op_kinds"] == 4 and 0.52 < spread["low"] < spread["high"] < 0.57
    named = analyze(_fewer_threads_record(0.2, 1.0))
    assert named.to_json()["phase_attribution"]["decode"]["spread"] is None
    assert "of the decode change is scaled_dot_product_attention" in named.sentence
