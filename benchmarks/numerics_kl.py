"""An independent cross-check of "same answers?": a tiny Llama trained here, two builds, top-1 agreement and KL.

Imports no mpsup code. It trains a tiny transformers LlamaForCausalLM (byte-level: vocab 256) on text at hand
(this repository's docs/**/*.md) on the CPU for --minutes, until its logits are not flat (it prints the held-out
loss before and after, against ln 256 = 5.55 for flat logits), and saves it as a folder (config.json +
model.safetensors) at --save, outside the repository, so that `mpsup bench --model FOLDER --real-weights
--candidate ...` can run against it.

Then each build runs as a subprocess of its own interpreter (this script with --child): the baseline (this
interpreter), the baseline again (an identical build: must give 100% and KL 0), and candidates behind a wrapper
whose startup hook (benchmarks/numerics_hook/sitecustomize.py) changes an op class through torch.library: matmul
(mm/addmm in bfloat16: less accurate) and threads (one CPU thread: speed only). Each build computes, in float32,
the full logits over a held-out prompt and a greedy generation of --new tokens; the parent compares them in
float64: top-1 agreement over the prompt's positions, mean KL(baseline || build), the first generated token where
the greedy generations differ, and each build's RMSE against the same model run in float64 (relative to its RMS).

    python benchmarks/numerics_kl.py --help
    python benchmarks/numerics_kl.py --minutes 4 --save /work/tinyllama

Exits 1 when the identical build is not 100% / 0 / never diverging, or the matmul build reads no difference."""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
HOOK = Path(__file__).resolve().parent / "numerics_hook"
CONFIG = {
    "model_type": "llama",
    "architectures": ["LlamaForCausalLM"],
    "vocab_size": 256,
    "hidden_size": 128,
    "intermediate_size": 352,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "max_position_embeddings": 512,
    "tie_word_embeddings": False,
    "bos_token_id": None,
    "eos_token_id": None,
    "pad_token_id": None,
}


def load() -> str:
    try:
        return " ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        return "?"


def corpus() -> bytes:
    files = [*sorted((ROOT / "docs").rglob("*.md")), ROOT / "README.md"]
    return b"\n\n".join(p.read_bytes() for p in files if p.is_file())


def split(text: bytes) -> tuple[bytes, bytes]:
    cut = int(len(text) * 0.95)
    return text[:cut], text[cut:]


def train(save: Path, minutes: float, seq: int, batch: int, lr: float, seed: int, threads: int) -> dict[str, Any]:
    import torch
    import transformers

    torch.manual_seed(seed)
    torch.set_num_threads(threads)  # a shared small machine: one thread does not spin against the others
    text_train, text_held = split(corpus())
    data = torch.tensor(list(text_train), dtype=torch.long)
    held = torch.tensor(list(text_held), dtype=torch.long)
    config = transformers.LlamaConfig(**{k: v for k, v in CONFIG.items() if k not in ("model_type", "architectures")})
    model = transformers.LlamaForCausalLM(config)
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.01)

    def held_loss() -> tuple[float, float]:
        model.eval()
        with torch.no_grad():
            n = (held.numel() - 1) // seq
            x = held[: n * seq].view(n, seq)[:16]
            y = held[1 : n * seq + 1].view(n, seq)[:16]
            logits = model(input_ids=x).logits
            loss = torch.nn.functional.cross_entropy(logits.reshape(-1, 256), y.reshape(-1))
            p = logits.softmax(-1)
            entropy = float(-(p * p.clamp_min(1e-30).log()).sum(-1).mean())
        model.train()
        return float(loss), entropy

    before, entropy_before = held_loss()
    t0 = time.perf_counter()
    step = 0
    model.train()
    while time.perf_counter() - t0 < minutes * 60:
        starts = torch.randint(0, data.numel() - seq - 1, (batch,))
        x = torch.stack([data[s : s + seq] for s in starts])
        y = torch.stack([data[s + 1 : s + seq + 1] for s in starts])
        loss = model(input_ids=x, labels=y).loss
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        step += 1
        if step % 50 == 0:
            print(f"  step {step}: train loss {loss.item():.3f} ({time.perf_counter() - t0:.0f} s)", flush=True)
    after, entropy_after = held_loss()
    model.eval()
    save.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(save, safe_serialization=True)
    doc = {
        "steps": step,
        "seconds": time.perf_counter() - t0,
        "held_loss_before": before,
        "held_loss_after": after,
        "entropy_before": entropy_before,
        "entropy_after": entropy_after,
        "flat": math.log(256),
        "train_bytes": len(text_train),
        "torch": str(torch.__version__),
        "transformers": transformers.__version__,
    }
    (save / "training.json").write_text(json.dumps(doc, indent=1))
    return doc


