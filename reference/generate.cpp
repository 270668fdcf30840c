#include "reference/generate.hpp"

#include <fmt/format.h>
#include <limits>
#include <stdexcept>

#include "reference/forward.hpp"
#include "tapdiff/trace_writer.hpp"

namespace tapdiff::ref {
namespace {

template <typename T>
std::uint64_t context_bytes_of(const ModelConfig& c, int n_ctx) {
  return (2 * std::uint64_t(c.n_layer) * std::uint64_t(c.kv_dim()) + std::uint64_t(c.n_head)) * std::uint64_t(n_ctx) *
         sizeof(T);
}

template <typename T>
std::vector<int> run(const Weights& weights, const std::vector<int>& prompt,
                     const GenerateOptions& o, TraceWriter* trace) {
  const int n_prompt = static_cast<int>(prompt.size());
  const int n_ctx = n_prompt + o.n_predict;
  Forward<T> forward(weights, n_ctx, trace);
  Sampler sampler(o.sampling);
  std::vector<int> tokens = prompt;
  // The last generated token is not fed back: n_ctx - 1 steps produce n_predict new tokens.
  const int steps = o.n_predict > 0 ? n_ctx - 1 : n_prompt;
  for (int pos = 0; pos < steps; ++pos) {
    const bool samples_next = pos + 1 >= n_prompt;
    const auto& logits = forward.step(tokens[static_cast<std::size_t>(pos)], pos, samples_next || o.logits_all);
    if (samples_next && pos + 1 < n_ctx) {
      tokens.push_back(sampler.sample(logits));
      if (trace) trace->append_token(tokens.back());
    }
    if (trace) trace->end_step();
    if (o.on_step) o.on_step(pos, tokens.back(), pos + 1, steps);
  }
  return tokens;
}

}  // namespace

std::vector<int> generate(const Weights& weights, const std::vector<int>& prompt,
                          const GenerateOptions& options, TraceWriter* trace) {
  if (prompt.empty()) throw std::invalid_argument("tokens: expected at least one prompt token");
  if (options.n_predict < 0)
    throw std::invalid_argument(fmt::format("n-predict: expected >= 0, got {}", options.n_predict));
  if (std::int64_t(prompt.size()) + options.n_predict > std::numeric_limits<int>::max())
    throw std::invalid_argument(fmt::format("n-predict: {} prompt and {} generated positions are more than the {} a run "
                                            "holds", prompt.size(), options.n_predict, std::numeric_limits<int>::max()));
  return options.precision == Precision::f64 ? run<double>(weights, prompt, options, trace)
                                             : run<float>(weights, prompt, options, trace);
}

std::uint64_t context_bytes(const ModelConfig& config, int n_ctx, Precision precision) {
  return precision == Precision::f64 ? context_bytes_of<double>(config, n_ctx) : context_bytes_of<float>(config, n_ctx);
}

}  // namespace tapdiff::ref
