#!/usr/bin/env bash
# Runs every fuzzer for a bounded time: run_fuzzers.sh FUZZ_BUILD SEEDS SECONDS PARALLEL.
# Each target grows its corpus in FUZZ_BUILD/corpus/TARGET from SEEDS/<input kind>; a crash,
# leak, sanitizer report, timeout or out-of-memory input is saved in FUZZ_BUILD/artifacts/
# and fails the run. Prints executions per target (FUZZ_BUILD/fuzz-summary.txt keeps them).
set -euo pipefail
build=$1
seeds=$2
seconds=$3
parallel=$4
targets=(gguf trace tolerance token_list)

mkdir -p "$build/logs" "$build/artifacts"
for t in "${targets[@]}"; do mkdir -p "$build/corpus/$t" "$build/artifacts/$t"; done

run_one() {
  local t=$1
  # -timeout / -rss_limit_mb: one input taking 10 s or 2 GiB is a finding (unbounded work or
  # allocation from a size the input claims).
  "$build/fuzz_$t" -max_total_time="$seconds" -print_final_stats=1 -timeout=10 \
    -rss_limit_mb=2048 -artifact_prefix="$build/artifacts/$t/" \
    "$build/corpus/$t" "$seeds/$t" >"$build/logs/$t.log" 2>&1
}
export -f run_one
export build seeds seconds

echo "fuzzing ${targets[*]} for ${seconds} s each, $parallel at a time"
status=0
printf '%s\n' "${targets[@]}" | xargs -P "$parallel" -I{} bash -c 'run_one {}' || status=$?

summary="$build/fuzz-summary.txt"
printf '%-12s %12s %8s  %s\n' target executions corpus result >"$summary"
for t in "${targets[@]}"; do
  log="$build/logs/$t.log"
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  corpus=$(find "$build/corpus/$t" -type f | wc -l)
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
