"""The run record as typed, frozen values: what `report` reads, checked once on the way in.

A record on disk is the JSON document one bench writes (schema "mpsup.run/1"; docs/reference/run-record.md).
`RunRecord.from_json` upgrades an older version to the current shape, checks every field the report
reads (types, finite numbers in range, bounded lists) and builds these values; `to_json` gives the
document back key for key. Keys this mpsup does not know (a newer mpsup's additions) are kept in each
value's `extra`, so reading and saving a record never strips what a newer writer put there.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mpsup.errors import UserError
from mpsup.runs.fields import (
    MAX_COUNT,
    MAX_QUANTITY,
    MAX_SECONDS,
    Corrupt,
    _check,
    _list,
    _number,
    _obj,
    _required_text,
    _text,
    check_energy_meter,
    check_energy_turns,
    check_energy_windows,
    check_machine_state,
    check_visit_states,
)
from mpsup.runs.numerics_fields import check_numerics
from mpsup.runs.phase_fields import (  # the census bounds: the report's readers take them from here
    MAX_CENSUS_DIM,  # noqa: F401
    MAX_CENSUS_ELEMENTS,  # noqa: F401
    check_env_phase,
    check_phase_workload,
)
from mpsup.stats import usable_ratio

SCHEMA = "mpsup.run/1.4"  # 1.1: environments[i].stack; a phase keeps its config's names and sha256, not the config
# 1.2: needs_metal on a workload's envs entry and a smoke result; census tensors' param; op calls' reuse_bytes
# 1.3: a workload's numerics (each build's answer against float64); census float inputs' value ranges;
#      energy_meter (the meter read, or why none) and a workload's envs entry's energy (its read turns);
#      bench --energy: a workload's energy_windows (each build's windows of work, read at idle edges)
# 1.4: a workload's visit_states (the machine at each visit's start and end, each build's visit median) and the
#      record's machine_state (what was read, what is not known here, what reading cost)
"""What this mpsup writes. The typed reader changed, the file did not: bumping the version would only
make every mpsup already installed refuse new records. Additive changes (a new optional key, such as
memory.workload_peak) keep /1 and may be written as "mpsup.run/1.N"; both load the same way."""

# Bounds well above what any bench writes (a workload keeps at most 2,000 rounds of a few samples each),
# so a hostile or damaged record cannot make the report's bootstraps run for hours.
MAX_ENVIRONMENTS = 16
MAX_WORKLOADS = 20_000
MAX_SAMPLES = 20_000
MAX_ROUNDS = 20_000
# Over the whole record: what the report resamples. A full suite with two visits and leftover time keeps
# well under 200,000; this bound keeps one report of a hostile record to minutes, not hours.
MAX_VALUES = 2_000_000
MAX_SMOKE = 1_000
MAX_TAGS = 64


# --- the exact shape of the document, kept beside the typed values ---


@dataclass(frozen=True)
class Layout:
    """Which keys the JSON object had, in order, and which known ones were null: to_json writes
    exactly these, so a default the reader filled in (count 1, envs {}) never appears in the file."""

    keys: tuple[str, ...] = ()
    nulls: frozenset[str] = frozenset()

    @classmethod
    def of(cls, doc: Mapping[str, Any]) -> Layout:
        return cls(tuple(doc), frozenset(k for k, v in doc.items() if v is None))


def _extra(doc: Mapping[str, Any], known: Iterable[str]) -> dict[str, Any]:
    names = set(known)
    return {k: v for k, v in doc.items() if k not in names}


def _emit(
    layout: Layout, default_keys: tuple[str, ...], known: Mapping[str, Any], extra: Mapping[str, Any]
) -> dict[str, Any]:
    """The JSON object: the read keys in their order (or, for a value built in code, every known key
    that has a value), unknown keys as they were."""
    keys = layout.keys or (*[k for k in default_keys if known.get(k) is not None], *extra)
    out: dict[str, Any] = {}
    for k in keys:
        if k in known:
            out[k] = None if k in layout.nulls else known[k]
        elif k in extra:
            out[k] = extra[k]
    for k, v in extra.items():  # added after reading: kept, never dropped
        out.setdefault(k, v)
    return out


# --- the values ---


@dataclass(frozen=True)
class Environment:
    """One measured environment, as its worker described itself (record.environments[i])."""

    label: str
    torch_version: str | None = None
    device_name: str | None = None
    python: str | None = None
    event_timing: str | None = None  # what its device samples measure; see report.analysis.device_time_semantics
    # The MPS variables its worker saw (PYTORCH_ENABLE_MPS_FALLBACK...); None: a record that does not hold them.
    mps_env: Mapping[str, str] | None = None
    stack: str | None = None  # "torch" (also when absent) or "mlx": which worker measured it
    extra: Mapping[str, Any] = field(default_factory=dict)
    layout: Layout = field(default=Layout(), compare=False, repr=False)

    KEYS = ("label", "torch_version", "device_name", "python", "event_timing", "mps_env", "stack")

    @property
    def side(self) -> str:
        """What ran, as a reader names it: `torch 2.13.0`, or `MLX 0.32.4` for an MLX environment."""
        if self.stack == "mlx":
            return f"MLX {self.extra.get('mlx_version') or '?'}"
        return f"torch {self.torch_version}"

    @classmethod
    def from_json(cls, doc: Any, where: str) -> Environment:
        d = _obj(doc, where)
        env = d.get("mps_env")
        return cls(
            label=_required_text(d.get("label"), f"{where}.label"),
            torch_version=_text(d.get("torch_version"), f"{where}.torch_version"),
            device_name=_text(d.get("device_name"), f"{where}.device_name"),
            python=_text(d.get("python"), f"{where}.python"),
            event_timing=_text(d.get("event_timing"), f"{where}.event_timing"),
            mps_env=None
            if env is None
            else {k: _required_text(v, f"{where}.mps_env.{k}") for k, v in _obj(env, f"{where}.mps_env").items()},
            stack=_text(d.get("stack"), f"{where}.stack"),
            extra=_extra(d, cls.KEYS),
            layout=Layout.of(d),
        )

    def to_json(self) -> dict[str, Any]:
        known = {k: getattr(self, k) for k in self.KEYS}
        return _emit(self.layout, self.KEYS, known, self.extra)


@dataclass(frozen=True)
class Memory:
    """What a worker read about memory after one workload (bytes). Which figure means what:
    docs/reference/run-record.md."""

    peak_allocated: float | None = None  # the allocator's peak over the workload (MPS, CUDA)
    workload_peak: float | None = None  # the workload's own peak above its setup baseline (CPU)
    driver_allocated: float | None = None  # one reading at teardown: not a peak
    peak_rss: float | None = None  # the process's high-water mark: only grows, says little of one workload
    extra: Mapping[str, Any] = field(default_factory=dict)
    layout: Layout = field(default=Layout(), compare=False, repr=False)

    KEYS = ("peak_allocated", "workload_peak", "driver_allocated", "peak_rss")

    @classmethod
    def from_json(cls, doc: Any, where: str) -> Memory:
        d = _obj(doc, where, optional=True)
        return cls(
            **{k: _number(d.get(k), f"{where}.{k}") for k in cls.KEYS},
            extra=_extra(d, cls.KEYS),
            layout=Layout.of(d),
        )

    @property
    def peak(self) -> float | None:
        """This workload's peak: the allocator's, else the workload's own; never the process's RSS
        high-water mark nor a teardown reading, which a report would wrongly show as a peak."""
        v = self.peak_allocated or self.workload_peak
        return float(v) if v else None

    def to_json(self) -> dict[str, Any]:
        known = {k: getattr(self, k) for k in self.KEYS}
        return _emit(self.layout, self.KEYS, known, self.extra)


@dataclass(frozen=True)
class EnvRun:
    """One environment's measurement of one workload (workloads[i].envs[label]). Raw samples as written."""

    status: str | None = None
    reason: str | None = None
    median: float | None = None
    flops_per_call: float | None = None
    bytes_per_call: float | None = None
    samples: tuple[float, ...] = ()
    memory: Memory | None = None
    extra: Mapping[str, Any] = field(default_factory=dict)
    layout: Layout = field(default=Layout(), compare=False, repr=False)

    KEYS = ("status", "reason", "median", "flops_per_call", "bytes_per_call", "samples", "memory")

    @classmethod
    def from_json(cls, doc: Any, where: str) -> EnvRun:
        d = _obj(doc, where)
        samples = _list(d.get("samples"), f"{where}.samples", MAX_SAMPLES, optional=True)
        for i, sample in enumerate(samples):
            _number(sample, f"{where}.samples[{i}]", high=MAX_SECONDS, optional=False)
        check_env_phase(d, where)
        check_energy_turns(d.get("energy"), f"{where}.energy")
        return cls(
            status=_text(d.get("status"), f"{where}.status"),
            reason=_text(d.get("reason"), f"{where}.reason"),
            median=_number(d.get("median"), f"{where}.median", high=MAX_SECONDS),
            flops_per_call=_number(d.get("flops_per_call"), f"{where}.flops_per_call"),
            bytes_per_call=_number(d.get("bytes_per_call"), f"{where}.bytes_per_call"),
            samples=tuple(samples),
            memory=Memory.from_json(d["memory"], f"{where}.memory") if d.get("memory") is not None else None,
            extra=_extra(d, cls.KEYS),
            layout=Layout.of(d),
        )

    @property
    def timed(self) -> list[float]:
        # A zero time is no measurement (it cannot be a ratio's denominator).
        return [float(x) for x in self.samples if x > 0]

    @property
    def peak(self) -> float | None:
        return self.memory.peak if self.memory else None

    def to_json(self) -> dict[str, Any]:
        known = {
            **{k: getattr(self, k) for k in self.KEYS},
            "samples": list(self.samples),
            "memory": self.memory.to_json() if self.memory else None,
        }
        return _emit(self.layout, self.KEYS, known, self.extra)


