// Runs a model through the reference or the engine into a trace: what `run`, `check` and
// `selftest` share.
#pragma once

#include <string>
#include <vector>

#include "reference/sampler.hpp"
#include "tapdiff/tap_filter.hpp"

namespace tapdiff {

struct RunSpec {
  std::string backend = "reference";  // reference | host | cuda (cuda falls back to host, saying so)
  std::string model;
  std::vector<int> prompt;
  int n_predict = 16;
  std::string precision = "f32";      // reference: f32 | f64; engine: f32 | f16 | bf16
  std::string fault;                  // engine only; "" = none
  TapFilterSpec taps;
  bool compress = false;
  ref::SamplingOptions sampling;      // reference only
  std::string trace;                  // output path; "" = no trace
  bool progress = true;               // a progress line on a terminal
};

// Prompt + generated tokens. Throws std::invalid_argument for bad options, InputError for a
// bad model, TraceError when the trace cannot be written.
std::vector<int> run_model(const RunSpec& spec);

}  // namespace tapdiff
