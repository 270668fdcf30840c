// A JSON description of a trace (what `tapdiff inspect trace.h5` prints): metadata, tokens,
// every tap with its shape, row count and positions, and a catalogue check when the trace
// declares its dims.
#pragma once

#include <nlohmann/json.hpp>

#include "tapdiff/trace_reader.hpp"

namespace tapdiff {

nlohmann::json trace_summary(const TraceReader& trace);

// "0-127" or "0-3,10-12": compact text for a sorted list of positions.
std::string position_ranges(const std::vector<std::int64_t>& positions);

}  // namespace tapdiff
