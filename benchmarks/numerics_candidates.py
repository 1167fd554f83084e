"""Same answers? Candidates that change ONE op class's numerics, and whether the run record says so, and where.

Each candidate is this interpreter behind a wrapper script whose startup hook (benchmarks/numerics_hook/
sitecustomize.py on PYTHONPATH) registers, through torch.library, a CPU kernel for an aten op class computed in
bfloat16 (matmul: mm/addmm; softmax: _softmax and the CPU attention kernel's softmax; norm: rsqrt and mean.dim,
what Llama's RMSNorm calls), or changes only speed (threads: one CPU thread). The op replay calls torch.ops.aten,
so it sees the change as the model run whole does.

For each case it runs `mpsup bench --model LLAMA --candidate WRAPPER --tokens 32 --budget 0.3` (a Llama-shaped
float32 config folder, random weights) in its own MPSUP_HOME, reads the run record's `numerics`, and prints per
phase and per replayed op: each build's RMSE against float64 (relative to the truth's RMS), their ratio, the
difference between the builds, the run's own floor, this script's reading of it (the dynamo rule: candidate
error > 2x baseline's + 2 float32 eps is less accurate, as the report) and, per phase, the replayed op with the largest
candidate/baseline error ratio. Where `mpsup report --json` has `model_numerics` (the report half), it prints
that too and checks its verdicts. `--aa N` adds N A/A runs (`--aa`): none may read worse than same accuracy.

    python benchmarks/numerics_candidates.py --help
    python benchmarks/numerics_candidates.py                          # the four cases, then nothing else
    python benchmarks/numerics_candidates.py --cases none --aa 20 --aa-budget 0.1

Exits 1 when an expectation fails: (matmul, softmax, norm) every phase less accurate and its top op the changed
one; (threads) identical or same accuracy everywhere; A/A nothing less/more accurate or broken."""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

HOOK = Path(__file__).resolve().parent / "numerics_hook"
LLAMA = {
    "model_type": "llama",
    "architectures": ["LlamaForCausalLM"],
    "hidden_size": 256,
    "intermediate_size": 704,
    "num_hidden_layers": 2,
    "num_attention_heads": 8,
    "num_key_value_heads": 4,
    "vocab_size": 2048,
    "max_position_embeddings": 4096,
    "torch_dtype": "float32",
}
# case -> the census op names (the record's `op`) that may be the top op; none: a speed-only candidate
CASES: dict[str, tuple[str, ...]] = {
    "matmul": ("linear", "mm", "addmm", "matmul"),
    "softmax": ("scaled_dot_product_attention", "softmax", "_softmax"),
    "norm": ("rsqrt", "mean"),
    "threads": (),
}
EPS32 = 2.0**-23  # errors are relative to the truth's RMS: float32's machine epsilon of it
RULE_MULT, RULE_EPS = 2.0, 2.0  # torch._dynamo.utils.same(fp64_ref=...) for float32, as report/numerics.py
BROKEN = 0.1


def load() -> str:
    try:
        return " ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        return "?"


def make_model(work: Path, size: dict[str, int]) -> Path:
    folder = work / "llama"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps({**LLAMA, **size}))
    return folder


def make_wrapper(work: Path, case: str, low: str) -> Path:
    path = work / f"env-{case}"
    lines = ["#!/bin/sh"]
    if case != "baseline":
        lines += [
            f"export PYTHONPATH={HOOK}${{PYTHONPATH:+:$PYTHONPATH}}",
            f"export MPSUP_NUM_CASE={case}",
            f"export MPSUP_NUM_LOW={low}",
        ]
    lines.append(f'exec "{sys.executable}" "$@"')
    path.write_text("\n".join(lines) + "\n")
    path.chmod(0o755)
    return path


