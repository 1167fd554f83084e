"""Whole-model checks for `mpsup bench --model`: a model folder from a real config, a plain
transformers timing of the same model (the reference mpsup's phases must agree with), and the comparison.

    python benchmarks/whole_model.py make CONFIG.json DIR [--layers N] [--dtype bf16]
        a Transformers folder: CONFIG (optionally cut to N layers) + a safetensors file whose header names
        every tensor of the model and whose data is a hole (sparse: no disk, no weights read by mpsup)
    python benchmarks/whole_model.py plain DIR --device cuda --tokens 512 [--cache 512] [--reps 30] [--json OUT]
        prefill of P tokens and one decode step on a C-token cache, timed the way a user would time them:
        random weights from the config, torch.inference_mode, synchronize before each clock read, the
        cache cropped back after each decode step. Run it under each environment's interpreter.
    python benchmarks/whole_model.py reference DIR --env base=PY --env cand=PY [--processes 3] [--pin CPU] --out D
        the plain timing as a yardstick that is itself repeatable: PROCESSES fresh processes per environment,
        in ABBA order, so that a host's slow spell or one process's luck lands on both; writes D/plain_NAME.json
        (the median of the process medians per phase, each process's median beside it)
    python benchmarks/whole_model.py compare RECORD.json PLAIN_BASE.json [PLAIN_CAND.json]
        each phase: mpsup's median per environment against the plain one, and the speedups

Nothing here imports mpsup: the reference must not share mpsup's code paths."""

from __future__ import annotations

import argparse
import json
import os
import statistics
import struct
import sys
import time
from pathlib import Path
from typing import Any

DTYPES = {"bf16": ("BF16", "bfloat16", 2), "fp16": ("F16", "float16", 2), "fp32": ("F32", "float32", 4)}


def make(config_path: Path, out: Path, layers: int | None, dtype: str) -> None:
    import torch
    import transformers

    doc = json.loads(config_path.read_text())
    if layers:
        doc["num_hidden_layers"] = layers
    doc["torch_dtype"] = DTYPES[dtype][1]
    cfg = transformers.AutoConfig.for_model(**doc) if "model_type" in doc else None
    if cfg is None:
        raise SystemExit(f"{config_path}: no model_type")
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(cfg)
    out.mkdir(parents=True, exist_ok=True)
    (out / "config.json").write_text(json.dumps(doc, indent=1))
    count, size = _write_sparse(model, dtype, out / "model.safetensors")
    print(f"{out}: {count} tensors, {size / 2**30:.1f} GiB apparent (sparse)")


def _write_sparse(model: Any, dtype: str, path: Path) -> tuple[int, int]:
    """A safetensors file naming every tensor of the (meta) model, its data a hole: (tensors, data bytes)."""
    st_name, _, itemsize = DTYPES[dtype]
    header: dict[str, Any] = {}
    offset = 0
    for name, t in model.state_dict().items():
        n = t.numel() * itemsize
        header[name] = {"dtype": st_name, "shape": list(t.shape), "data_offsets": [offset, offset + n]}
        offset += n
    raw = json.dumps(header).encode()
    raw += b" " * (-len(raw) % 8)
    with open(path, "wb") as fh:
        fh.write(struct.pack("<Q", len(raw)) + raw)
        fh.truncate(8 + len(raw) + offset)
    return len(header), offset


def make_diffusers(config_path: Path, out: Path, component: str, dtype: str) -> None:
    """A Diffusers folder holding one component (its config + a sparse safetensors file of its tensors)."""
    import diffusers
    import torch

    doc = json.loads(config_path.read_text())
    cls = getattr(diffusers, doc["_class_name"])
    with torch.device("meta"):
        model = cls.from_config(doc)
    sub = out / component
    sub.mkdir(parents=True, exist_ok=True)
    (sub / "config.json").write_text(json.dumps(doc, indent=1))
    (out / "model_index.json").write_text(
        json.dumps({"_class_name": "Pipeline", component: ["diffusers", cls.__name__]})
    )
    count, size = _write_sparse(model, dtype, sub / "diffusion_pytorch_model.safetensors")
    print(f"{out}: {component} {cls.__name__}, {count} tensors, {size / 2**30:.2f} GiB apparent (sparse)")


def _sync(device: str) -> None:
    import torch

    if device == "cuda":
        torch.cuda.synchronize()
    elif device == "mps":
        torch.mps.synchronize()


def _time(fn: Any, device: str, reps: int, warmup: int = 3, gap_s: float = 0.0) -> list[float]:
    for _ in range(warmup):
        fn()
    _sync(device)
    out = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        _sync(device)
        out.append(time.perf_counter() - t0)
        if gap_s:
            # Outside the timed span: the device and this process idle as they do in a paired run while the
            # other environment's worker has its turn.
            time.sleep(gap_s)
    return out


