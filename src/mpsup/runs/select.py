"""Which stored runs a report is about: the newest paired one, one by id, the files named, every A/A run;
and two single-environment runs paired into one. What cannot be read is skipped with a warning."""

from __future__ import annotations

import dataclasses
import stat
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mpsup.errors import UserError
from mpsup.runs.apart import conditions_differ
from mpsup.runs.journal import recover_journals
from mpsup.runs.schema import EnvRun, Hygiene, Layout, RunRecord, SmokeResult, SmokeRun, WorkloadRun
from mpsup.runs.store import find_record, list_record_paths, load_record
from mpsup.safe_files import stat_input

Warn = Callable[[str], None]


def _try_load(path: Path, warn: Warn) -> RunRecord | None:
    try:
        return load_record(path)
    except UserError as exc:
        warn(f"skipped {exc}")
        return None


def record_files_in(folder: Path) -> list[Path]:
    """The files a folder given to `report` is read as: every .json below it, hidden ones left out."""
    return sorted(x for x in folder.rglob("*.json") if not x.name.startswith("."))


def records_from_paths(paths: list[Path], warn: Warn) -> list[RunRecord]:
    # One stat each, whose failures (a name over 255 bytes, a folder we may not search) are one line.
    kinds = [stat_input(p, "run record or folder") for p in paths]
    if len(paths) == 1 and kinds[0] is not None and not stat.S_ISDIR(kinds[0].st_mode):
        # The one record asked for: its own problem is the error, not a warning before a vaguer one.
        named = load_record(paths[0])
        if len(named.environments) < 2:
            raise UserError(f"{paths[0]}: a single-environment run; pair two with --baseline ID --candidate ID")
        return [named]
    files: list[Path] = []
    for p, st in zip(paths, kinds, strict=True):
        if st is not None and stat.S_ISDIR(st.st_mode):
            files += record_files_in(p)
        elif st is not None:
            files.append(p)
        else:
            raise UserError(f"{p}: no such file or folder")
    out = []
    for f in files:
        rec = _try_load(f, warn)
        if rec is None:
            continue
        if len(rec.environments) < 2:
            warn(f"skipped {f}: a single-environment run (pair two with --baseline ID --candidate ID)")
            continue
        out.append(rec)
    if not out:
        raise UserError("no usable paired run record among " + ", ".join(str(p) for p in paths))
    return out


def _recover(warn: Warn) -> None:
    recover_journals(warn)  # a run that died (SIGKILL, full disk) left a journal: report it as a partial record


def newest_paired(warn: Warn, note: Warn | None = None) -> RunRecord:
    """The newest run that pairs two environments; `note` hears which one and what newer single runs exist."""
    _recover(warn)
    skipped = 0
    newer_single: list[tuple[str, RunRecord]] = []
    for path in reversed(list_record_paths()):
        rec = _try_load(path, warn)
        skipped += rec is None
        if rec is not None and len(rec.environments) >= 2:
            if note is not None:
                for line in choice_lines(rec, newer_single):
                    note(line)
            return rec
        if rec is not None:
            newer_single.append((path.stem, rec))  # the file's name is what --baseline and --candidate take
    unreadable = f" ({skipped} unreadable record(s) skipped, see the warnings)" if skipped else ""
    singles = (
        f"; {len(newer_single)} single run(s) stored: pair two with --baseline ID --candidate ID"
        if newer_single
        else ""
    )
    raise UserError(
        f"no paired run stored yet{unreadable}{singles}: run `mpsup bench --candidate PATH` (or `--aa`) first"
    )