# A phase's parameters that set its size; one that differs makes it another measurement under the same name.
PHASE_SIZE_KEYS = ("resolution", "frames", "tokens", "cache", "depth")


@dataclass(frozen=True)
class WorkloadRun:
    """One workload and every environment's measurement of it (record.workloads[i])."""

    name: str
    part: str | None = None
    kind: str | None = None
    dtype: str | None = None
    source: str | None = None
    status: str | None = None
    reason: str | None = None
    tags: tuple[str, ...] = ()
    count: int = 1
    ratios: tuple[float, ...] = ()  # paired runs: one candidate/baseline ratio per round
    envs: Mapping[str, EnvRun] = field(default_factory=dict)  # by environment label
    extra: Mapping[str, Any] = field(default_factory=dict)
    layout: Layout = field(default=Layout(), compare=False, repr=False)

    KEYS = ("name", "kind", "part", "dtype", "source", "tags", "count", "status", "reason", "ratios", "envs")

    @classmethod
    def from_json(cls, doc: Any, where: str) -> WorkloadRun:
        d = _obj(doc, where)
        name = _required_text(d.get("name"), f"{where}.name")
        texts = {k: _text(d.get(k), f"{where}.{k}") for k in ("part", "status", "reason", "kind", "dtype", "source")}
        tags = _list(d.get("tags"), f"{where}.tags", MAX_TAGS, optional=True)
        for i, tag in enumerate(tags):
            _text(tag, f"{where}.tags[{i}]", optional=False)
        count = d.get("count", 1)
        _check(isinstance(count, int) and not isinstance(count, bool), f"{where}.count", "a whole number", count)
        if not 1 <= count <= MAX_COUNT:
            raise Corrupt(f"{where}.count: {count} is out of range")
        ratios = _list(d.get("ratios"), f"{where}.ratios", MAX_ROUNDS, optional=True)
        for i, r in enumerate(ratios):
            _number(r, f"{where}.ratios[{i}]", low=-MAX_QUANTITY)  # a ratio <= 0 is skipped, not fatal
        if texts["part"] == "phase":
            check_phase_workload(d, where)
        check_numerics(d.get("numerics"), f"{where}.numerics")
        check_energy_windows(d.get("energy_windows"), f"{where}.energy_windows")
        check_visit_states(d.get("visit_states"), f"{where}.visit_states")
        envs = {
            label: EnvRun.from_json(env, f"{where}.envs.{label}")
            # A workload skipped before any environment ran it may carry no (or null) envs.
            for label, env in _obj(d.get("envs"), f"{where}.envs", optional=True).items()
        }
        return cls(
            name=name,
            **texts,
            tags=tuple(tags),
            count=count,
            ratios=tuple(ratios),
            envs=envs,
            extra=_extra(d, cls.KEYS),
            layout=Layout.of(d),
        )

    @property
    def identity(self) -> tuple[str, str, str]:
        """What makes two runs' workloads one measurement: name, dtype and, for a whole-model phase, its size
        (a UNet step at 1024x1024 and one at 512x512 are both `model/unet/step`)."""
        size = ""
        if self.part == "phase":
            size = ", ".join(
                f"{k} {v}" for k in PHASE_SIZE_KEYS if (v := self.extra.get(k)) is not None and not isinstance(v, dict)
            )
        return self.name, self.dtype or "", size

    @property
    def paired_ratios(self) -> list[float]:
        """The usable per-round ratios: a ratio <= 0, non-finite or a million-fold is no measurement."""
        return [float(r) for r in self.ratios if usable_ratio(r)]

    @property
    def ratios_by_visit(self) -> list[list[float]]:
        """The usable per-round ratios grouped by the pair of worker processes that measured them: a bench
        comes back to each workload with fresh processes, and each visit's rounds say `visit`. Records
        without visits (or with rounds that do not line up with the ratios) give one group."""
        rounds = self.extra.get("rounds")
        if not isinstance(rounds, list) or len(rounds) != len(self.ratios):
            return [self.paired_ratios] if self.paired_ratios else []
        groups: dict[int, list[float]] = {}
        for r, rd in zip(self.ratios, rounds, strict=True):
            visit = rd.get("visit", 1) if isinstance(rd, dict) else 1
            if not isinstance(visit, int) or isinstance(visit, bool):
                visit = 1
            if usable_ratio(r):
                groups.setdefault(visit, []).append(float(r))
        return [groups[k] for k in sorted(groups)]

    def env(self, label: str) -> EnvRun:
        return self.envs.get(label) or EnvRun()

    def to_json(self) -> dict[str, Any]:
        known = {
            **{k: getattr(self, k) for k in self.KEYS},
            "tags": list(self.tags),
            "ratios": list(self.ratios),
            "envs": {label: e.to_json() for label, e in self.envs.items()},
        }
        if not self.layout.keys:  # built in code: write what a bench writes, no empty defaults
            known.update({k: None for k in ("tags", "ratios") if not getattr(self, k)})
        return _emit(self.layout, self.KEYS, known, self.extra)


