// The reference's generation loop: the prompt one token at a time, then n_predict new tokens
// (greedy unless sampling options say otherwise). Positions are 0..n_prompt+n_predict-1; every
// position whose token is fed through the model is one trace step.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "reference/sampler.hpp"
#include "reference/weights.hpp"

namespace tapdiff {
class TraceWriter;
}

namespace tapdiff::ref {

enum class Precision { f32, f64 };

struct GenerateOptions {
  int n_predict = 16;
  Precision precision = Precision::f32;
  SamplingOptions sampling;
  bool logits_all = false;  // the `output` tap at every prompt position, not just the last
  // Called after each step with (position, token chosen or fed, steps done, steps total).
  std::function<void(int, int, int, int)> on_step;
};

// Bytes of the buffers that grow with the run's context (the KV cache, attention's
// probabilities): a caller compares them with the memory it has before starting a long run.
std::uint64_t context_bytes(const ModelConfig& config, int n_ctx, Precision precision);

// Returns prompt + generated tokens. trace may be null.
std::vector<int> generate(const Weights& weights, const std::vector<int>& prompt,
                          const GenerateOptions& options, TraceWriter* trace);

}  // namespace tapdiff::ref