def mpsup(args: list[str], home: Path) -> tuple[dict[str, Any], float, int]:
    env = {**os.environ, "MPSUP_HOME": str(home), "COLUMNS": "200"}
    t0 = time.perf_counter()
    out = subprocess.run([sys.executable, "-m", "mpsup", *args, "--json"], env=env, capture_output=True, text=True)
    took = time.perf_counter() - t0
    try:
        return json.loads(out.stdout), took, out.returncode
    except json.JSONDecodeError:
        sys.exit(f"mpsup {' '.join(args)} failed ({out.returncode}): {out.stderr[-2000:]}")


def record_of(bench: dict[str, Any], home: Path) -> dict[str, Any]:
    path = bench.get("path") or bench.get("record")
    if not path:
        runs = sorted((home / "runs").glob("*.json"))
        path = runs[-1]
    return json.loads(Path(path).read_text())


def ratio(cand: float | None, base: float | None) -> float | None:
    if cand is None or base is None:
        return None
    if base == 0:
        return 1.0 if cand == 0 else math.inf
    return cand / base


def reading(out: dict[str, Any], labels: tuple[str, str]) -> dict[str, Any]:
    """One output of one workload: both sides' errors, the between, the floor, and this script's verdict."""
    errs = out.get("errors") or {}
    base, cand = errs.get(labels[0]) or {}, errs.get(labels[1]) or {}
    between = out.get("between") or {}
    b, c = base.get("rmse"), cand.get("rmse")
    row = {
        "output": out.get("name"),
        "base": b,
        "cand": c,
        "base_max": base.get("max_abs"),
        "cand_max": cand.get("max_abs"),
        "ratio": ratio(c, b),
        "between": between.get("rmse"),
        "identical": between.get("identical"),
        "floor": out.get("floor"),
        "truth_nonfinite": out.get("truth_nonfinite"),
    }
    if "match" in base or "match" in cand:  # an integer or boolean output: exact-match rate, out of the ranking
        row.update(ratio=None, between=None, match=cand.get("match"))
        row["verdict"] = "identical" if between.get("identical") else "differs"
    elif b is None or c is None:
        row["verdict"] = "not compared"
    elif between.get("identical"):
        row["verdict"] = "identical"
    elif cand.get("nonfinite", 0) > base.get("nonfinite", 0) or (c > BROKEN and b <= BROKEN):
        row["verdict"] = "broken"
    elif c > RULE_MULT * b + RULE_EPS * EPS32 and (row["between"] or 0) > (row["floor"] or 0):
        row["verdict"] = "less accurate"
    elif b > RULE_MULT * c + RULE_EPS * EPS32 and (row["between"] or 0) > (row["floor"] or 0):
        row["verdict"] = "more accurate"
    else:
        row["verdict"] = "same accuracy"
    return row


BAD = ("more accurate", "less accurate", "broken", "differs")


def worst(rows: list[dict[str, Any]]) -> str:
    seen = {r["verdict"] for r in rows}
    for v in ("broken", "differs", "less accurate", "more accurate", "same accuracy", "identical"):
        if v in seen:
            return v
    return "not compared"


