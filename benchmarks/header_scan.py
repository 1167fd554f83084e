"""Header-only scan vs safetensors.safe_open tensor reads, on a sparse checkpoint of real size.

Builds a sharded Llama-3-70B-shaped checkpoint (80 layers, bf16, ~141 GB) as headers plus holes, so it
takes no disk space, then measures in fresh processes (so peak RSS is each method's own):
  1. mpsup's header reader over all shards;
  2. safe_open + get_tensor for every tensor (what loading the weights costs).

    python benchmarks/header_scan.py [--layers 80] [--dir /tmp/sparse70b] [--skip-safe-open]

Prints the checkpoint's apparent size, then each method's tensor count, bytes described or read, time and
peak RSS, and how the two compare. The shards are sparse files: they take no disk, but the safe_open pass
reads every tensor (~141 GB of zeros at the default size); --skip-safe-open leaves it out.
"""

from __future__ import annotations

import argparse
import json
import struct
import subprocess
import sys
import time
from pathlib import Path

SRC = Path(__file__).resolve().parent.parent / "src"


def build(folder: Path, layers: int, shards: int = 30) -> Path:
    hidden, inter, kv, vocab = 8192, 28672, 1024, 128256
    names: list[tuple[str, tuple[int, int]]] = [("model.embed_tokens.weight", (vocab, hidden))]
    for i in range(layers):
        p = f"model.layers.{i}."
        names += [
            (p + "self_attn.q_proj.weight", (hidden, hidden)),
            (p + "self_attn.k_proj.weight", (kv, hidden)),
            (p + "self_attn.v_proj.weight", (kv, hidden)),
            (p + "self_attn.o_proj.weight", (hidden, hidden)),
            (p + "mlp.gate_proj.weight", (inter, hidden)),
            (p + "mlp.up_proj.weight", (inter, hidden)),
            (p + "mlp.down_proj.weight", (hidden, inter)),
        ]
    names.append(("lm_head.weight", (vocab, hidden)))
    folder.mkdir(parents=True, exist_ok=True)
    per = -(-len(names) // shards)
    weight_map = {}
    for s in range(shards):
        chunk = names[s * per : (s + 1) * per]
        if not chunk:
            break
        fname = f"model-{s + 1:05d}-of-{shards:05d}.safetensors"
        header, off = {}, 0
        for name, shape in chunk:
            n = shape[0] * shape[1] * 2
            header[name] = {"dtype": "BF16", "shape": list(shape), "data_offsets": [off, off + n]}
            off += n
            weight_map[name] = fname
        raw = json.dumps(header).encode()
        with (folder / fname).open("wb") as fh:
            fh.write(struct.pack("<Q", len(raw)) + raw)
            fh.truncate(8 + len(raw) + off)
    index = folder / "model.safetensors.index.json"
    index.write_text(json.dumps({"weight_map": weight_map}))
    return index


HEADER_SCAN = """
import resource, sys, time
sys.path.insert(0, sys.argv[2])
from pathlib import Path
t0 = time.perf_counter()
from mpsup.model.load import load_model
m = load_model(Path(sys.argv[1]))
dt = time.perf_counter() - t0
print(len(m.tensors), sum(t.nbytes for t in m.tensors.values()), dt, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)
"""

SAFE_OPEN = """
import json, resource, sys, time
from pathlib import Path
from safetensors import safe_open
index = Path(sys.argv[1])
wm = json.loads(index.read_text())["weight_map"]
t0 = time.perf_counter(); n = 0; total = 0
for shard in sorted(set(wm.values())):
    with safe_open(str(index.parent / shard), framework="pt") as f:
        for k in f.keys():
            t = f.get_tensor(k); total += t.numel() * t.element_size(); n += 1; del t
dt = time.perf_counter() - t0
print(n, total, dt, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)
"""


def run(code: str, *args: str) -> tuple[int, int, float, float]:
    out = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, check=True).stdout.split()
    return int(out[0]), int(out[1]), float(out[2]), int(out[3]) / 1024  # MiB (Linux ru_maxrss is KiB)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--layers", type=int, default=80, help="transformer layers of the checkpoint (default 80)")
    ap.add_argument(
        "--dir", type=Path, default=Path("/tmp/mpsup-sparse70b"), help="where the sparse shards are written"
    )
    ap.add_argument("--skip-safe-open", action="store_true", help="time only mpsup's header scan")
    args = ap.parse_args(argv)
    index = build(args.dir, args.layers)
    size = sum(p.stat().st_size for p in args.dir.glob("*.safetensors"))
    print(f"checkpoint: {size / 1e9:.1f} GB apparent, {len(list(args.dir.glob('*.safetensors')))} shards")
    n, total, dt, rss = run(HEADER_SCAN, str(index), str(SRC))
    print(
        f"mpsup header scan: {n} tensors, {total / 1e9:.1f} GB described, {dt * 1e3:.1f} ms, peak RSS {rss:.0f} MiB "
        "(the whole process, Python and imports included)"
    )
    if not args.skip_safe_open:
        t0 = time.perf_counter()
        n2, total2, dt2, rss2 = run(SAFE_OPEN, str(index))
        print(
            f"safe_open + get_tensor: {n2} tensors, {total2 / 1e9:.1f} GB read, {dt2:.1f} s, peak RSS {rss2:.0f} MiB "
            f"(wall {time.perf_counter() - t0:.1f} s)"
        )
        print(f"ratio: header scan is {dt2 / dt:,.0f}x faster and peaks at {rss / rss2:.2f}x the memory")


if __name__ == "__main__":
    main()