@dataclass(frozen=True)
class SmokeResult:
    status: str | None = None  # pass, fail, crash, unsupported
    message: str | None = None
    extra: Mapping[str, Any] = field(default_factory=dict)
    layout: Layout = field(default=Layout(), compare=False, repr=False)

    KEYS = ("status", "message")

    @classmethod
    def from_json(cls, doc: Any, where: str) -> SmokeResult:
        d = _obj(doc, where)
        return cls(
            status=_text(d.get("status"), f"{where}.status"),
            message=_text(d.get("message"), f"{where}.message"),
            extra=_extra(d, cls.KEYS),
            layout=Layout.of(d),
        )

    def to_json(self) -> dict[str, Any]:
        return _emit(self.layout, self.KEYS, {k: getattr(self, k) for k in self.KEYS}, self.extra)


@dataclass(frozen=True)
class SmokeRun:
    """One smoke test and each environment's result (record.smoke[i])."""

    feature: str
    envs: Mapping[str, SmokeResult] = field(default_factory=dict)
    extra: Mapping[str, Any] = field(default_factory=dict)
    layout: Layout = field(default=Layout(), compare=False, repr=False)

    KEYS = ("feature", "envs")

    @classmethod
    def from_json(cls, doc: Any, where: str) -> SmokeRun:
        d = _obj(doc, where)
        return cls(
            feature=_required_text(d.get("feature"), f"{where}.feature"),
            envs={
                label: SmokeResult.from_json(r, f"{where}.envs.{label}")
                for label, r in _obj(d.get("envs"), f"{where}.envs").items()
            },
            extra=_extra(d, cls.KEYS),
            layout=Layout.of(d),
        )

    def status(self, label: str) -> str | None:
        r = self.envs.get(label)
        return r.status if r else None

    def to_json(self) -> dict[str, Any]:
        known = {"feature": self.feature, "envs": {label: r.to_json() for label, r in self.envs.items()}}
        return _emit(self.layout, self.KEYS, known, self.extra)