def plain(
    folder: Path,
    device: str,
    tokens: int,
    cache: int,
    reps: int,
    dtype: str | None,
    gap_s: float = 0.0,
    phases: tuple[str, ...] = ("prefill", "decode"),
) -> dict[str, Any]:
    import warnings

    import torch
    import transformers

    warnings.simplefilter("ignore")
    doc = json.loads((folder / "config.json").read_text())
    cfg = transformers.AutoConfig.for_model(**doc)
    dt = getattr(torch, DTYPES[dtype][1]) if dtype else getattr(torch, doc.get("torch_dtype", "float32"))
    with torch.device(device):
        try:
            model = transformers.AutoModelForCausalLM.from_config(cfg, dtype=dt)
        except TypeError:
            model = transformers.AutoModelForCausalLM.from_config(cfg, torch_dtype=dt)
    model = model.to(dt).eval()
    keep = {"logits_to_keep": 1}
    g = torch.Generator().manual_seed(0)
    prompt = torch.randint(0, cfg.vocab_size, (1, tokens), generator=g).to(device)
    context = torch.randint(0, cfg.vocab_size, (1, cache), generator=g).to(device)
    one = torch.randint(0, cfg.vocab_size, (1, 1), generator=g).to(device)
    with torch.inference_mode():
        kv = model(input_ids=context, use_cache=True, **keep).past_key_values

    def prefill() -> None:
        with torch.inference_mode():
            model(input_ids=prompt, use_cache=True, **keep)

    def decode() -> None:
        with torch.inference_mode():
            model(input_ids=one, past_key_values=kv, use_cache=True, **keep)
            kv.crop(-1)

    result: dict[str, Any] = {
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "device": device,
        "interpreter": sys.executable,
        "env": {k: v for k, v in os.environ.items() if k in ("TORCH_BLAS_PREFER_CUBLASLT", "CUDA_LAUNCH_BLOCKING")},
        "tokens": tokens,
        "cache": cache,
        "threads": torch.get_num_threads(),
        "gap_s": gap_s,
        "phases": {},
    }
    for name, fn in (("prefill", prefill), ("decode", decode)):
        if name not in phases:
            continue
        samples = _time(fn, device, reps, gap_s=gap_s)
        result["phases"][name] = {"median_s": statistics.median(samples), "samples": samples}
    return result


def reference(
    folder: Path, envs: list[tuple[str, str]], processes: int, pin: str | None, out: Path, plain_args: list[str]
) -> None:
    import subprocess
    import tempfile

    out.mkdir(parents=True, exist_ok=True)
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name, _ in envs}
    for i in range(processes):
        for name, python in envs if i % 2 == 0 else envs[::-1]:
            with tempfile.TemporaryDirectory() as tmp:
                cmd = [python, __file__, "plain", str(folder), *plain_args, "--json", f"{tmp}/p.json"]
                if pin:
                    cmd = ["taskset", "-c", pin, *cmd]
                subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
                runs[name].append(json.loads(Path(f"{tmp}/p.json").read_text()))
            medians = {k: f"{v['median_s'] * 1e3:.2f} ms" for k, v in runs[name][-1]["phases"].items()}
            print(f"process {i + 1} {name}: {medians}", flush=True)
    for name, done in runs.items():
        doc = {k: v for k, v in done[0].items() if k != "phases"}
        doc["processes"] = len(done)
        doc["phases"] = {}
        for phase in done[0]["phases"]:
            per_process = [r["phases"][phase]["median_s"] for r in done]
            doc["phases"][phase] = {
                "median_s": statistics.median(per_process),
                "process_medians_s": per_process,
                "samples": [x for r in done for x in r["phases"][phase]["samples"]],
            }
        (out / f"plain_{name}.json").write_text(json.dumps(doc, indent=1))
        spread = {}
        for k, v in doc["phases"].items():
            lo, hi = min(v["process_medians_s"]), max(v["process_medians_s"])
            spread[k] = f"{v['median_s'] * 1e3:.2f} ms ({lo * 1e3:.2f}-{hi * 1e3:.2f})"
        print(f"{name}: median of {len(done)} process medians (range) {spread}")


