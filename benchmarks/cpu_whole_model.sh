#!/usr/bin/env bash
# Issue 24 on a CPU: a 4-layer Llama-shaped fp32 model (hidden 1024, vocab 32000) run whole by mpsup, paired
# against the same torch on 1 thread (an interpreter wrapper), beside a plain transformers timing of the same
# model under each interpreter (benchmarks/whole_model.py plain). Writes docs/figures/cpu_whole_model.txt.
#   usage: bash benchmarks/cpu_whole_model.sh [WORKDIR]
set -eu
W=${1:-/tmp/mpsup-cpu-whole}
PY=${PYTHON:-$(command -v python)}
mkdir -p "$W/envs"
printf '#!/bin/sh\nexport OMP_NUM_THREADS=1 MKL_NUM_THREADS=1\nexec %s "$@"\n' "$PY" > "$W/envs/one-thread"
chmod +x "$W/envs/one-thread"
cat > "$W/llama.json" <<'JSON'
{"model_type": "llama", "architectures": ["LlamaForCausalLM"], "hidden_size": 1024, "intermediate_size": 2816,
 "num_hidden_layers": 4, "num_attention_heads": 16, "num_key_value_heads": 16, "vocab_size": 32000,
 "max_position_embeddings": 2048, "tie_word_embeddings": false}
JSON
"$PY" benchmarks/whole_model.py make "$W/llama.json" "$W/llama4" --dtype fp32
out=docs/figures/cpu_whole_model.txt
{
  echo "# $(date -u +%FT%TZ) $(uname -m), $(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg)"
  # One process's plain decode moved between 21.7 and 27.3 ms from one process to the next here: the yardstick
  # is the median of PROCESSES fresh processes per interpreter, in ABBA order (whole_model.py reference).
  echo "## plain transformers timing (${PROCESSES:-3} processes per interpreter in ABBA order, 30 calls each)"
  "$PY" benchmarks/whole_model.py reference "$W/llama4" --env "base=$PY" --env "cand=$W/envs/one-thread" \
    --processes "${PROCESSES:-3}" --out "$W" --tokens 128 --reps 30
  echo "## mpsup bench --model (paired against the 1-thread interpreter, default budget)"
  start=$(date +%s)
  MPSUP_HOME="$W/home" "$PY" -m mpsup bench --model "$W/llama4" --tokens 1,128 --candidate "$W/envs/one-thread" \
    --no-smoke --only 'phase,*/t1,*/t128' --json > "$W/bench.json"
  echo "paired run: $(( $(date +%s) - start )) s"
  rec=$(ls -t "$W"/home/runs/*.json | head -1)
  "$PY" benchmarks/whole_model.py compare "$rec" "$W/plain_base.json" "$W/plain_cand.json"
  echo "## mpsup report"
  MPSUP_HOME="$W/home" COLUMNS=120 "$PY" -m mpsup report | grep -v "^model/\|^workload"
  echo "# load after: $(cut -d' ' -f1-3 /proc/loadavg)"
} 2>&1 | grep -v "Warning\|warn(" | tee "$out"
