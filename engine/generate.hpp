// The engine's public entry point: load a GGUF model onto an executor, prefill the prompt in
// one batched step (or in chunks: EngineOptions::prefill_chunk), then decode greedily one
// position per step. A model part (model/model_part.hpp) runs its stages in lockstep.
//
// Positions: the prompt at 0..P-1, generated token i at P+i. Steps: the prefill (all prompt
// positions, or one step per chunk), then one step per generated token except the last (which
// is not fed back).
// After every step the trace gets end_step(); every generated token is appended with
// append_token() (the prompt's tokens belong in the TraceMetadata the caller opened it with;
// app/trace_metadata_for.hpp builds one).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "engine/device/error.hpp"
#include "engine/faults.hpp"
#include "engine/options.hpp"
#include "model/config.hpp"
#include "model/gguf.hpp"

namespace tapdiff {
class TraceWriter;
}

namespace tapdiff::engine {

// Returns prompt + generated tokens; trace may be null. Throws std::invalid_argument for bad
// options (empty prompt, token outside the vocabulary, unknown or inapplicable fault),
// InputError for a malformed model, NoDeviceError when backend cuda has no device.
std::vector<int> generate(const GgufFile& model, const std::vector<int>& prompt,
                          const EngineOptions& options, TraceWriter* trace);

// The same, also returning each step's logits at its last position (n_predict rows of
// n_vocab; one row when n_predict is 0) in step_logits.
std::vector<int> generate(const GgufFile& model, const std::vector<int>& prompt,
                          const EngineOptions& options, TraceWriter* trace,
                          std::vector<std::vector<float>>* step_logits);

class Executor;

// The same on an executor the caller made (options.backend is not consulted). Tests run the
// CUDA executor's code paths (16-bit weight storage, device-style copies) on host memory this
// way.
std::vector<int> generate_on(Executor& ex, const GgufFile& model, const std::vector<int>& prompt,
                             const EngineOptions& options, TraceWriter* trace,
                             std::vector<std::vector<float>>* step_logits);

// Throws what generate would for the model, the prompt and the options (a malformed model, an
// empty prompt, a token outside the vocabulary, an unknown or inapplicable fault), running
// nothing: a caller checks a run before it creates the run's outputs.
void check_options(const GgufFile& model, const std::vector<int>& prompt, const EngineOptions& options);

// Bytes of the run's buffers that grow with its context (the KV cache, attention's
// probabilities): a caller compares them with the memory it has before starting a long run.
std::uint64_t context_bytes(const ModelConfig& config, int n_prompt, const EngineOptions& options);

// False with the reason on machines without a usable CUDA device (or builds without CUDA).
bool cuda_device_available(std::string* reason);

}  // namespace tapdiff::engine
