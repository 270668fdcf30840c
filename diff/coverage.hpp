// Which positions each trace holds: a tap that lacks positions the other trace recorded (and
// its own filter admits) is a finding, and so is a trace whose run never closed it.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "diff/pair_reader.hpp"
#include "diff/result.hpp"
#include "tapdiff/trace_reader.hpp"

namespace tapdiff::diff {

// "missing-positions" findings, one per set of positions and side, naming the taps that lack
// them, among positions below `compared` (the common token prefix) and up to the last position
// the lacking trace's run fed. `output` is left out: --logits and chunking decide its positions.
void note_missing_positions(const std::vector<TapPair>& pairs, std::int64_t compared, const TraceReader& a,
                            const TraceReader& b, DiffResult& r);

// A "position-shift" finding when every tap of the actual trace holds the expected one's
// positions plus the same k != 0, and at p + k the rows the expected trace holds at p, neither
// trace recorded with --positions: a producer numbering positions from 1 compares nothing.
std::optional<StructuralFinding> position_shift(const std::vector<TapPair>& pairs, const TraceReader& a,
                                                const TraceReader& b);

// A "layer-shift" finding when the actual trace holds at layer L + k (k != 0) what the expected
// trace holds at layer L, for every layer: a producer numbering layers from 1 compares nothing.
std::optional<StructuralFinding> layer_shift(const TraceReader& a, const TraceReader& b);

// An "incomplete" finding when either trace was not closed (its run killed, crashed, or still
// running): what agrees is no pass of a run that did not finish.
std::optional<StructuralFinding> incomplete_trace(const TraceReader& a, const TraceReader& b);

}  // namespace tapdiff::diff
