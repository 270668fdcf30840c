// The trace metadata a run of a model declares: who produced it, the model's path, hash and
// hyperparameters, the precision, the fault, the prompt, and the tap dims (n_ctx = prompt +
// n_predict) that readers check shapes against. One builder for every producer.
#pragma once

#include <string>
#include <vector>

#include "model/gguf.hpp"
#include "tapdiff/trace_metadata.hpp"

namespace tapdiff {

TraceMetadata trace_metadata_for(const GgufFile& model, Producer producer, const std::string& precision,
                                 const std::string& fault, const std::vector<int>& prompt, int n_predict);

}  // namespace tapdiff
