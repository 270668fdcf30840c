// The safetensors format: an 8-byte little-endian header size, a JSON header naming each
// tensor's dtype, shape and byte range, then the data. F32, F16, BF16 and F64 tensors.
#pragma once

#include <string>
#include <vector>

#include "adapters/tensor_file.hpp"

namespace tapdiff::adapters {

// Every tensor of the file, in header order. Throws InputError naming the file and the field.
std::vector<DumpedTensor> read_safetensors(const std::string& path);

}  // namespace tapdiff::adapters
