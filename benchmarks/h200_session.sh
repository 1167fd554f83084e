#!/usr/bin/env bash
# Every H200 check of issues 24, 25, 27 and 28, as steps, so that a device call runs the ones it has time
# for. Each step's output lands under $OUT (a log per step and one tarball of records), refreshed after
# every step, so a call cut short still returns what finished.
#   usage (device): bash benchmarks/h200_session.sh STEP [STEP ...]
#   steps: gc main_before main aa_full plain cublaslt clb aa vae decode_gap bisect repro
#     gc           benchmarks/gc_after_smoke.py: one garbage collection before and after the smoke tests
#     main_before  speed.py's main job with the tree to compare with, carried in .prefix/src
#                  (`git archive REV src metal pyproject.toml | tar -x -C .prefix`: 95dcc6e, before the worker
#                  froze after the smoke tests; a0fe2f7, before a single run's second pass fed only what it can narrow)
#     main         speed.py: the README's main job, then the single-environment suite without smoke tests
#     aa_full      the full suite paired A/A (issue 28's H200 figure), record kept for aa_summary.py
#     plain        a plain transformers timing of the Llama-3-8B config, 3 processes per environment in ABBA order
#                  (base and clb; PLAIN_ENVS='--env cublaslt=...' adds more, PROCESSES sets the count)
#     cublaslt|clb the model paired against TORCH_BLAS_PREFER_CUBLASLT=1 / CUDA_LAUNCH_BLOCKING=1
#     aa           the model against itself
#     vae          the Wan 2.2 VAE's decode with its peak memory (RES, default 832x480; FRAMES, default one image)
#     decode_gap   why mpsup's baseline decode sat 24-29% above a plain pinned process: plain back to back,
#                  plain with the device idle between calls as in a paired run, and mpsup's A/A of the decode
#                  phase pinned (auto) and not pinned
#     bisect       mpsup bisect over 8 wrappers, cuBLASLt preferred from the fifth; the repro under both
#     repro        a carried repro script (REPRO, default .devout/repro_linear_2048x2304.py) under the good and
#                  the bad wrapper, three processes each, alternating
# Off the device (a dry run of the script): DEVICE=cpu CONFIG=tiny.json EXTRA='--budget 0.05' ...
set -u
export PYTHONUNBUFFERED=1
DEVICE=${DEVICE:-cuda}
CONFIG=${CONFIG:-.devout/llama3-8b.json}
VAECONFIG=${VAECONFIG:-.devout/wan22-vae.json}
PY=${PY:-python3}
EXTRA=${EXTRA:-}
OUT=${OUT:-/tmp/h200-out}
W=${W:-/tmp/w}
mkdir -p "$W/envs" "$W/out" "$OUT"
if [ -d .whl ] && [ "$DEVICE" = cuda ]; then
  # Into the device's own environment (a throwaway machine), not onto PYTHONPATH: mpsup's worker runs with
  # the measured environment's site-packages only, so diffusers on PYTHONPATH was "not installed" for the
  # VAE step. (A venv made from that interpreter would not do: it is itself a venv, and torch lives there.)
  "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir .whl/*.whl
  export PYTHONPATH=$PWD/src
else
  export PYTHONPATH=$PWD/src${PYTHONPATH:+:$PYTHONPATH}
