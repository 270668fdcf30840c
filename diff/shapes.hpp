// Shape findings: which model dimension would explain a tap's other row shape, e.g. a width
// of 576 where 1536 belongs is n_embd used for n_ff.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "tapdiff/tap_dims.hpp"

namespace tapdiff::diff {

// The model symbols equal to `value` ("n_embd", "n_head·head_dim", ...), for the dims given.
std::vector<std::string> dimension_names(std::int64_t value, const TapDims& dims);

// One sentence per differing dimension of tap `name`'s rows: both values, what each is in the
// model, and the mix-up that explains it. Without dims the values alone.
std::string shape_explanation(std::string_view name, const std::vector<std::int64_t>& expected,
                              const std::vector<std::int64_t>& actual, const std::optional<TapDims>& dims);

}  // namespace tapdiff::diff