def compare(record_path: Path, base_path: Path, cand_path: Path | None) -> None:
    record = json.loads(record_path.read_text())
    base = json.loads(base_path.read_text())["phases"]
    cand = json.loads(cand_path.read_text())["phases"] if cand_path else None
    labels = [e["label"] for e in record["environments"]]
    print(
        f"record {record['id']} ({record['mode']}), plain timings {base_path.name}"
        + (f", {cand_path.name}" if cand_path else "")
    )
    print(f"{'phase':8} {'env':10} {'mpsup':>10} {'95% CI':>21} {'plain':>10} {'diff':>7} inside")
    for w in record["workloads"]:
        phase = w.get("phase")
        if w.get("part") != "phase" or phase not in base:
            continue
        for label, ref in zip(labels, (base, cand or {}), strict=False):
            env = w["envs"].get(label, {})
            if phase not in ref or not env.get("median"):
                continue
            med, lo, hi, p = env["median"], env.get("ci_low"), env.get("ci_high"), ref[phase]["median_s"]
            inside = lo is not None and hi is not None and lo <= p <= hi
            print(
                f"{phase:8} {label:10} {med * 1e3:8.2f}ms {lo * 1e3 if lo else 0:9.2f}-{hi * 1e3 if hi else 0:8.2f}ms "
                f"{p * 1e3:8.2f}ms {100 * (med / p - 1):+6.1f}% {'yes' if inside else 'no'}"
            )
        if cand and phase in cand and w.get("ratios"):
            plain_speedup = base[phase]["median_s"] / cand[phase]["median_s"]
            mpsup_speedup = statistics.median(w["ratios"])
            rounds = len(w["ratios"])
            print(f"{phase:8} speedup: mpsup {mpsup_speedup:.3f}x ({rounds} rounds), plain {plain_speedup:.3f}x")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    m = sub.add_parser("make")
    m.add_argument("config", type=Path)
    m.add_argument("out", type=Path)
    m.add_argument("--layers", type=int)
    m.add_argument("--dtype", default="bf16", choices=DTYPES)
    d = sub.add_parser("make-diffusers")
    d.add_argument("config", type=Path)
    d.add_argument("out", type=Path)
    d.add_argument("--component", default="vae")
    d.add_argument("--dtype", default="bf16", choices=DTYPES)
    p = sub.add_parser("plain")
    p.add_argument("folder", type=Path)
    p.add_argument("--device", default="cpu")
    p.add_argument("--tokens", type=int, default=512)
    p.add_argument("--cache", type=int)
    p.add_argument("--reps", type=int, default=30)
    p.add_argument("--dtype", choices=DTYPES)
    p.add_argument("--json", type=Path)
    p.add_argument("--gap-ms", type=float, default=0.0, help="idle between timed calls, as in a paired run")
    p.add_argument("--phases", default="prefill,decode")
    r = sub.add_parser("reference")
    r.add_argument("folder", type=Path)
    r.add_argument("--env", action="append", required=True, help="NAME=INTERPRETER, in the order of the first round")
    r.add_argument("--processes", type=int, default=3)
    r.add_argument("--pin", help="taskset -c this CPU list for every process")
    r.add_argument("--out", type=Path, required=True)
    r.add_argument("--device", default="cpu")
    r.add_argument("--tokens", type=int, default=512)
    r.add_argument("--reps", type=int, default=30)
    c = sub.add_parser("compare")
    c.add_argument("record", type=Path)
    c.add_argument("base", type=Path)
    c.add_argument("cand", type=Path, nargs="?")
    args = ap.parse_args()
    if args.cmd == "make":
        make(args.config, args.out, args.layers, args.dtype)
    elif args.cmd == "make-diffusers":
        make_diffusers(args.config, args.out, args.component, args.dtype)
    elif args.cmd == "plain":
        res = plain(
            args.folder,
            args.device,
            args.tokens,
            args.cache or args.tokens,
            args.reps,
            args.dtype,
            args.gap_ms / 1e3,
            tuple(args.phases.split(",")),
        )
        text = json.dumps(res, indent=1)
        if args.json:
            args.json.write_text(text)
        for k, v in res["phases"].items():
            s = v["samples"]
            head, tail = statistics.median(s[:10]), statistics.median(s[len(s) // 2 :])
            print(
                f"{k}: {v['median_s'] * 1e3:.2f} ms median of {len(s)} (gap {args.gap_ms:g} ms; "
                f"first 10 {head * 1e3:.2f} ms, second half {tail * 1e3:.2f} ms)"
            )
    elif args.cmd == "reference":
        envs = [tuple(e.split("=", 1)) for e in args.env]
        plain_args = ["--device", args.device, "--tokens", str(args.tokens), "--reps", str(args.reps)]
        reference(args.folder, envs, args.processes, args.pin, args.out, plain_args)
    else:
        compare(args.record, args.base, args.cand)


if __name__ == "__main__":
    main()