@dataclass(frozen=True)
class Hygiene:
    """Machine conditions read before and after the run (host.hygiene), and what changed between."""

    before: Mapping[str, Any] = field(default_factory=dict)
    after: Mapping[str, Any] = field(default_factory=dict)
    changed: tuple[str, ...] = ()
    extra: Mapping[str, Any] = field(default_factory=dict)
    layout: Layout = field(default=Layout(), compare=False, repr=False)

    KEYS = ("before", "after", "changed")

    @classmethod
    def from_json(cls, doc: Any, where: str) -> Hygiene:
        d = _obj(doc, where, optional=True)
        changed = _list(d.get("changed"), f"{where}.changed", MAX_SMOKE, optional=True)
        for i, change in enumerate(changed):
            _text(change, f"{where}.changed[{i}]", optional=False)
        return cls(
            before=_obj(d.get("before"), f"{where}.before", optional=True),
            after=_obj(d.get("after"), f"{where}.after", optional=True),
            changed=tuple(changed),
            extra=_extra(d, cls.KEYS),
            layout=Layout.of(d),
        )

    def to_json(self) -> dict[str, Any]:
        known = {"before": dict(self.before), "after": dict(self.after), "changed": list(self.changed)}
        return _emit(self.layout, self.KEYS, known, self.extra)