def choice_lines(chosen: RunRecord, newer_single: list[tuple[str, RunRecord]]) -> list[str]:
    """Why `report` without arguments shows this run, and what to do with the newer runs it passed over
    (`newer_single`: each run's id as --baseline takes it, and the run; newest first)."""
    lines = [f"Reporting run {chosen.describe()}: the newest run that pairs two environments."]
    if not newer_single:
        return lines
    lines.append(f"{len(newer_single)} newer single-environment run(s), not in this report:")
    lines += [f"  {r.describe()}" for _, r in newer_single[:5]]
    if len(newer_single) > 5:
        lines.append(f"  ... {len(newer_single) - 5} more (mpsup report --list)")
    pair = newest_comparable_pair(newer_single)
    if pair is not None:
        (older, _), (newer, _) = pair
        lines.append("To compare two of them (estimates, no verdict):")
        lines.append(f"  mpsup report --baseline {older} --candidate {newer}")  # its own line: pasted whole
    elif len(newer_single) > 1:
        # Suggesting two that measured different workloads (or devices, or models) only leads to a refusal.
        lines.append("No two of them can be compared side by side (different devices, workloads or models).")
    lines.append("For a verdict, measure both torches in one run:")
    lines.append("  mpsup bench --candidate VERSION")
    return lines


def newest_comparable_pair(
    runs: list[tuple[str, RunRecord]],
) -> tuple[tuple[str, RunRecord], tuple[str, RunRecord]] | None:
    """Of single runs (newest first), the two that `--baseline A --candidate B` accepts, as (older, newer):
    the pair whose older run is the newest, then whose newer run is. None when no two can be paired."""
    for j in range(1, len(runs)):
        for i in range(j):
            if pairing_refusal(runs[j][1], runs[i][1]) is None:
                return runs[j], runs[i]
    return None


def by_id(run_id: str, warn: Warn) -> RunRecord:
    _recover(warn)  # the run asked for may be one that was interrupted and exists only as a journal
    return load_record(find_record(run_id))


def stored_aa_runs(warn: Warn) -> list[RunRecord]:
    """Every readable `--aa` run, oldest first: the noise floors a report may lean on."""
    found = []
    for path in list_record_paths():
        rec = _try_load(path, lambda _msg: None)  # the chosen run's own loading already warned about bad files
        if rec is not None and rec.mode == "aa":
            found.append(rec)
    return found


@dataclass(frozen=True)
class StoredRun:
    """One line of `report --list`. `id` is what --run, --baseline and --candidate take (the file's name
    under runs/); `record_id` is the id written inside, which differs only for a file renamed by hand."""

    id: str
    created_at: str | None
    mode: str | None
    device: str
    torch: list[str | None]
    workloads: int
    partial: bool
    model: str | None
    path: str
    record_id: str | None = None

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def stored_runs(warn: Warn) -> list[StoredRun]:
    _recover(warn)
    rows = []
    for path in list_record_paths():
        rec = _try_load(path, warn)
        if rec is None:
            continue
        rows.append(
            StoredRun(
                id=path.stem,
                created_at=rec.created_at,
                mode=rec.mode,
                device=rec.device,
                torch=[e.side if e.stack == "mlx" else e.torch_version for e in rec.environments],
                workloads=len(rec.workloads),
                partial=rec.partial,
                model=rec.model.path if rec.model else None,
                path=str(path),
                record_id=rec.id,
            )
        )
    return rows


