// Rows of the trace a hypothesis replays from (the actual run's own inputs, or in lockstep
// the expected run's), read one position or a prefix of positions at a time.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tapdiff/trace_reader.hpp"

namespace tapdiff::diff {

using Row = std::vector<float>;
using Rows = std::vector<Row>;  // by position 0..p; empty rows where the trace has none

// One row of tap (name, layer) at position p, or empty (also where the trace holds a shard).
Row trace_row(const TraceReader& r, const std::string& name, int layer, std::int64_t p);

// Rows 0..p of a tap (empty rows for positions it lacks).
Rows trace_rows_upto(const TraceReader& r, const std::string& name, int layer, std::int64_t p);

}  // namespace tapdiff::diff
