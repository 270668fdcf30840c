#!/bin/bash
# The CUDA executor on a machine with a GPU, in one go: test_engine_cuda (the CUDA executor
# against the host executor, the fault table included), `tapdiff selftest --backend cuda`,
# `tapdiff check --backend cuda` at every precision, and bench_engine on both executors.
# Writes its figures to OUT (default bench/results/cuda); the summary goes to stdout.
#
#   bench/cuda_device.sh [BUILD_DIR] [OUT]
# TAPDIFF, TEST_ENGINE_CUDA and BENCH_ENGINE override the programs' paths (a prebuilt copy).
set -u
BUILD=${1:-build}
OUT=${2:-bench/results/cuda}
TAPDIFF=${TAPDIFF:-$BUILD/app/tapdiff}
TEST_ENGINE_CUDA=${TEST_ENGINE_CUDA:-$BUILD/tests/engine/test_engine_cuda}
BENCH_ENGINE=${BENCH_ENGINE:-$BUILD/bench/bench_engine}
THREADS=$(nproc)
mkdir -p "$OUT"
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
export OMP_WAIT_POLICY=active
SECONDS=0
step() { echo "[${SECONDS}s] $*"; }

nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null ||
  { echo "cuda_device.sh: no GPU (nvidia-smi failed): nothing to measure" >&2; exit 125; }

step "test_engine_cuda"
"$TEST_ENGINE_CUDA" --gtest_output=xml:"$OUT/test_engine_cuda.xml" >"$OUT/test_engine_cuda.log" 2>&1
echo "exit $?: $(grep -E '^\[  (PASSED|FAILED|SKIPPED) +\] [0-9]+ test' "$OUT/test_engine_cuda.log" | tr '\n' ' ')"
grep -E "^\[  FAILED  \] Cuda" "$OUT/test_engine_cuda.log" | sort -u

step "selftest --backend cuda"
"$TAPDIFF" selftest --backend cuda --work-dir "$WORK/selftest" >"$OUT/selftest_cuda.md" 2>&1
echo "exit $?: $(grep '^selftest:' "$OUT/selftest_cuda.md")"

step "check --backend cuda: engine against the reference"
"$TAPDIFF" fixture --n-layer 30 --n-embd 576 --n-head 9 --n-head-kv 3 --n-ff 1536 --n-vocab 49152 \
  --tied --type Q8_0 -o "$WORK/smollm2-shape-q8_0.gguf" >/dev/null
for precision in f32 f16 bf16 q8; do
  "$TAPDIFF" check -m "$WORK/smollm2-shape-q8_0.gguf" --backend cuda --precision $precision \
    --tokens 1,7920,15839,23758,679,8598,16517,24436 -n 32 >"$WORK/check.txt" 2>&1
  echo "$precision: exit $? $(grep -m1 -E '^(PASS|FAIL|DIVERGE)' "$WORK/check.txt")"
done

for run in "cuda F32" "cuda Q8_0" "host F32" "host Q8_0"; do
  set -- $run
  step "bench_engine --backend $1 --type $2"
  if "$BENCH_ENGINE" --backend "$1" --type "$2" --threads "$THREADS" --reps 3 --out "$OUT/engine-$1-$2.md" \
    >/dev/null 2>"$WORK/err.txt"; then grep -E "^\| (f32|f16|q8) " "$OUT/engine-$1-$2.md"; else cat "$WORK/err.txt"; fi
done
step "a Llama-3.2-1B-shaped Q4_K fixture: 64 decode steps (a 65-token run less a 1-token run)"
"$TAPDIFF" fixture --arch llama3 --n-layer 16 --n-embd 2048 --n-head 32 --n-head-kv 8 --n-ff 8192 --n-vocab 128256 \
  --tied --type Q4_K -o "$WORK/1b-q4_k.gguf" >/dev/null
{
  echo "| executor | precision | 1 token s | 65 tokens s | decode tok/s |"
  echo "|---|---|---|---|---|"
  for run in "cuda f32" "cuda q8" "host f32" "host q8"; do
    set -- $run
    for n in 1 65; do
      t0=$(date +%s%N)
      "$TAPDIFF" run --backend "$1" --precision "$2" -m "$WORK/1b-q4_k.gguf" --tokens 1 -n $n --taps output \
        -o "$WORK/run.h5" >/dev/null 2>"$WORK/err.txt" || cat "$WORK/err.txt" >&2
      eval "ns$n=$(($(date +%s%N) - t0))"
    done
    awk -v e="$1" -v p="$2" -v a="$ns1" -v b="$ns65" \
      'BEGIN { printf "| %s | %s | %.2f | %.2f | %.1f |\n", e, p, a / 1e9, b / 1e9, 64 / ((b - a) / 1e9) }'
  done
} | tee "$OUT/decode-1b-q4_k.md"
step "done"
