// How values that should be a block-quantized tensor's decoded values (a token's embedding row,
// a recorded weight) differ from them, read block by block. A decoder bug leaves marks that no
// other bug does: each block holding its own values in another order, each sub-block an exact
// affine map of its correct values (a scale or min unpacked wrong), or every difference a whole
// multiple of 2^k quantization steps (the quants' high bits). The quantization step is read off
// the correct values themselves, so no decoder is needed to see it.
#pragma once

#include <string>

#include "diff/replay_rows.hpp"
#include "model/ggml_type.hpp"

namespace tapdiff::diff {

// One clause naming the shape the differences share, or "" when they do not all have one of
// these shapes (or the type is not block-quantized, or nothing differs). Rows pair up by index;
// each holds whole blocks of `type`, and a row may be the decoded values times one factor (a
// scaled embedding).
std::string decoder_structure(const Rows& expected, const Rows& actual, GgmlType type);

}  // namespace tapdiff::diff
