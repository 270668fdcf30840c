// A greedy token that flips at a near-tie: when every tap agrees within tolerance and the two
// runs continued with different tokens, each run following its own logits, and the expected
// run's margin between the two tokens is within the precision's noise, the flip is the
// benign consequence of rounding, not a bug. Never for the f32 profile.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "diff/tolerance.hpp"
#include "tapdiff/trace_reader.hpp"

namespace tapdiff::diff {

// The note for the flip at position p (the first differing token), or nothing when it is not
// a near-tie (f32, a run not following its own logits, a margin beyond the noise).
std::optional<std::string> near_tie(const TraceReader& expected, const TraceReader& actual, std::int64_t p,
                                    const ToleranceProfile& profile);

}  // namespace tapdiff::diff
