#!/usr/bin/env bash
# Wall time of a paired A/A of one slow whole-model phase (the Wan 2.2 VAE's decode, about 2.3 s a call at
# 96x96 on a 2-vCPU CPU) with mpsup before and after a change: the "before" tree's src is BEFORE_SRC
# (e.g. `git worktree add /tmp/before <rev>` then BEFORE_SRC=/tmp/before/src).
#   usage: BEFORE_SRC=/tmp/before/src bash benchmarks/long_sample_discard.sh [RESOLUTION]
# The VAE folder: python benchmarks/whole_model.py make-diffusers \
#   ../shared/data/model-configs/wan2.2-ti2v-5b-vae__AutoencoderKLWan_z48__nvidia_Cosmos3-Edge__vae_config.json \
#   /tmp/wanvae --component vae --dtype fp32
set -eu
RES=${1:-96}
VAE=${VAE:-/tmp/wanvae}
here=$(cd "$(dirname "$0")/.." && pwd)
for side in before after; do
  if [ "$side" = before ]; then src=$BEFORE_SRC; else src=$here/src; fi
  export MPSUP_HOME=$(mktemp -d) PYTHONPATH=$src
  t0=$(date +%s.%N)
  python -m mpsup bench --device cpu --aa --model "$VAE" --resolution "$RES" --only 'model/vae/vae_decode' \
    --no-smoke --json > /dev/null 2>&1
  t1=$(date +%s.%N)
  python -m mpsup report --json | python -c "
import json, sys
d = json.load(sys.stdin)
w = next(x for x in d['workloads'] if x['name'].endswith('vae_decode'))
p = d['model_phases']['vae_decode']
print(f\"$side: wall {float('$t1') - float('$t0'):.1f} s, {w['rounds']} rounds, baseline {p['baseline_s']:.3f} s a call, \"
      f\"A/A {p['speedup']:.3f}x ({p['low']:.3f}-{p['high']:.3f}), {p['change']}\")"
done
