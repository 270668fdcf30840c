// An F32 copy of a GGUF model, written by tapdiff's own GGUF writer: every tensor dequantized
// by model/ and stored as F32, the metadata kept (general.file_type set to 0, all F32).
#pragma once

#include <string>

namespace tapdiff::bench {

// Writes the copy to dst unless a file is already there; returns true when it wrote one.
bool write_f32_copy(const std::string& src, const std::string& dst);

}  // namespace tapdiff::bench
