#!/usr/bin/env bash
# Issue 24 on the H200 (one device call): the Llama-3-8B config in bf16 with random weights, run whole by
# mpsup against two real changes (cuBLASLt preferred; CUDA_LAUNCH_BLOCKING=1) and against itself, beside a
# plain transformers timing of the same model in each environment (benchmarks/whole_model.py plain), and
# the Wan 2.2 VAE's decode with its peak memory. Everything lands in $OUT/whole.tgz plus a log.
#   usage (device): bash benchmarks/h200_whole_model.sh [cublaslt|clb|aa|vae ...]
set -u
export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD/src
W=/tmp/w; mkdir -p $W/envs $W/out
export MPSUP_HOME=$W/home
printf '#!/bin/sh\nexport TORCH_BLAS_PREFER_CUBLASLT=1\nexec python3 "$@"\n' > $W/envs/cublaslt
printf '#!/bin/sh\nexport CUDA_LAUNCH_BLOCKING=1\nexec python3 "$@"\n' > $W/envs/clb
chmod +x $W/envs/*
MPSUP="python3 -m mpsup"
python3 benchmarks/whole_model.py make .devout/llama3-8b.json $W/l8b --dtype bf16
for step in "$@"; do
  t0=$(date +%s)
  case $step in
    plain)
      for env in base cublaslt clb; do
        py=python3; [ $env != base ] && py=$W/envs/$env
        $py benchmarks/whole_model.py plain $W/l8b --device cuda --tokens 512 --reps 30 --json $W/out/plain_$env.json
      done ;;
    cublaslt|clb)
      $MPSUP bench --device cuda --model $W/l8b --candidate $W/envs/$step --no-smoke --json > $W/out/bench_$step.json
      $MPSUP report --json > $W/out/report_$step.json; $MPSUP report --format markdown > $W/out/report_$step.md
      cp $(ls -t $MPSUP_HOME/runs/*.json | head -1) $W/out/record_$step.json ;;
    aa)
      $MPSUP bench --device cuda --model $W/l8b --aa --no-smoke --json > $W/out/bench_aa.json
      $MPSUP report --json > $W/out/report_aa.json; $MPSUP report --format markdown > $W/out/report_aa.md
      cp $(ls -t $MPSUP_HOME/runs/*.json | head -1) $W/out/record_aa.json ;;
    vae)
      python3 benchmarks/whole_model.py make-diffusers .devout/wan22-vae.json $W/wanvae --component vae --dtype bf16
      $MPSUP bench --device cuda --model $W/wanvae --resolution 832x480 --only phase --no-smoke --json > $W/out/bench_vae.json
      cp $(ls -t $MPSUP_HOME/runs/*.json | head -1) $W/out/record_vae.json ;;
  esac
  echo "step $step: $(( $(date +%s) - t0 )) s" | tee -a $W/out/steps.txt
done
for f in $W/out/record_*.json; do
  [ -e $W/out/plain_base.json ] || continue
  case $f in *vae*) continue;; esac
  s=$(basename $f .json); s=${s#record_}; c=$W/out/plain_$s.json; [ -e $c ] || c=
  python3 benchmarks/whole_model.py compare $f $W/out/plain_base.json $c | tee $W/out/compare_$s.txt
done
tar czf $OUT/whole.tgz -C $W out