fi
export MPSUP_HOME=$W/home
wrap() {  # wrap NAME 'export ...': an interpreter wrapper, the one change it makes in its environment
  printf '#!/bin/sh\n%s\nexec %s "$@"\n' "$2" "$(command -v "$PY")" > "$W/envs/$1"
  chmod +x "$W/envs/$1"
}
wrap base ':'
wrap cublaslt 'export TORCH_BLAS_PREFER_CUBLASLT=1'
wrap clb 'export CUDA_LAUNCH_BLOCKING=1'
MPSUP="$PY -m mpsup"
cold() {  # fresh compile caches: each timed run pays what a user's first run pays
  export TORCHINDUCTOR_CACHE_DIR=$(mktemp -d) TRITON_CACHE_DIR=$(mktemp -d)
}
export COLUMNS=${COLUMNS:-150}
latest() { ls -t "$MPSUP_HOME"/runs/*.json | head -1; }
[ -d "$W/l8b" ] || "$PY" benchmarks/whole_model.py make "$CONFIG" "$W/l8b" --dtype bf16
session_start=$(date +%s)
for step in "$@"; do
  t0=$(date +%s)
  if [ -n "${DEADLINE_S:-}" ] && [ $((t0 - session_start)) -gt "$DEADLINE_S" ]; then
    echo "step $step: skipped, past DEADLINE_S=$DEADLINE_S" | tee -a "$W/out/steps.txt"; continue
  fi
  echo "== step $step ($(date -u +%T))"
  case $step in
    gc)
      # Cold caches both times (a user's first run); the second without inductor's compile-worker pool.
      cold; "$PY" benchmarks/gc_after_smoke.py --device "$DEVICE"
      cold; echo "-- TORCHINDUCTOR_COMPILE_THREADS=1"
      TORCHINDUCTOR_COMPILE_THREADS=1 "$PY" benchmarks/gc_after_smoke.py --device "$DEVICE" ;;
    main_before)
      cold; "$PY" benchmarks/speed.py --device "$DEVICE" --runs main --pythonpath "$PWD/.prefix/src" \
        --keep "$W/out/speed_before" --json "$W/out/speed_before.json" ;;
    main)
      cold; "$PY" benchmarks/speed.py --device "$DEVICE" --runs "${MAIN_RUNS:-main,single}" --keep "$W/out/speed_after" \
        --json "$W/out/speed_after.json" ;;
    aa_full)
      $MPSUP bench --device "$DEVICE" --aa --no-smoke $EXTRA --json > "$W/out/bench_aa_full.json"
      cp "$(latest)" "$W/out/record_aa_full.json"
      $MPSUP report > "$W/out/report_aa_full.txt"; grep -i "flag\|verdict\|no measurable\|slower\|faster" "$W/out/report_aa_full.txt" | head -20 ;;
    plain)
      # A yardstick that repeats: PROCESSES fresh processes per environment in ABBA order (one process's
      # samples drifted 21.7 -> 34 ms in blocks on that shared host, and two processes of the same torch
      # took 29.1 and 22.2 ms for one prefill), pinned to one CPU as mpsup pins its workers.
      pin=""; command -v taskset >/dev/null && pin="--pin ${PLAIN_CPU:-15}"
      "$PY" benchmarks/whole_model.py reference "$W/l8b" --env base="$W/envs/base" --env clb="$W/envs/clb" \
        ${PLAIN_ENVS:-} --processes "${PROCESSES:-3}" $pin --out "$W/out" --device "$DEVICE" --tokens 512 --reps 30 ;;
    cublaslt|clb)
      $MPSUP bench --device "$DEVICE" --model "$W/l8b" --candidate "$W/envs/$step" --no-smoke $EXTRA --json > "$W/out/bench_$step.json"
      cp "$(latest)" "$W/out/record_$step.json"
      $MPSUP report --json > "$W/out/report_$step.json"; COLUMNS=120 $MPSUP report | tee "$W/out/report_$step.txt" | head -40 ;;
    aa)
      $MPSUP bench --device "$DEVICE" --model "$W/l8b" --aa --no-smoke $EXTRA --json > "$W/out/bench_aa.json"
      cp "$(latest)" "$W/out/record_aa.json"
      $MPSUP report --json > "$W/out/report_aa.json"; COLUMNS=120 $MPSUP report | tee "$W/out/report_aa.txt" | head -40 ;;
    vae)
      [ -d "$W/wanvae" ] || "$PY" benchmarks/whole_model.py make-diffusers "$VAECONFIG" "$W/wanvae" --component vae --dtype bf16
      $MPSUP bench --device "$DEVICE" --model "$W/wanvae" --resolution "${RES:-832x480}" ${FRAMES:+--frames $FRAMES} --only phase --no-smoke $EXTRA --json > "$W/out/bench_vae.json"
      cp "$(latest)" "$W/out/record_vae.json"; COLUMNS=120 $MPSUP report | tee "$W/out/report_vae.txt" | head -30 ;;
    decode_gap)
      pin=""; command -v taskset >/dev/null && pin="taskset -c ${PLAIN_CPU:-15}"
      for gap in 0 25 0 25; do
        $pin "$W/envs/base" benchmarks/whole_model.py plain "$W/l8b" --device "$DEVICE" --tokens 512 --reps 60 \
          --phases decode --gap-ms $gap --json "$W/out/plain_gap$gap.json"
      done
      for aff in auto none; do
        echo "-- mpsup A/A, decode only, --affinity $aff"
        $MPSUP bench --device "$DEVICE" --model "$W/l8b" --aa --no-smoke --only decode --affinity $aff $EXTRA \
          --json > "$W/out/bench_decode_$aff.json"
        cp "$(latest)" "$W/out/record_decode_$aff.json"
        "$PY" -c "import json,sys; d=json.load(open(sys.argv[1])); print(json.dumps(d.get('model_phases'), indent=1))" \
          "$W/out/bench_decode_$aff.json"
      done ;;
    bisect)
      envs=()
      for i in 1 2 3 4 5 6 7 8; do
        if [ $i -ge 5 ]; then wrap env$i "export TORCH_BLAS_PREFER_CUBLASLT=1  # build $i of 8: the change"
        else wrap env$i ": # build $i of 8"; fi
        envs+=("$W/envs/env$i")
      done
      ONLY=${ONLY:-linear/2048x2304/t1}
      $MPSUP bisect "${envs[@]}" --device "$DEVICE" --only "$ONLY" --fresh $EXTRA > "$W/out/bisect.txt" 2> "$W/out/bisect.err"
      echo "bisect exit $?"; cat "$W/out/bisect.txt"
      $MPSUP report --upstream -o "$W/out/repro.py" && $MPSUP report --upstream -o "$W/out/issue.md"
      for env in env4 env5 env4 env5; do echo "\$ $env repro.py"; "$W/envs/$env" "$W/out/repro.py"; done 2>&1 \
        | grep -v Warning | tee "$W/out/repro_run.txt" ;;
    repro)
      wrap good ': # the good build'; wrap bad 'export TORCH_BLAS_PREFER_CUBLASLT=1  # the bad build'
      for env in good bad good bad good bad; do echo "\$ $env repro.py"; "$W/envs/$env" "${REPRO:-.devout/repro_linear_2048x2304.py}"; done 2>&1 \
        | grep -v Warning | tee "$W/out/repro_pinned.txt" ;;
    *) echo "unknown step $step"; exit 2 ;;
  esac 2>&1 | grep -v "Warning: torch.backends.cuda.preferred_blas_library\|^  warn" | tee "$W/out/step_$step.log"
  echo "step $step: $(( $(date +%s) - t0 )) s" | tee -a "$W/out/steps.txt"
  tar czf "$OUT/session.tgz" -C "$W" out
done
for f in "$W"/out/record_*.json; do
  [ -e "$W/out/plain_base.json" ] || continue
  case $f in *vae*|*aa_full*|*decode_*) continue;; esac
  s=$(basename "$f" .json); s=${s#record_}; c=$W/out/plain_$s.json; [ -e "$c" ] || c=
  "$PY" benchmarks/whole_model.py compare "$f" "$W/out/plain_base.json" $c | tee "$W/out/compare_$s.txt"
done
tar czf "$OUT/session.tgz" -C "$W" out