def pairing_refusal(base: RunRecord, cand: RunRecord) -> str | None:
    """Why two runs cannot be put side by side as single runs (`--baseline A --candidate B`), or None."""
    for rec in (base, cand):
        if not rec.environments:
            return f"run {rec.id} records no environment: nothing to pair"
        if rec.mode != "single" or len(rec.environments) != 1:
            # A paired run's rounds would otherwise ride along and be read as this comparison's.
            return (
                f"run {rec.id} is a {rec.mode or 'multi-environment'} run, not a single-environment one: "
                f"report it on its own (`mpsup report --run {rec.id}`)"
            )
    if base.device != cand.device:
        return (
            f"runs {base.id} and {cand.id} were on different devices ({base.device} vs {cand.device}): not comparable"
        )
    fingerprint_b = base.model.fingerprint if base.model else None
    fingerprint_c = cand.model.fingerprint if cand.model else None
    if fingerprint_b != fingerprint_c:
        return f"runs {base.id} and {cand.id} measured different models: not comparable"
    dtypes_b = {(w.name, w.dtype) for w in base.workloads}
    dtypes_c = {(w.name, w.dtype) for w in cand.workloads}
    names_b = {w.name for w in base.workloads}
    names_c = {w.name for w in cand.workloads}
    if names_b == names_c and dtypes_b != dtypes_c:
        # One model at --dtype fp32 and at bf16: the same names, and every ratio the dtype's, not the torch's.
        name, dtype = sorted(dtypes_c - dtypes_b)[0]
        return (
            f"runs {base.id} and {cand.id} measured the same workloads in other dtypes "
            f"(e.g. {name} in {dtype}): not paired"
        )
    if names_b != names_c:
        diff = sorted(names_b ^ names_c)
        return (
            f"runs {base.id} and {cand.id} measured different workloads "
            f"({len(diff)} differ, e.g. {diff[0]}): not paired"
        )
    # The names agree here. One pipeline's UNet step at 512x512 and at 1024x1024: one name, and a ratio of 4
    # that is the size's.
    sizes_b = {w.name: w.identity[2] for w in base.workloads}
    resized = sorted(
        (w.name, sizes_b[w.name], w.identity[2]) for w in cand.workloads if w.identity[2] != sizes_b[w.name]
    )
    if resized:
        name, size_b, size_c = resized[0]
        return (
            f"runs {base.id} and {cand.id} ran {name} at other sizes ({size_b or 'unstated'} vs "
            f"{size_c or 'unstated'}): not paired"
        )
    return None


def merge_single_runs(base: RunRecord, cand: RunRecord) -> RunRecord:
    """Two single-environment runs of the same workloads, as one unpaired two-environment record."""
    refusal = pairing_refusal(base, cand)
    if refusal is not None:
        raise UserError(refusal)
    label_b, label_c = base.environments[0].label, cand.environments[0].label
    by_name = {w.name: w for w in cand.workloads}
    workloads = tuple(
        _relabel(
            w, {"baseline": w.envs.get(label_b, EnvRun()), "candidate": by_name[w.name].envs.get(label_c, EnvRun())}
        )
        for w in base.workloads
    )
    cand_smoke = {s.feature: s for s in cand.smoke}
    smoke = tuple(
        SmokeRun(
            feature=s.feature,
            envs={
                "baseline": next(iter(s.envs.values()), SmokeResult()),
                "candidate": next(iter(cand_smoke[s.feature].envs.values()), SmokeResult())
                if s.feature in cand_smoke
                else SmokeResult(),
            },
        )
        for s in base.smoke
    )
    return dataclasses.replace(
        base,
        id=f"{base.id}+{cand.id}",
        mode="unpaired",
        environments=(
            dataclasses.replace(base.environments[0], label="baseline"),
            dataclasses.replace(cand.environments[0], label="candidate"),
        ),
        workloads=workloads,
        smoke=smoke,
        # Each run's conditions kept apart (one run's start and the other's end are no run's change), and where
        # they differ in what keeps figures apart, said among the conditions.
        hygiene=Hygiene(
            before=base.hygiene.before,
            after=cand.hygiene.after,
            changed=(*base.hygiene.changed, *cand.hygiene.changed, *_apart(base, cand)),
            extra={"runs": {"baseline": base.hygiene.to_json(), "candidate": cand.hygiene.to_json()}},
        ),
        layout=Layout(),  # a record made here, never read: to_json writes every field it has
    )


def _apart(base: RunRecord, cand: RunRecord) -> list[str]:
    differ = conditions_differ(base.hygiene.before, cand.hygiene.before)
    return [f"the two runs ran under other conditions ({'; '.join(differ)})"] if differ else []


# One run's rounds and visits: nothing in an unpaired comparison was measured in turns, or visited by both.
_ONE_RUNS = ("rounds", "visit_states")


def _relabel(w: WorkloadRun, envs: dict[str, EnvRun]) -> WorkloadRun:
    extra = {k: v for k, v in w.extra.items() if k not in _ONE_RUNS}
    doc = {**w.to_json(), "envs": {}, "ratios": []}
    for k in _ONE_RUNS:
        doc.pop(k, None)
    return dataclasses.replace(w, envs=envs, ratios=(), extra=extra, layout=Layout.of(doc))