@dataclass(frozen=True)
class ModelInfo:
    """The model a run measured (`bench --model`): where it was and what identifies its contents."""

    path: str | None = None
    fingerprint: str | None = None
    format: str | None = None
    extra: Mapping[str, Any] = field(default_factory=dict)
    layout: Layout = field(default=Layout(), compare=False, repr=False)

    KEYS = ("path", "fingerprint", "format")

    @classmethod
    def from_json(cls, doc: Any, where: str) -> ModelInfo:
        d = _obj(doc, where)
        return cls(
            **{k: _text(d.get(k), f"{where}.{k}") for k in cls.KEYS},
            extra=_extra(d, cls.KEYS),
            layout=Layout.of(d),
        )

    def to_json(self) -> dict[str, Any]:
        return _emit(self.layout, self.KEYS, {k: getattr(self, k) for k in self.KEYS}, self.extra)


@dataclass(frozen=True)
class RunRecord:
    """One bench run: its environments, every workload's raw measurements, smoke results, conditions."""

    id: str
    device: str
    schema: str = SCHEMA
    created_at: str | None = None
    mpsup_version: str | None = None
    mode: str | None = None  # single, paired, aa; "unpaired" for two single runs merged by the report
    partial: bool = False
    environments: tuple[Environment, ...] = ()
    options: Mapping[str, Any] = field(default_factory=dict)
    hygiene: Hygiene = field(default_factory=Hygiene)
    model: ModelInfo | None = None
    workloads: tuple[WorkloadRun, ...] = ()
    smoke: tuple[SmokeRun, ...] = ()
    extra: Mapping[str, Any] = field(default_factory=dict)  # interrupted, signal, failure, crashes, recovered...
    layout: Layout = field(default=Layout(), compare=False, repr=False)

    KEYS = (
        "schema",
        "id",
        "created_at",
        "mpsup_version",
        "mode",
        "device",
        "partial",
        "environments",
        "options",
        "hygiene",
        "model",
        "workloads",
        "smoke",
    )

    @classmethod
    def from_json(cls, doc: Any, source: Path | str) -> RunRecord:
        """The record `doc` read from `source` (named in every error), upgraded to the current shape and checked
        against what the report reads: a record that passes cannot make the report raise anything but UserError."""
        if not isinstance(doc, dict):
            raise UserError(f"{source}: not a run record (top level is not an object)")
        upgrade = upgrade_for(doc.get("schema"))
        if upgrade is None:
            raise UserError(f"{source}: not an mpsup run record (schema {doc.get('schema')!r})")
        try:
            return cls._body(upgrade(doc))
        except Corrupt as exc:
            raise UserError(f"{source}: corrupt run record ({exc})") from None

    @classmethod
    def _body(cls, d: dict[str, Any]) -> RunRecord:
        run_id = _required_text(d.get("id"), "id")
        device = _required_text(d.get("device"), "device")
        texts = {k: _text(d.get(k), k) for k in ("created_at", "mode", "mpsup_version")}
        partial = d.get("partial")
        _check(partial is None or isinstance(partial, bool), "partial", "true or false", partial)
        envs = _list(d.get("environments"), "environments", MAX_ENVIRONMENTS)
        workloads = _list(d.get("workloads"), "workloads", MAX_WORKLOADS)
        smoke = _list(d.get("smoke"), "smoke", MAX_SMOKE, optional=True)
        check_energy_meter(d.get("energy_meter"))
        check_machine_state(d.get("machine_state"))
        parsed = tuple(WorkloadRun.from_json(w, f"workloads[{i}]") for i, w in enumerate(workloads))
        values = sum(len(w.ratios) + sum(len(e.samples) for e in w.envs.values()) for w in parsed)
        if values > MAX_VALUES:
            raise Corrupt(f"workloads: {values:,} samples and ratios in all, over the {MAX_VALUES:,} a record may hold")
        return cls(
            id=run_id,
            device=device,
            schema=str(d["schema"]),
            **texts,
            partial=bool(partial),
            environments=tuple(Environment.from_json(e, f"environments[{i}]") for i, e in enumerate(envs)),
            options=_obj(d.get("options"), "options", optional=True),
            workloads=parsed,
            smoke=tuple(SmokeRun.from_json(s, f"smoke[{i}]") for i, s in enumerate(smoke)),
            hygiene=Hygiene.from_json(d.get("hygiene"), "hygiene"),
            model=ModelInfo.from_json(d["model"], "model") if d.get("model") is not None else None,
            extra=_extra(d, cls.KEYS),
            layout=Layout.of(d),
        )

    @property
    def labels(self) -> list[str]:
        return [e.label for e in self.environments]

    @property
    def interrupted(self) -> bool:
        return bool(self.extra.get("interrupted"))

    @property
    def failure(self) -> str | None:
        f = self.extra.get("failure")
        return f if isinstance(f, str) else None

    def describe(self) -> str:
        """One line naming the run: id, mode, device, torches and what it measured."""
        torch = " vs ".join(e.side if e.stack == "mlx" else str(e.torch_version) for e in self.environments)
        n = len(self.workloads)
        what = (self.model.path if self.model else None) or f"{n} workload{'' if n == 1 else 's'}"
        return f"{self.id} ({self.mode}, {self.device}, torch {torch}, {what})"

    def to_json(self) -> dict[str, Any]:
        known = {
            **{k: getattr(self, k) for k in self.KEYS},
            "options": dict(self.options),
            "environments": [e.to_json() for e in self.environments],
            "hygiene": self.hygiene.to_json(),
            "model": self.model.to_json() if self.model else None,
            "workloads": [w.to_json() for w in self.workloads],
            "smoke": [s.to_json() for s in self.smoke],
        }
        if not self.layout.keys:
            known["partial"] = self.partial
        return _emit(self.layout, self.KEYS, known, self.extra)


