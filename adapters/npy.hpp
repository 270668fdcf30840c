// NumPy's .npy format (version 1-3): a float32, float16 or float64 array, C order.
#pragma once

#include <string>

#include "adapters/tensor_file.hpp"

namespace tapdiff::adapters {

// Throws InputError naming the file and the header field that is wrong.
DumpedTensor read_npy(const std::string& path);

}  // namespace tapdiff::adapters