def summarise(record: dict[str, Any]) -> dict[str, Any]:
    """Phases and ops of one record: each output's reading; per phase its ops ranked by error ratio."""
    envs = record.get("environments") or []
    labels = tuple(e.get("label") for e in envs[:2]) if len(envs) >= 2 else ("baseline", "candidate")
    phases: dict[str, dict[str, Any]] = {}
    ops: list[dict[str, Any]] = []
    took = 0.0
    skipped: dict[str, int] = {}
    for w in record.get("workloads") or []:
        n = w.get("numerics")
        if not isinstance(n, dict):
            if w.get("kind") in ("model_phase", "op_replay", "op_group"):
                skipped[w.get("kind")] = skipped.get(w.get("kind"), 0) + 1
            continue
        took += float(n.get("took_s") or 0.0)
        if n.get("status") != "compared":
            rows = [{"verdict": "not compared", "reason": n.get("reason")}]
        else:
            rows = [reading(o, labels) for o in n.get("outputs") or []]
        item = {"name": w["name"], "op": w.get("op"), "rows": rows, "verdict": worst(rows)}
        if w.get("kind") == "model_phase":
            phases[w.get("phase") or w["name"]] = {**item, "workload": w["name"]}
        elif w.get("kind") == "op_replay":
            item["phases"] = sorted(w.get("op_phases") or {})
            ops.append(item)
    for phase in phases.values():
        mine = [o for o in ops if phase["workload"] in o["phases"] and o["rows"] and "ratio" in o["rows"][0]]
        mine.sort(key=lambda o: -(o["rows"][0]["ratio"] if o["rows"][0]["ratio"] is not None else -1))
        phase["ops"] = mine
        phase["top"] = mine[0] if mine else None
    return {"labels": labels, "phases": phases, "ops": ops, "took_s": took, "not_asked": skipped}


def fmt(x: Any, spec: str = ".2e") -> str:
    if x is None:
        return "-"
    if isinstance(x, float) and math.isinf(x):
        return "inf"
    return format(x, spec)


def print_case(case: str, s: dict[str, Any], wall: float) -> None:
    print(f"## {case}: {wall:.0f} s wall, reference took {s['took_s']:.1f} s, load {load()}")
    head = f"  {'what':<58} {'base rmse':>9} {'cand rmse':>9} {'ratio':>8} {'between':>9} {'floor':>8}  verdict"
    print(head)
    for name, ph in s["phases"].items():
        r = ph["rows"][0]
        print(
            f"  {'phase ' + name:<58} {fmt(r.get('base')):>9} {fmt(r.get('cand')):>9} {fmt(r.get('ratio'), '.1f'):>8}"
            f" {fmt(r.get('between')):>9} {fmt(r.get('floor'), '.1e'):>8}  {ph['verdict']}"
        )
        for o in ph["ops"]:
            r = o["rows"][0]
            label = o["name"].removeprefix("model/op/")[:56]
            print(
                f"    {label:<56} {fmt(r.get('base')):>9} {fmt(r.get('cand')):>9} {fmt(r.get('ratio'), '.1f'):>8}"
                f" {fmt(r.get('between')):>9} {fmt(r.get('floor'), '.1e'):>8}  {o['verdict']}"
            )
        top = ph["top"]
        print(f"    -> top op by error ratio: {top['op'] if top else '-'}" + (f" ({top['name']})" if top else ""))
    unjudged = [o for o in s["ops"] if o["verdict"] == "not compared"]
    for o in unjudged:
        print(f"    not compared: {o['name']}: {o['rows'][0].get('reason')}")
    if s["not_asked"]:
        print(f"  workloads with no numerics entry: {s['not_asked']}")


def check_case(case: str, s: dict[str, Any]) -> list[str]:
    fails = []
    expect = CASES[case]
    if not s["phases"]:
        return [f"{case}: no phase was compared"]
    for name, ph in s["phases"].items():
        if expect:
            if ph["verdict"] != "less accurate":
                fails.append(f"{case}: phase {name} reads {ph['verdict']}, expected less accurate")
            top = ph["top"]
            if top is None or top["op"] not in expect:
                compared = sorted({o["op"] for o in ph["ops"]})
                fails.append(
                    f"{case}: phase {name}'s top op is {top and top['op']}, expected one of {list(expect)} "
                    f"(ops compared for it: {compared})"
                )
        elif ph["verdict"] not in ("identical", "same accuracy"):
            fails.append(f"{case}: phase {name} reads {ph['verdict']}, expected identical or same accuracy")
    if not expect:
        for o in s["ops"]:
            if o["verdict"] not in ("identical", "same accuracy", "not compared"):
                fails.append(f"{case}: op {o['name']} reads {o['verdict']}")
    return fails


