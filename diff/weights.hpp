// Weights first (DESIGN.md "Diff and diagnosis"): the weight taps both traces hold
// (tapdiff/weight_taps.hpp) are compared tensor by tensor, in load order, before any
// activation. A row differs when an element is off by more than the rounding of the traces'
// precision (full rows), or when its exact statistics are (stats mode: sums, extremes,
// non-finite count; the hash short-cuts bit-identical rows). The first tensor that differs is
// the finding, diagnosed by replaying the tensor's raw GGUF bytes (diff/weight_variants.hpp):
// which rows match, which are zero, and which wrong decode reproduces the actual values.
#pragma once

#include <optional>
#include <string>

#include "diff/result.hpp"
#include "tapdiff/trace_reader.hpp"

namespace tapdiff::diff {

struct WeightFinding {
  FirstDivergence first;  // tap "weight.<gguf name>", position = the first differing row
  std::optional<Diagnosis> diagnosis;
};

// Appends one WeightComparison per tensor both traces hold to result.weights (and a finding
// when only one trace records weights); returns the first tensor that differs. model_path:
// the GGUF to replay with ("" = the expected trace's). Throws TraceError on unreadable taps.
std::optional<WeightFinding> compare_weights(const TraceReader& expected, const TraceReader& actual,
                                             const std::string& model_path, bool diagnose,
                                             DiffResult& result);

// Makes the weight finding the result's first divergence and first root (it precedes every
// activation), and the verdict diverged.
void put_weight_finding_first(const WeightFinding& finding, DiffResult& result);

}  // namespace tapdiff::diff
