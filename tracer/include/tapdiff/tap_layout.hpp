// How a producer stores a tap's rows where that differs from the catalogue's layout (format
// 2.2, /layouts): the row's axes in another order, one tensor-parallel shard of an axis, an
// axis padded to a block size. The reader aligns such rows to the catalogue's layout, and diff
// says what was aligned (docs/trace-schema.md, "Layouts").
//
// A layout is written as text, e.g. "axes=head_dim,n_head; shard=n_head:1/4; pad=n_vocab:32064".
// Its axes are the catalogue row's factors: attn_q's row [n_head * head_dim] has the axes
// (n_head, head_dim), attn.probs' row [n_head, n_ctx] has (n_head, n_ctx).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "tapdiff/tap_catalogue.hpp"
#include "tapdiff/tap_dims.hpp"

namespace tapdiff {

// Part `rank` of `count` equal contiguous parts of one axis (after its padding, if any).
struct TapShard {
  DimSymbol axis = DimSymbol::n_head;
  std::int64_t rank = 0;
  std::int64_t count = 1;
};

struct TapLayout {
  std::vector<DimSymbol> axes;               // stored axes, outermost first; empty: the catalogue's order
  std::optional<TapShard> shard;             // the rows hold one shard of this axis
  std::map<DimSymbol, std::int64_t> padded;  // axis -> stored size; entries past the model's size are padding

  std::string to_string() const;
  // Throws std::invalid_argument saying what was expected.
  static TapLayout parse(std::string_view text);
};

// A layout resolved for one tap: where each element of the aligned row comes from.
struct RowAlignment {
  std::vector<std::int64_t> stored_shape;  // one row as the file holds it
  std::vector<std::int64_t> whole_shape;   // the catalogue's row
  std::vector<std::int64_t> row_shape;     // an aligned row: whole_shape, or the shard's part of it
  std::vector<std::int64_t> gather;        // aligned element i is stored element gather[i];
                                           // empty when the rows are stored as read
  std::vector<std::int64_t> covers;        // aligned element i is element covers[i] of the whole row;
                                           // empty when the row is whole
  std::string description;                 // what aligning does, one line

  bool sharded() const { return !covers.empty(); }
  void apply(const float* stored, float* aligned) const;  // one row; needs gather non-empty
};

// Throws std::invalid_argument when the layout does not fit the tap's row: an axis the row does
// not have, a size the model's dims contradict, a shard of only padding. Its work grows with the
// row the dims describe: check that the file's rows have stored_row_shape() first.
RowAlignment align_row(const TapSpec& spec, const TapLayout& layout, const TapDims& dims);
// The shape of one stored row (RowAlignment::stored_shape) alone, at no cost; throws as align_row.
std::vector<std::int64_t> stored_row_shape(const TapSpec& spec, const TapLayout& layout, const TapDims& dims);

}  // namespace tapdiff
