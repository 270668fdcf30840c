// Nondeterminism: two runs of the same engine on the same input must record the same values.
// Where repeats differ, that is the finding, ahead of any op diagnosis: a data race, an
// uninitialized read or an output buffer aliasing an input shows first as runs that disagree.
#pragma once

#include <optional>
#include <string>

#include "diff/result.hpp"

namespace tapdiff::diff {

// The first tap and position in time (the prompt's step, then each decode step; execution
// order within a step) where the repeat's values differ from the first run's at all, with the
// row's metrics; "tokens" when only the token sequences differ.
std::optional<FirstDivergence> first_repeat_difference(const std::string& first_trace,
                                                       const std::string& repeat_trace);

// Makes `at` (run 1 vs run `repeat`) the first finding and root of r; the verdict diverges.
void put_nondeterminism_first(const FirstDivergence& at, int repeat, DiffResult& r);

}  // namespace tapdiff::diff
