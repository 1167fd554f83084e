"""What a report decided, as kinds and numbers: the verdict's case and the notes' facts. Words are wording.py's."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from mpsup.report.attribution import PhaseAttribution
from mpsup.report.phases import PhaseChange
from mpsup.stats import Interval

VerdictKind = Literal["benefit", "regression", "mixed", "no-change", "inconclusive"]
# Which figure the verdict rests on: the model run whole, its layers, the suite's linear layers, or all workloads.
MainFigure = Literal["forward", "layers", "suite", "measured"]
Direction = Literal["faster", "slower"]


@dataclass(frozen=True)
class SetAside:
    """Workloads called one way that a no-change verdict leaves out, with the one that moved most."""

    direction: Direction
    count: int
    top: str
    top_estimate: float | None


LayerCase = Literal[
    "none-measured",  # no workload measured on both sides
    "unbounded",  # too few rounds to bound the main figure
    "too-noisy",  # no change, with noisy conditions or an interval too wide to have seen one
    "faster-but-some-slower",
    "faster",
    "slower",
    "split",  # no overall change, workloads moved both ways
    "no-change",
]


@dataclass(frozen=True)
class LayerCall:
    """A paired run's verdict from its main figure and the workloads called around it."""

    case: LayerCase
    main: Interval | None
    figure: MainFigure
    torches: tuple[str, str]  # baseline, candidate
    noise: tuple[str, ...] = ()
    memory_ratio: float | None = None  # the peak-memory ratio where it moved 5% or more
    top_faster: str | None = None  # the called-faster workload with the largest share of time
    faster: int = 0
    slower: int = 0
    first_slower: str | None = None
    set_aside: tuple[SetAside, ...] = ()


@dataclass(frozen=True)
class UnpairedCall:
    """Two separate runs: an estimate, never a call."""

    main: Interval | None
    figure: MainFigure
    torches: tuple[str, str]


@dataclass(frozen=True)
class PhaseCall:
    """The model run whole: each phase said on its own (phases.phase_verdict decides and words it)."""

    phases: tuple[PhaseChange, ...]
    noise: tuple[str, ...]
    sides: tuple[str, str]  # baseline's, candidate's: `torch 2.14.1`, `MLX 0.32.4`
    threshold: float


AACase = Literal["none-measured", "no-change", "inconclusive", "differ"]


@dataclass(frozen=True)
class AACall:
    """One torch (or one MLX) against itself: the noise floor, never an upgrade's effect."""

    case: AACase
    side: str
    phases: tuple[PhaseChange, ...]
    main: Interval | None
    figure: MainFigure
    measured: bool  # the figure said was bounded
    called: int  # workloads called faster or slower
    noise: tuple[str, ...]


@dataclass(frozen=True)
class StackCall:
    """torch against MLX: each phase as MLX's speed over torch's, and each side's highest phase peak."""

    phases: tuple[PhaseChange, ...]
    device: str
    mlx_side: str
    torch_side: str
    mlx_is_candidate: bool
    peaks: tuple[float | None, float | None]  # MLX's, torch's (bytes)
    mlx_bits: int | None  # the MLX side's quantized weight width, where it ran quantized


Call = LayerCall | UnpairedCall | PhaseCall | AACall | StackCall


@dataclass(frozen=True)
class Finding:
    """Everything the verdict sentence says, as facts."""

    call: Call
    two_torches_as_aa: tuple[str, str] | None = None  # recorded as A/A, yet two torches ran
    run_whole_hint: bool = False  # the model's figure came from its layers alone
    movers: tuple[tuple[PhaseChange, PhaseAttribution], ...] = ()  # each changed phase and its op attribution


@dataclass(frozen=True)
class UnpairedNote:
    """No call is made between two separate runs."""


@dataclass(frozen=True)
class AAFloorNote:
    run_id: str
    threshold: float
    raised: int  # workloads whose A/A floor exceeds the threshold
    floors: int


@dataclass(frozen=True)
class ShortSuiteNote:
    short: int  # linear shapes too short of rounds to bound
    linear: int


@dataclass(frozen=True)
class HeldNote:
    """Workloads whose visits disagreed on the direction, so no call was made."""

    count: int
    first: str


@dataclass(frozen=True)
class TooSlowNote:
    """Workloads bench's time guard skipped, and the budget that would measure them all."""

    count: int
    first: str
    budget_s: float | None
    budget_needed_s: float | None


@dataclass(frozen=True)
class ProcessFloorNote:
    worst: float  # the largest median disagreement between process pairs, in log units
    count: int  # workloads whose floor exceeds the threshold
    highest: float  # the highest such floor, in log units


Note = UnpairedNote | AAFloorNote | ShortSuiteNote | HeldNote | TooSlowNote | ProcessFloorNote
