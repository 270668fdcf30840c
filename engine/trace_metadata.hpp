// The TraceMetadata an engine run declares: producer engine-host or engine-cuda, precision,
// fault, prompt tokens, the model's hash and hyperparameters, and the tap dims (n_ctx =
// prompt + n_predict) that check shapes against the catalogue.
#pragma once

#include <vector>

#include "engine/options.hpp"
#include "model/gguf.hpp"
#include "tapdiff/trace_metadata.hpp"

namespace tapdiff::engine {

TraceMetadata engine_trace_metadata(const GgufFile& model, const std::vector<int>& prompt,
                                    const EngineOptions& options);

}  // namespace tapdiff::engine
