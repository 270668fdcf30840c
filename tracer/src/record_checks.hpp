// Argument checks for TraceWriter: a bad call is rejected (TraceError) before any state changes.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "tapdiff/row_shape.hpp"
#include "tapdiff/trace_metadata.hpp"

namespace tapdiff {

void check_record(const std::string& path, std::string_view name, int layer,
                  std::int64_t first_position, std::int64_t n_rows, const RowShape& row_shape,
                  const float* rows);

void check_metadata(const std::string& path, const TraceMetadata& metadata);

}  // namespace tapdiff
