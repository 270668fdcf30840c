// Replay of how a loader or dequantization kernel could have turned a GGUF tensor's raw bytes
// into the values a program recorded as a weight tap: the correct decode and named wrong ones
// (no dequantization, a short byte size, a misdecoded block scale or min, a bias read through
// the wrong 16-bit type). Each variant is computed from the raw bytes through model/.
#pragma once

#include <string>
#include <vector>

#include "model/gguf.hpp"

namespace tapdiff::diff {

struct WeightVariant {
  std::string variant;    // what the program did, one clause
  std::string bug_class;  // "" for the correct decode
  bool baseline = false;  // the correct decode
  std::vector<float> values;  // (n_elements,) row-major as GGUF stores the tensor
};

// The correct decode first, then every variant that applies to the tensor's type.
std::vector<WeightVariant> weight_variants(const GgufTensorInfo& tensor);

// Another tensor's bytes loaded in its place: each tensor of the same type and shape in the
// same layer, and the same tensor of the neighbouring layers (a name or offset mix-up).
std::vector<WeightVariant> loader_mixups(const GgufTensorInfo& tensor, const GgufFile& file);

}  // namespace tapdiff::diff
