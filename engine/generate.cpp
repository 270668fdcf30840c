#include "engine/generate.hpp"

#include <algorithm>
#include <fmt/format.h>
#include <limits>
#include <optional>
#include <stdexcept>

#include "engine/device/cuda_device.hpp"
#include "engine/executor.hpp"
#include "engine/forward.hpp"
#include "engine/weights.hpp"
#include "model/config.hpp"
#include "tapdiff/trace_reader.hpp"
#include "tapdiff/trace_writer.hpp"

namespace tapdiff::engine {
namespace {

// "a,b,c": every named fault at once.
FaultSwitch parse_fault_list(const std::string& list) {
  FaultSwitch faults;
  std::size_t start = 0;
  while (start <= list.size()) {
    const std::size_t end = std::min(list.find(',', start), list.size());
    faults.add(parse_fault(std::string_view(list).substr(start, end - start)));
    start = end + 1;
  }
  return faults;
}

// Everything about a run that can be wrong before an executor exists; returns its faults.
FaultSwitch check_run(const GgufFile& model, const ModelConfig& c, const std::vector<int>& prompt,
                      const EngineOptions& o) {
  if (prompt.empty()) throw std::invalid_argument("tokens: expected at least one prompt token");
  if (o.n_predict < 0)
    throw std::invalid_argument(fmt::format("n-predict: expected >= 0, got {}", o.n_predict));
  if (std::int64_t(prompt.size()) + o.n_predict > std::numeric_limits<int>::max())
    throw std::invalid_argument(fmt::format("n-predict: {} prompt and {} generated positions are more than the {} a run "
                                            "holds", prompt.size(), o.n_predict, std::numeric_limits<int>::max()));
  if (o.prefill_chunk < 0)
    throw std::invalid_argument(fmt::format("prefill-chunk: expected >= 0 (0: the whole prompt), got {}", o.prefill_chunk));
  for (std::size_t i = 0; i < prompt.size(); ++i)
    if (prompt[i] < 0 || prompt[i] >= c.n_vocab)
      throw std::invalid_argument(
          fmt::format("tokens: token {} at position {} is outside the vocabulary 0..{}", prompt[i],
                      i, c.n_vocab - 1));
  if (!c.whole() && o.lockstep.empty())
    throw std::invalid_argument(fmt::format("{} holds stages {}..{} of the model, not all of it: a model part runs in "
                                            "lockstep, its input taken from the lockstep trace",
                                            model.path(), c.first_stage, c.last_stage));
  const FaultSwitch faults = parse_fault_list(o.fault);
  const int n_prompt = static_cast<int>(prompt.size());
  for (const Fault f : faults.active())
    if (auto why = fault_not_applicable(f, model, c, n_prompt, o.n_predict))
      throw std::invalid_argument("inject: " + *why);
  return faults;
}

}  // namespace

void check_options(const GgufFile& model, const std::vector<int>& prompt, const EngineOptions& options) {
  const ModelConfig config = load_model_config(model);
  validate_weights(model, config);
  check_run(model, config, prompt, options);
}

std::uint64_t context_bytes(const ModelConfig& config, int n_prompt, const EngineOptions& o) {
  const int n_ctx = n_prompt + o.n_predict;
  const int rows = o.prefill_chunk > 0 ? std::min(o.prefill_chunk, n_prompt) : n_prompt;
  return KvCache::bytes(config.n_layer, n_ctx, config.kv_dim(), storage_of(o.precision)) +
         Activations::probs_bytes(config, rows, n_ctx);
}

std::vector<int> generate(const GgufFile& model, const std::vector<int>& prompt,
                          const EngineOptions& options, TraceWriter* trace) {
  return generate(model, prompt, options, trace, nullptr);
}

std::vector<int> generate(const GgufFile& model, const std::vector<int>& prompt,
                          const EngineOptions& o, TraceWriter* trace,
                          std::vector<std::vector<float>>* step_logits) {
  // Validate before looking for a device, so input errors read the same on every machine.
  const ModelConfig config = load_model_config(model);
  validate_weights(model, config);
  check_run(model, config, prompt, o);
  const auto ex = make_executor(o.backend);
  return generate_on(*ex, model, prompt, o, trace, step_logits);
}

std::vector<int> generate_on(Executor& ex, const GgufFile& model, const std::vector<int>& prompt,
                             const EngineOptions& o, TraceWriter* trace,
                             std::vector<std::vector<float>>* step_logits) {
  const ModelConfig config = load_model_config(model);
  validate_weights(model, config);
  const FaultSwitch faults = check_run(model, config, prompt, o);
  const int n_prompt = static_cast<int>(prompt.size());

  const EngineWeights weights = load_engine_weights(ex, model, config, faults);
  if (trace != nullptr && o.weights)
    record_weight_taps(ex, weights, storage_of(o.precision), model, config, *trace, *o.weights);
  const int n_ctx = n_prompt + o.n_predict;
  const std::optional<LockstepSource> lockstep =
      o.lockstep.empty() ? std::nullopt : std::optional<LockstepSource>(std::in_place, o.lockstep);
  const int chunk = o.prefill_chunk > 0 ? std::min(o.prefill_chunk, n_prompt) : n_prompt;
  Forward forward(ex, weights, config, n_ctx, chunk, o.precision, faults, trace,
                  lockstep ? &*lockstep : nullptr, o.logits_all);

  std::vector<int> tokens = prompt;
  tokens.reserve(std::size_t(n_ctx));
  // A model part without the head chooses no token: the lockstep trace's come next.
  auto chosen = [&](int next, int position) {
    if (next >= 0) return next;
    const auto& recorded = lockstep->trace().metadata().tokens;
    return std::size_t(position + 1) < recorded.size() ? int(recorded[std::size_t(position + 1)]) : 0;
  };
  const int steps_total = std::max(1, o.n_predict);
  int steps_done = 0;
  auto finish_step = [&](int position, int next) {
    if (step_logits != nullptr) step_logits->push_back(forward.logits());
    if (static_cast<int>(tokens.size()) < n_ctx) {
      // Fault token-id-bookkeeping: the loop records (and later feeds) its step index.
      const int recorded = faults.is(Fault::token_id_bookkeeping) ? steps_done : next;
      tokens.push_back(recorded);
      if (trace != nullptr) trace->append_token(recorded);
    }
    if (trace != nullptr) trace->end_step();
    ++steps_done;
    if (o.on_step) o.on_step(position, tokens.back(), steps_done, steps_total);
  };

  // Prefill: the prompt in batched steps of `chunk` positions; the last one chooses the first
  // generated token.
  int p0 = 0;
  for (; p0 + chunk < n_prompt; p0 += chunk) {
    forward.step(&prompt[std::size_t(p0)], chunk, p0);
    if (trace != nullptr) trace->end_step();
  }
  finish_step(n_prompt - 1, chosen(forward.step(&prompt[std::size_t(p0)], n_prompt - p0, p0), n_prompt - 1));
  // Decode: feed the token at `pos`, choose the one at pos + 1. The last generated token is
  // never fed.
  for (int pos = n_prompt; pos < n_ctx - 1; ++pos) {
    int next = chosen(forward.step(&tokens[std::size_t(pos)], 1, pos), pos);
    // Fault first-token-twice: the first generated token goes into the sequence again.
    if (faults.is(Fault::first_token_twice) && pos == n_prompt)
      next = tokens[std::size_t(n_prompt)];
    finish_step(pos, next);
  }
  return tokens;
}

}  // namespace tapdiff::engine