def model_numerics(home: Path, run_id: str) -> dict[str, Any] | None:
    """`mpsup report --json`'s model_numerics, where this mpsup has the report half (else None)."""
    env = {**os.environ, "MPSUP_HOME": str(home), "COLUMNS": "200"}
    out = subprocess.run(
        [sys.executable, "-m", "mpsup", "report", "--run", run_id, "--json"], env=env, capture_output=True, text=True
    )
    try:
        doc = json.loads(out.stdout)
    except json.JSONDecodeError:
        return None
    return doc.get("model_numerics") if isinstance(doc, dict) else None


def print_report(case: str, mn: dict[str, Any] | None) -> list[str]:
    if mn is None:
        print("  report: no model_numerics in `mpsup report --json` (the report half is not in this mpsup)")
        return []
    fails = []
    expect = CASES.get(case, ())
    for phase, doc in mn.items():
        if not isinstance(doc, dict):
            print(f"  report {phase}: {doc}")
            continue
        top = (doc.get("ops") or [{}])[0]
        print(
            f"  report {phase}: {doc.get('verdict')}; baseline {fmt(doc.get('baseline_error'))}, candidate "
            f"{fmt(doc.get('candidate_error'))}, ratio {fmt(doc.get('error_ratio'), '.1f')}, between "
            f"{fmt(doc.get('between_builds'))}, floor {fmt(doc.get('aa_floor'))}; top op {top.get('op')} "
            f"{top.get('shapes', '')} ratio {fmt(top.get('error_ratio'), '.1f')}; top-1 "
            f"{fmt(doc.get('top1_agreement'), '.1%')}, KL {fmt(doc.get('kl_mean'))}, diverges at "
            f"{doc.get('greedy_diverges_at')}; weights {doc.get('weights')}"
            + (f"; {doc.get('reason')}" if doc.get("reason") else "")
        )
        verdict = str(doc.get("verdict") or "").replace("_", " ")
        if case == "aa" or not expect:
            if verdict not in ("identical", "same accuracy"):
                fails.append(f"{case}: report reads {phase} {verdict}")
        else:
            if verdict != "less accurate":
                fails.append(f"{case}: report reads {phase} {verdict}, expected less accurate")
            if top.get("op") not in expect:
                fails.append(f"{case}: report's top op for {phase} is {top.get('op')}, expected one of {list(expect)}")
    return fails


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cases", default="matmul,softmax,norm,threads", help=f"comma-separated of {', '.join(CASES)}")
    ap.add_argument("--out", type=Path, default=Path("/tmp/mpsup-numerics-candidates"), help="work folder")
    ap.add_argument("--budget", type=float, default=0.3, help="mpsup bench --budget for the cases (default 0.3)")
    ap.add_argument("--tokens", type=int, default=32, help="mpsup bench --tokens (default 32)")
    ap.add_argument("--low", default="bfloat16", help="the lower precision the candidates compute in")
    ap.add_argument("--aa", type=int, default=0, help="also this many A/A runs (`bench --aa`)")
    ap.add_argument("--aa-budget", type=float, default=0.1, help="their --budget (default 0.1)")
    ap.add_argument("--smoke", action="store_true", help="keep bench's smoke tests (default --no-smoke)")
    ap.add_argument("--hidden", type=int, default=LLAMA["hidden_size"], help="the Llama folder's hidden_size")
    ap.add_argument("--intermediate", type=int, default=LLAMA["intermediate_size"], help="its intermediate_size")
    ap.add_argument("--layers", type=int, default=LLAMA["num_hidden_layers"], help="its num_hidden_layers")
    ap.add_argument("--vocab", type=int, default=LLAMA["vocab_size"], help="its vocab_size")
    ap.add_argument("--extra", default="", help="more mpsup bench options, space-separated")
    opts = ap.parse_args()
    sys.stdout.reconfigure(line_buffering=True)
    cases = [c.strip() for c in opts.cases.split(",") if c.strip() and c.strip() != "none"]
    unknown = [c for c in cases if c not in CASES]
    if unknown:
        ap.error(f"--cases: unknown case {unknown[0]!r} (known: {', '.join(CASES)})")
    work = opts.out
    work.mkdir(parents=True, exist_ok=True)
    size = {
        "hidden_size": opts.hidden,
        "intermediate_size": opts.intermediate,
        "num_hidden_layers": opts.layers,
        "vocab_size": opts.vocab,
    }
    model = make_model(work, size)
    base = make_wrapper(work, "baseline", opts.low)
    common = ["bench", "--model", str(model), "--tokens", str(opts.tokens), *opts.extra.split()]
    common += [] if opts.smoke else ["--no-smoke"]
    print(f"# {time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())} load {load()} nproc {os.cpu_count()}")
    print(f"# model {model}: {json.dumps(size)}; rule: candidate rmse > {RULE_MULT:g}x baseline + {RULE_EPS:g} eps32")
    fails: list[str] = []
    results: dict[str, Any] = {}
    for case in cases:
        cand = make_wrapper(work, case, opts.low)
        home = work / f"home-{case}"
        args = [*common, "--budget", str(opts.budget), "--baseline", str(base), "--candidate", str(cand)]
        bench, wall, _ = mpsup(args, home)
        record = record_of(bench, home)
        s = summarise(record)
        print_case(case, s, wall)
        fails += check_case(case, s)
        mn = model_numerics(home, record["id"])
        fails += print_report(case, mn)
        results[case] = {"record": record["id"], "home": str(home), "wall_s": wall, "summary": s, "report": mn}
    if opts.aa:
        counts: dict[str, int] = {}
        worst_ratio = 0.0
        floors: list[float] = []
        for i in range(opts.aa):
            home = work / f"home-aa-{i}"
            bench, wall, _ = mpsup([*common, "--budget", str(opts.aa_budget), "--aa"], home)
            record = record_of(bench, home)
            s = summarise(record)
            items = list(s["phases"].values()) + s["ops"]
            for it in items:
                counts[it["verdict"]] = counts.get(it["verdict"], 0) + 1
                for r in it["rows"]:
                    if r.get("ratio") is not None and math.isfinite(r["ratio"]):
                        worst_ratio = max(worst_ratio, r["ratio"], 1 / r["ratio"] if r["ratio"] else 0)
                    if r.get("floor") is not None:
                        floors.append(r["floor"])
            bad = [f"{it['name']} {it['verdict']}" for it in items if it["verdict"] in BAD]
            mn = model_numerics(home, record["id"])
            rep = {p: d.get("verdict") for p, d in (mn or {}).items() if isinstance(d, dict)}
            fails += [f"A/A {i + 1}: {b}" for b in bad]
            fails += print_report("aa", mn) if mn else []
            print(
                f"## A/A {i + 1}/{opts.aa}: {wall:.0f} s, load {load()}: "
                + ", ".join(f"{it['name'].removeprefix('model/')} {it['verdict']}" for it in s["phases"].values())
                + f"; ops {sum(1 for o in s['ops'] if o['verdict'] == 'identical')}/{len(s['ops'])} identical"
                + (f"; report {rep}" if mn else "")
                + (f"; NOT SAME: {bad}" if bad else "")
            )
            results[f"aa-{i}"] = {"record": record["id"], "wall_s": wall, "summary": s, "report": mn}
        print(
            f"## A/A over {opts.aa} runs (phases and ops): {counts}; largest error ratio either way "
            f"{worst_ratio:.3f}; largest floor {fmt(max(floors) if floors else None)}"
        )
    (work / "results.json").write_text(json.dumps(results, indent=1, default=str))
    print(f"# all figures: {work / 'results.json'}")
    for f in fails:
        print(f"FAIL {f}")
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
