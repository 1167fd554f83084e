"""A CLI campaign over `mpsup report` and `report --upstream`: hostile phase fields and hostile record text.

Every bad phase field of tests/test_upstream_hostile.py (exit 2, one line naming the field) and every hostile
string (exit 0, the repro script compiles) in every format, each in a fresh process, counting tracebacks.
With --bench it first runs a real A/A bench of a tiny Diffusers pipeline whose VAE folder is named
`vae --> @pytorch-bot #1 <img src=x onerror=alert(1)>`, makes its vae_decode 2x slower in the record, and
checks the `report --upstream` body the way the tests do (rendered, nothing live).

    python -m tests.fuzz.hostile_upstream [--bench] [--limit N]    (from the repository root, in its venv)

Prints the runs, tracebacks, exit codes and each unexpected outcome; exit 1 when anything was unexpected.
--limit N takes only the first N bad fields and N hostile strings (tests/fuzz/test_hostile_upstream.py
runs it so).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from tests.test_upstream_hostile import BAD_PHASE, HOSTILE, _assert_inert, _hostile_record, _phase_record
from tests.tiny_models import VAE

FORMATS = [["--format", f] for f in ("terminal", "markdown", "json", "html")] + [
    ["--upstream"],
    ["--upstream", "--with-paths"],
]


class Campaign:
    def __init__(self, work: Path) -> None:
        self.env = {**os.environ, "MPSUP_HOME": str(work / "home")}
        self.runs = self.tracebacks = 0
        self.codes: dict[int, int] = {}
        self.unexpected: list[str] = []

    def mpsup(self, *args: str, want: set[int]) -> subprocess.CompletedProcess[str]:
        res = subprocess.run(
            [sys.executable, "-m", "mpsup", *args], capture_output=True, text=True, env=self.env, timeout=600
        )
        self.runs += 1
        self.codes[res.returncode] = self.codes.get(res.returncode, 0) + 1
        if "Traceback" in res.stderr:
            self.tracebacks += 1
            self.unexpected.append(f"traceback: {args}: {res.stderr[-300:]}")
        elif res.returncode not in want:
            self.unexpected.append(f"exit {res.returncode}: {args}: {res.stderr[-300:]}")
        return res


def bench_case(c: Campaign, work: Path) -> None:
    import diffusers

    name = "vae --> @pytorch-bot #1 <img src=x onerror=alert(1)>"
    pipe = work / "pipe"
    diffusers.AutoencoderKL.from_config(VAE).save_pretrained(pipe / name)
    index = {"_class_name": "StableDiffusionPipeline", name: ["diffusers", "AutoencoderKL"]}
    (pipe / "model_index.json").write_text(json.dumps(index))
    args = ("--model", str(pipe), "--aa", "--no-smoke", "--device", "cpu", "--only", "model/*/vae_*")
    c.mpsup("bench", *args, "--resolution", "64", "--budget", "0.05", want={0})
    rec = json.loads(next((work / "home" / "runs").glob("*.json")).read_text())
    w = next(w for w in rec["workloads"] if w.get("phase") == "vae_decode")
    other = next(label for label in w["envs"] if label != "baseline")
    w["ratios"] = [r * 0.5 for r in w["ratios"]]
    w["envs"][other]["samples"] = [s * 2 for s in w["envs"][other]["samples"]]
    rec["mode"] = "paired"  # an A/A run is never reported upstream: its second side made 2x slower
    slow = work / "slow.json"
    slow.write_text(json.dumps(rec))
    body = c.mpsup("report", "--upstream", str(slow), want={0}).stdout
    _assert_inert(body)
    print("bench -> report --upstream, first line:", body.splitlines()[0])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bench", action="store_true", help="also bench a tiny Diffusers VAE with a hostile folder name")
    ap.add_argument("--limit", type=int, help="only the first N bad phase fields and N hostile strings")
    opts = ap.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="mpsup-hostile-upstream-"))
    c = Campaign(work)
    if opts.bench:
        bench_case(c, work)
    for i, (case, (mutate, where)) in enumerate(sorted(BAD_PHASE.items())[: opts.limit]):
        rec = _phase_record()
        mutate(rec)
        path = work / f"phase{i}.json"
        path.write_text(json.dumps(rec))
        for fmt in FORMATS:
            res = c.mpsup("report", str(path), *fmt, want={2})
            if where not in res.stderr or len(res.stderr.strip().splitlines()) != 1:
                c.unexpected.append(f"{case} {fmt}: not one line naming {where}: {res.stderr[-300:]}")
    for i, text in enumerate(HOSTILE[: opts.limit]):
        path = work / f"text{i}.json"
        path.write_text(json.dumps(_hostile_record(text)))
        script = work / f"repro{i}.py"
        for fmt in [*FORMATS, ["--upstream", "-o", str(script)], ["--upstream", "--json"]]:
            c.mpsup("report", str(path), *fmt, want={0})
        compile(script.read_text(), str(script), "exec")
    print(f"{c.runs} runs, {c.tracebacks} tracebacks, exit codes {c.codes}, {len(c.unexpected)} unexpected")
    for line in c.unexpected[:20]:
        print(" ", line)
    return 1 if c.unexpected else 0


if __name__ == "__main__":
    sys.exit(main())
