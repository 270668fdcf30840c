// Runs a model through the reference or the engine into a trace: what `run`, `check` and
// `selftest` share.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "adapters/llama_cpp/llama_run.hpp"
#include "diff/result.hpp"
#include "reference/sampler.hpp"
#include "reference/weights.hpp"
#include "tapdiff/tap_filter.hpp"
#include "tapdiff/weight_taps.hpp"

namespace tapdiff {

class GgufFile;

struct RunSpec {
  std::string backend = "reference";  // reference | host | cuda | llama.cpp | transformers (cuda falls back to host)
  std::string model;
  std::vector<int> prompt;
  int n_predict = 16;
  std::string precision = "f32";      // reference: f32 | f64; engine: f32 | f16 | bf16
  std::string fault;                  // engine only; "" = none; "a,b" injects both
  // Engine only: a trace every tap point continues from (lockstep). The model must be the
  // trace's; the prompt and n_predict come from its tokens (prompt stays empty).
  std::string lockstep;
  int prefill_chunk = 0;              // engine only: prompt tokens per prefill step (0: all at once)
  TapFilterSpec taps;
  // Weight taps: "" none; full | stats | auto (stats above weights_stats_above parameters).
  std::string weights;
  std::uint64_t weights_stats_above = kWeightStatsAboveParameters;
  bool compress = false;
  ref::SamplingOptions sampling;      // reference only
  // Reference only: MiB of float32 matrices kept decoded; the rest are dequantized on each use.
  std::uint64_t weight_cache_mib = ref::kDefaultKeptWeightBytes >> 20;
  static constexpr std::uint64_t kMaxWeightCacheMib = std::uint64_t{1} << 30;  // in bytes, far from 2^64
  bool logits_all = false;            // the `output` tap at every prompt position
  adapters::llama_cpp::LlamaOptions llama;  // llama.cpp only
  std::string trace;                  // output path; "" = no trace
  bool progress = true;               // a progress line on a terminal
};

// Prompt + generated tokens. Throws std::invalid_argument for bad options, InputError for a
// bad model, TraceError when the trace cannot be written. The second form runs spec.model
// already opened as `file`.
std::vector<int> run_model(const RunSpec& spec);
std::vector<int> run_model(const RunSpec& spec, const GgufFile& file);

// Runs `first` (already run, its trace written) again repeat - 1 times, each to
// "<trace>.repeat<k>.h5", and compares each with the first run: the first repeat that differs
// and where (its trace is kept), or nothing when all agree (their traces are removed).
std::optional<std::pair<diff::FirstDivergence, int>> repeat_engine(const RunSpec& first, int repeat);

// The weight tap options a run records with (nullopt without spec.weights); also checks that
// the tap filter keeps whole tensors. Throws std::invalid_argument naming the option.
std::optional<WeightTapOptions> weight_tap_options(const RunSpec& spec, const GgufFile& file);

}  // namespace tapdiff
