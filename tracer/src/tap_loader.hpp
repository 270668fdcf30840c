// Reader side of /taps: loads and validates every tap group against /committed, so that a
// malformed trace fails at open with the file and object named.
#pragma once

#include <string>
#include <vector>

#include "h5.hpp"
#include "tapdiff/trace_reader.hpp"

namespace tapdiff {

// committed: (n, width) rows, runs and (width 3) rows in the stack's batch per tap index. For an
// incomplete trace, taps without committed rows (created in the step that was interrupted) are
// left out.
std::vector<TapInfo> load_taps(hid_t file, const std::string& path, const std::vector<std::int64_t>& committed,
                               std::size_t width, bool complete);

// Shape of a dataset, or TraceError naming it.
std::vector<hsize_t> dataset_dims(hid_t dataset, const h5::Where& where);

// Opens a dataset and checks its type class (H5T_INTEGER / H5T_FLOAT) and element size
// (0: any).
h5::Id open_dataset(hid_t location, const char* name, const h5::Where& where,
                    H5T_class_t expected_class, std::size_t expected_size, const char* type_text);

}  // namespace tapdiff
