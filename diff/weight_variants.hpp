// Replay of how a loader or dequantization kernel could have turned a GGUF tensor's raw bytes
// into the values a program recorded as a weight tap: the correct decode and named wrong ones
// (no dequantization, a short byte size, a misdecoded block scale or min, a bias read through
// the wrong 16-bit type, bytes read from a shifted offset). Each variant is computed from the raw bytes through model/.
#pragma once

#include <climits>
#include <cstdint>
#include <functional>
#include <optional>
#include <utility>
#include <string>
#include <vector>

#include "model/gguf.hpp"

namespace tapdiff::diff {

struct WeightVariant {
  std::string variant;    // what the program did, one clause
  std::string bug_class;  // "" for the correct decode
  bool baseline = false;  // the correct decode
  std::vector<float> values;  // (n_elements,) row-major as GGUF stores the tensor
  // The rows it predicts; the others were read from outside the tensor's bytes, whatever lay there.
  std::pair<std::int64_t, std::int64_t> rows_predicted{0, INT64_MAX};
};

// The correct decode first, then every variant that applies to the tensor's type.
std::vector<WeightVariant> weight_variants(const GgufTensorInfo& tensor);

// Another tensor's bytes loaded in its place: each tensor of the same type and shape in the
// same layer, and the same tensor of the neighbouring layers (a name or offset mix-up).
std::vector<WeightVariant> loader_mixups(const GgufTensorInfo& tensor, const GgufFile& file);

// The tensor's bytes read from k bytes off its offset (a data offset, header size or alignment
// computed wrong), k fitted on one row the program recorded: the shifts within two rows' bytes
// (at least 4 KiB) either way whose decode of row `row` is `actual` by `close`; the smallest
// shift that fits, decoded over the whole tensor (past either end of the file, zeros).
std::optional<WeightVariant> offset_fitted(const GgufTensorInfo& tensor, const GgufFile& file, std::int64_t row,
                                           const std::vector<float>& actual,
                                           const std::function<bool(const float*, const float*, std::int64_t)>& close);

}  // namespace tapdiff::diff
