// Row gather and scatter: dst[dst_rows[r]] = src[src_rows[r]] for r < n_rows, each index list
// optional (null: row r itself). A mixture of experts groups its tokens' rows by expert for the
// experts' GEMMs and puts the results back in token order. One element per thread.
#pragma once

#include <cstdint>

#include "engine/device/stream.hpp"
#include "engine/device/td_hd.hpp"

namespace tapdiff::engine {

struct CopyRowsArgs {
  const float* src = nullptr;
  const std::int32_t* src_rows = nullptr;  // (n_rows,) or null
  float* dst = nullptr;
  const std::int32_t* dst_rows = nullptr;  // (n_rows,) or null
  std::int64_t n_rows = 0;
  std::int64_t width = 0;
};

TD_HD inline void copy_rows_body(const CopyRowsArgs& a, std::int64_t i) {
  const std::int64_t r = i / a.width, c = i % a.width;
  const std::int64_t from = a.src_rows ? a.src_rows[r] : r, to = a.dst_rows ? a.dst_rows[r] : r;
  a.dst[to * a.width + c] = a.src[from * a.width + c];
}

void validate(const CopyRowsArgs& a);
void copy_rows_host(const CopyRowsArgs& a);
void copy_rows_cuda(const CopyRowsArgs& a, CudaStream stream);

}  // namespace tapdiff::engine