def child(folder: Path, prompt: list[int], new: int, out: Path, dtype: str) -> None:
    """One build's answers: the prompt's full logits and a greedy generation (no KV cache: each step whole)."""
    import torch
    import transformers

    dt = getattr(torch, dtype)
    model = transformers.LlamaForCausalLM.from_pretrained(folder, dtype=dt).eval()
    ids = torch.tensor([prompt], dtype=torch.long)
    with torch.inference_mode():
        logits = model(input_ids=ids).logits[0]
        seq = ids
        for _ in range(new):
            nxt = model(input_ids=seq).logits[0, -1].argmax()
            seq = torch.cat([seq, nxt.view(1, 1)], dim=1)
    torch.save(
        {
            "logits": logits.clone(),
            "generated": seq[0, len(prompt) :].tolist(),
            "torch": str(torch.__version__),
            "threads": torch.get_num_threads(),
        },
        out,
    )


def wrapper(work: Path, case: str) -> Path:
    path = work / f"env-{case}"
    lines = ["#!/bin/sh"]
    if case not in ("baseline", "identical"):
        lines += [
            f"export PYTHONPATH={HOOK}${{PYTHONPATH:+:$PYTHONPATH}}",
            f"export MPSUP_NUM_CASE={case}",
            "export MPSUP_NUM_LOW=bfloat16",
        ]
    lines.append(f'exec "{sys.executable}" "$@"')
    path.write_text("\n".join(lines) + "\n")
    path.chmod(0o755)
    return path


def answers(python: Path, folder: Path, prompt: list[int], new: int, work: Path, tag: str, dtype: str) -> Any:
    import torch

    out = work / f"{tag}.pt"
    (work / "prompt.json").write_text(json.dumps(prompt))
    cmd = [str(python), __file__, "--child", str(folder), "--prompt-file", str(work / "prompt.json")]
    cmd += ["--new", str(new), "--child-out", str(out), "--dtype", dtype]
    res = subprocess.run(cmd, capture_output=True, text=True)
    if res.returncode:
        sys.exit(f"build {tag} failed: {res.stderr[-2000:]}")
    return torch.load(out)


