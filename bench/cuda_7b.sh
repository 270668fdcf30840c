#!/bin/bash
# A Llama-2-7B-shaped Q4_K_M fixture (the shape and type mix of bench/large_models.py) on the
# CUDA executor: the device memory each precision takes with its weights resident in their GGUF
# encoding, and `tapdiff check --backend cuda` (engine on the GPU, reference on the CPU).
# About 6 minutes on an H100 machine with 16 cores, most of it generating the 4 GB fixture.
# Writes OUT/cuda-7b.md (default bench/results/cuda); the same lines go to stdout.
#
#   bench/cuda_7b.sh [BUILD_DIR] [OUT]
# TAPDIFF overrides the program's path (a prebuilt copy, as in scripts/gpu-bundle.sh).
set -u
BUILD=${1:-build}
OUT=${2:-bench/results/cuda}
TAPDIFF=${TAPDIFF:-$BUILD/app/tapdiff}
mkdir -p "$OUT"
WORK=$(mktemp -d)
sampler=
trap '[ -n "$sampler" ] && kill $sampler 2>/dev/null; rm -rf "$WORK"' EXIT
export OMP_WAIT_POLICY=active
SECONDS=0
# GNU time gives the peak RSS (KiB) into a file; without it, n/a.
peak_rss=()
[ -x /usr/bin/time ] && peak_rss=(/usr/bin/time -f %M -o "$WORK/rss.txt")
measured() {
  echo n/a >"$WORK/rss.txt"
  local t0=$(date +%s%N)
  "${peak_rss[@]}" "$@"
  local rc=$?
  seconds=$(awk -v t=$(($(date +%s%N) - t0)) 'BEGIN { printf "%.2f", t / 1e9 }')
  rss="$(tail -1 "$WORK/rss.txt") KiB"
  return $rc
}

nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader ||
  { echo "cuda_7b.sh: no GPU (nvidia-smi failed): nothing to measure" >&2; exit 125; }

shape=(--n-layer 32 --n-embd 4096 --n-head 32 --n-head-kv 32 --n-ff 11008 --n-vocab 32000 --n-ctx 4096
       --type Q4_K --tensor-type output.weight=Q6_K)
for l in $(seq 0 31); do
  if [ "$l" -lt 4 ] || [ "$l" -ge 28 ] || [ $(((l - 4) % 3)) -eq 2 ]; then
    shape+=(--tensor-type "blk.$l.attn_v.weight=Q6_K" --tensor-type "blk.$l.ffn_down.weight=Q6_K")
  fi
done
model=$WORK/llama2-7b-q4_k_m.gguf
{
  measured "$TAPDIFF" fixture "${shape[@]}" -o "$model" >/dev/null 2>"$WORK/err.txt" || cat "$WORK/err.txt"
  echo "tapdiff fixture: $seconds s, peak RSS $rss, $(stat -c %s "$model") bytes"
  echo "GPU memory used before any run: $(nvidia-smi --query-gpu=memory.used --format=csv,noheader)"
  tokens=$(for i in $(seq 0 31); do echo $((1 + (7919 * i) % 31000)); done | paste -sd,)
  nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -lms 100 >"$WORK/memory.txt" &
  sampler=$!
  for precision in q8 f32 f16; do
    for n in 1 17; do
      seen=$(wc -l <"$WORK/memory.txt")
      measured "$TAPDIFF" run --backend cuda --precision $precision -m "$model" --tokens "$tokens" -n $n \
        --taps output -o "$WORK/run.h5" >/dev/null 2>"$WORK/err.txt" || cat "$WORK/err.txt"
      peak=$(tail -n +$((seen + 1)) "$WORK/memory.txt" | sort -n | tail -1)
      echo "run --backend cuda --precision $precision, 32 prompt tokens, -n $n: $seconds s, peak RSS $rss, peak GPU memory used $peak MiB"
    done
  done
  kill $sampler
  measured "$TAPDIFF" check -m "$model" --backend cuda --precision q8 --tokens "$(echo "$tokens" | cut -d, -f1-8)" \
    -n 4 >"$WORK/check.txt" 2>&1; rc=$?
  echo "check --backend cuda --precision q8, 8 prompt tokens, -n 4: exit $rc, $seconds s, peak RSS $rss: $(grep -m1 -E '^(PASS|FAIL|DIVERGE)' "$WORK/check.txt")"
} 2>&1 | tee "$OUT/cuda-7b.md"
echo "[${SECONDS}s] done"