# --- versions: every schema this mpsup can read, each with the function that brings it to the current shape ---


Upgrade = Callable[[dict[str, Any]], dict[str, Any]]
"""One version's document -> the current shape's document (still unchecked: from_json checks after)."""


def _from_v1(doc: dict[str, Any]) -> dict[str, Any]:
    """mpsup.run/1 is the current shape: nothing to change (absent or null parts read as empty ones)."""
    return doc


UPGRADES: dict[str, Upgrade] = {"mpsup.run/1": _from_v1}
"""Major version -> upgrade to the current shape. When /2 comes, this holds `"mpsup.run/2": _from_v2` (nothing to
change) and `"mpsup.run/1": _v1_to_v2`, so a record of every earlier version keeps loading."""


def upgrade_for(schema: object) -> Upgrade | None:
    """The upgrade for this schema text; a minor version ("mpsup.run/1.2") only adds keys, read as its major."""
    if not isinstance(schema, str):
        return None
    parts = schema.split(".", 2)
    return UPGRADES.get(".".join(parts[:2]) if len(parts) > 2 else schema)


def as_record(doc: RunRecord | Mapping[str, Any], source: Path | str = "record") -> RunRecord:
    """A RunRecord as it is, or a record document checked and typed (callers holding one that bench just built)."""
    return doc if isinstance(doc, RunRecord) else RunRecord.from_json(dict(doc), source)