def compare(base: Any, other: Any, truth: Any) -> dict[str, Any]:
    import torch

    b, o, t = base["logits"].double(), other["logits"].double(), truth["logits"].double()
    lb, lo = b.log_softmax(-1), o.log_softmax(-1)
    kl = (lb.exp() * (lb - lo)).sum(-1)
    top1 = float((b.argmax(-1) == o.argmax(-1)).double().mean())
    gb, go = base["generated"], other["generated"]
    diverge = next((i for i, (x, y) in enumerate(zip(gb, go, strict=False)) if x != y), None)
    scale = float(t.pow(2).mean().sqrt())
    return {
        "top1": top1,
        "kl_mean": float(kl.mean()),
        "kl_max": float(kl.max()),
        "diverges_at": diverge,
        "identical_logits": bool(torch.equal(base["logits"], other["logits"])),
        "rmse_vs_fp64": float((o - t).pow(2).mean().sqrt()) / scale,
        "threads": other.get("threads"),
        "text": bytes(go).decode("utf-8", "replace"),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--save", type=Path, default=Path("/work/tinyllama"), help="the trained folder (not the repo)")
    ap.add_argument("--minutes", type=float, default=3.0, help="training time (default 3)")
    ap.add_argument("--retrain", action="store_true", help="train again even where --save holds a model")
    ap.add_argument("--seq", type=int, default=128, help="training sequence length")
    ap.add_argument("--batch", type=int, default=16, help="training batch")
    ap.add_argument("--lr", type=float, default=3e-3, help="AdamW learning rate")
    ap.add_argument("--seed", type=int, default=0, help="training seed")
    ap.add_argument("--threads", type=int, default=1, help="training threads (default 1)")
    ap.add_argument("--prompt-len", type=int, default=128, help="held-out prompt length in bytes (default 128)")
    ap.add_argument("--new", type=int, default=32, help="greedy tokens (default 32)")
    ap.add_argument("--cases", default="identical,matmul,threads", help="builds beside the baseline")
    ap.add_argument("--child", type=Path, help=argparse.SUPPRESS)
    ap.add_argument("--prompt-file", type=Path, help=argparse.SUPPRESS)
    ap.add_argument("--child-out", type=Path, help=argparse.SUPPRESS)
    ap.add_argument("--dtype", default="float32", help=argparse.SUPPRESS)
    opts = ap.parse_args()
    if opts.child:
        child(opts.child, json.loads(opts.prompt_file.read_text()), opts.new, opts.child_out, opts.dtype)
        return 0
    if ROOT in opts.save.resolve().parents or opts.save.resolve() == ROOT:
        ap.error("--save: outside the repository")
    print(f"# {time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())} load {load()} nproc {os.cpu_count()}", flush=True)
    if opts.retrain or not (opts.save / "model.safetensors").is_file():
        doc = train(opts.save, opts.minutes, opts.seq, opts.batch, opts.lr, opts.seed, opts.threads)
    else:
        doc = json.loads((opts.save / "training.json").read_text())
        print(f"# reusing {opts.save} (--retrain to train again)")
    print(
        f"trained {doc['steps']} steps in {doc['seconds']:.0f} s (torch {doc['torch']}): held-out loss "
        f"{doc['held_loss_before']:.3f} -> {doc['held_loss_after']:.3f} nats (flat: {doc['flat']:.3f}); predictive "
        f"entropy {doc['entropy_before']:.3f} -> {doc['entropy_after']:.3f}; load {load()}"
    )
    print(f"saved: {opts.save} (config.json + model.safetensors)")
    _, held = split(corpus())
    prompt = list(held[: opts.prompt_len])
    fails = []
    with tempfile.TemporaryDirectory(prefix="numerics-kl-") as tmp:
        work = Path(tmp)
        base = answers(wrapper(work, "baseline"), opts.save, prompt, opts.new, work, "baseline", "float32")
        truth = answers(wrapper(work, "baseline"), opts.save, prompt, opts.new, work, "float64", "float64")
        rows = {"baseline": compare(base, base, truth)}
        for case in [c.strip() for c in opts.cases.split(",") if c.strip()]:
            got = answers(wrapper(work, case), opts.save, prompt, opts.new, work, case, "float32")
            rows[case] = compare(base, got, truth)
        rows["float64"] = compare(base, truth, truth)
    print(f"prompt: {len(prompt)} held-out bytes; greedy {opts.new} tokens; load {load()}")
    head = f"{'build':<10} {'top-1':>7} {'KL mean':>10} {'KL max':>10} {'diverges':>8} {'rmse/fp64':>10} {'threads':>7}"
    print(head + "  generated")
    for name, r in rows.items():
        div = "never" if r["diverges_at"] is None else str(r["diverges_at"])
        print(
            f"{name:<10} {r['top1']:7.2%} {r['kl_mean']:10.2e} {r['kl_max']:10.2e} {div:>8} {r['rmse_vs_fp64']:10.2e}"
            f" {r['threads']!s:>7}  {r['text']!r}"
        )
    ident = rows.get("identical")
    if ident and not (ident["top1"] == 1.0 and ident["kl_mean"] == 0.0 and ident["diverges_at"] is None):
        fails.append("the identical build is not 100% / KL 0 / never diverging")
    mm = rows.get("matmul")
    if mm and (mm["kl_mean"] <= 0.0 or mm["rmse_vs_fp64"] <= 2 * rows["baseline"]["rmse_vs_fp64"]):
        fails.append("the bf16-matmul build reads no less accurate than the baseline")
    if doc["held_loss_after"] > doc["flat"] - 1.0:
        fails.append(f"the model did not learn (held-out loss {doc['held_loss_after']:.2f} nats)")
    for f in fails:
        print(f"FAIL {f}")
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
