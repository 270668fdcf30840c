// Non-finite values (NaN, ±Inf) anywhere in either trace. Row metrics compare only elements
// that are finite in both traces, so a NaN that the reference and the engine both compute (a
// NaN weight in the model) would otherwise pass silently; and a NaN in the expected trace only
// is not a divergence by the jump test. Either way it is a finding that fails the diff.
#pragma once

#include <cstddef>
#include <optional>
#include <vector>

#include "diff/result.hpp"

namespace tapdiff::diff {

// The first tap in execution order holding a non-finite value, at its earliest such position:
// a "non-finite" finding, e.g. "non-finite values in both traces from blk.1.attn_q, position
// 0: 1 of 64 elements in the expected trace, 1 in the actual". None when every value is finite.
std::optional<StructuralFinding> first_nonfinite_origin(const std::vector<TapComparison>& taps);

// The elements actual holds at -inf where expected is finite, when they are its only non-finite
// values and every other element is expected's to an nmse of at most `tolerance`: a row masked
// after it was computed (a sampler's banned tokens written into the logits). None otherwise.
std::optional<std::vector<std::size_t>> masked_to_minus_infinity(const std::vector<float>& expected,
                                                                 const std::vector<float>& actual, double tolerance);

}  // namespace tapdiff::diff
