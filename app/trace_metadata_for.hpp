// The trace metadata a run of a model records: who produced it, the model's path, hash and
// hyperparameters, the precision, the fault and the prompt.
#pragma once

#include <string>
#include <vector>

#include "model/config.hpp"
#include "tapdiff/trace_metadata.hpp"

namespace tapdiff {

TraceMetadata trace_metadata_for(const std::string& model_path, const ModelConfig& config,
                                 Producer producer, const std::string& precision,
                                 const std::string& fault, const std::vector<int>& prompt,
                                 int n_predict);

}  // namespace tapdiff
