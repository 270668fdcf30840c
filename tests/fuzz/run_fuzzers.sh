#!/usr/bin/env bash
# Runs every fuzzer for a bounded time: run_fuzzers.sh FUZZ_BUILD SEEDS SECONDS PARALLEL [SEED].
# Without SEED, each target explores from a random seed and grows its corpus in
# FUZZ_BUILD/corpus/TARGET from SEEDS/<input kind>. With SEED (the smoke run in `make test`),
# each starts from SEEDS alone in a fresh FUZZ_BUILD/smoke-corpus/TARGET with that libFuzzer
# seed and address-space randomization off (libFuzzer's compare tracing sees pointer values):
# the inputs tried are a prefix of one fixed sequence, so a machine that runs the smoke for
# longer has already tried every input a slower CI machine reaches. A crash, leak,
# sanitizer report, timeout or out-of-memory input is saved in FUZZ_BUILD/artifacts/ and fails
# the run. Prints executions per target (FUZZ_BUILD/fuzz-summary.txt keeps them).
set -euo pipefail
build=$1
seeds=$2
seconds=$3
parallel=$4
seed=${5:-}
targets=(gguf trace tolerance token_list)

corpus_root="$build/corpus"
fixed_layout=
if [ -n "$seed" ]; then
  corpus_root="$build/smoke-corpus"
  rm -rf "$corpus_root"
  if setarch -R true 2>/dev/null; then
    fixed_layout="setarch -R"
  else
    echo "note: setarch -R is refused here; the smoke run keeps randomized addresses and is not an exact replay" >&2
  fi
fi
mkdir -p "$build/logs" "$build/artifacts"
for t in "${targets[@]}"; do mkdir -p "$corpus_root/$t" "$build/artifacts/$t"; done

run_one() {
  local t=$1
  # -timeout / -rss_limit_mb: one input taking 10 s or 2 GiB is a finding (unbounded work or
  # allocation from a size the input claims).
  $fixed_layout "$build/fuzz_$t" -max_total_time="$seconds" -print_final_stats=1 -timeout=10 \
    -rss_limit_mb=2048 -artifact_prefix="$build/artifacts/$t/" ${seed:+-seed=$seed} \
    "$corpus_root/$t" "$seeds/$t" >"$build/logs/$t.log" 2>&1
}
export -f run_one
export build seeds seconds seed corpus_root fixed_layout

echo "fuzzing ${targets[*]} for ${seconds} s each, $parallel at a time${seed:+, libFuzzer seed $seed}"
status=0
printf '%s\n' "${targets[@]}" | xargs -P "$parallel" -I{} bash -c 'run_one {}' || status=$?

summary="$build/fuzz-summary.txt"
printf '%-12s %12s %8s  %s\n' target executions corpus result >"$summary"
for t in "${targets[@]}"; do
  log="$build/logs/$t.log"
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  corpus=$(find "$corpus_root/$t" -type f | wc -l)
  if grep -q '^==[0-9]*==ERROR\|^SUMMARY: \|deadly signal\|Test unit written' "$log"; then
    result="FAILED: $(grep -m1 'Test unit written' "$log" || echo "see $log")"
  else
    result=ok
  fi
  printf '%-12s %12s %8s  %s\n' "$t" "${execs:-?}" "$corpus" "$result" >>"$summary"
done
cat "$summary"
if [ "$status" -ne 0 ] || grep -q FAILED "$summary"; then
  echo "fuzzing found a problem: reproduce with $build/fuzz_TARGET ARTIFACT; logs in $build/logs" >&2
  exit 1
fi
