#!/usr/bin/env bash
# Writes the fuzzers' seed corpora from the fixtures: make_seeds.sh TAPDIFF OUT_DIR.
# OUT_DIR/{gguf,trace,tolerance,token_list}/ each get a few valid inputs (and near misses);
# nothing here is committed, the seeds are regenerated from the current tapdiff.
set -euo pipefail
tapdiff=$1
out=$2
root=$(cd "$(dirname "$0")/../.." && pwd)
rm -rf "$out"
mkdir -p "$out"/{gguf,trace,tolerance,token_list}

# Small models keep the fuzzer fast; every GGUF type family and every architecture appear.
tiny=(--n-layer 1 --n-embd 32 --n-head 2 --n-head-kv 1 --n-ff 32)
"$tapdiff" fixture --arch llama "${tiny[@]}" --n-vocab 260 --type Q8_0 -o "$out/gguf/llama_q8_0.gguf" >/dev/null
"$tapdiff" fixture --arch qwen2 "${tiny[@]}" --n-vocab 260 --type F16 --tied -o "$out/gguf/qwen2_f16.gguf" >/dev/null
"$tapdiff" fixture --arch qwen3 "${tiny[@]}" --head-dim 32 --n-vocab 260 --tied -o "$out/gguf/qwen3_f32.gguf" >/dev/null
"$tapdiff" fixture --arch llama3 "${tiny[@]}" --n-vocab 260 --type Q8_0 -o "$out/gguf/llama3_q8_0.gguf" >/dev/null
"$tapdiff" fixture --arch gemma2 "${tiny[@]}" --n-vocab 260 --type F16 -o "$out/gguf/gemma2_f16.gguf" >/dev/null
"$tapdiff" fixture --arch gemma3 "${tiny[@]}" --n-vocab 260 --type Q4_0 -o "$out/gguf/gemma3_q4_0.gguf" >/dev/null
"$tapdiff" fixture --arch phi3 "${tiny[@]}" --n-vocab 262 --type Q8_0 -o "$out/gguf/phi3_q8_0.gguf" >/dev/null
"$tapdiff" fixture --arch llama --n-layer 1 --n-embd 32 --n-head 2 --n-head-kv 1 --n-ff 256 \
  --n-vocab 260 --type Q4_0 --tensor-type 'blk.*.ffn_down.weight=Q6_K' \
  --tensor-type 'token_embd.weight=Q5_1' -o "$out/gguf/llama_mixed.gguf" >/dev/null

# Traces: fuzz_trace edits a valid trace it writes itself; an input is an edit program, and
# any bytes are one. Seeds: no edit, and a few programs of different lengths.
: >"$out/trace/no_edit"
head -c 16 /dev/zero >"$out/trace/zeros16"
printf '%b' "$(printf '\\x%02x' $(seq 1 64))" >"$out/trace/ramp64"
printf '%b' "$(printf '\\x%02x' $(seq 255 -3 64))" >"$out/trace/down64"

# Tolerance profiles: the documented example, each key alone, and near misses.
sed -n '/^```json$/,/^```$/p' "$root/docs/tolerance.md" | sed '1d;$d' >"$out/tolerance/doc_example.json"
printf '%s' '{"base": "f32"}' >"$out/tolerance/base_only.json"
printf '%s' '{"base": "bf16", "nmse": {"projection": 1e-4, "residual": 2e-5}}' >"$out/tolerance/classes.json"
printf '%s' '{"base": "f16", "jump_factor": 0}' >"$out/tolerance/zero_jump.json"
printf '%s' '{"base": "f16", "nmse": {"no_such_class": 1}}' >"$out/tolerance/unknown_class.json"

# Token lists as --tokens takes them.
printf '%s' '1,70,200,33' >"$out/token_list/four.txt"
printf '%s' '0' >"$out/token_list/zero.txt"
printf '%s' ' 1 , 2 ,3 ' >"$out/token_list/spaces.txt"
printf '%s' '2147483647,2147483648' >"$out/token_list/int_limit.txt"
printf '%s' '1,,2,-3,x' >"$out/token_list/bad.txt"
