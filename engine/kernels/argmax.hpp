// Greedy choice per row: the index of the largest value, the first one on ties (a NaN never
// replaces the best so far). One row per thread, scanned in index order.
#pragma once

#include <cstdint>

#include "engine/device/stream.hpp"
#include "engine/device/td_hd.hpp"

namespace tapdiff::engine {

struct ArgmaxArgs {
  const float* x = nullptr;     // (n_rows, n)
  std::int32_t* out = nullptr;  // (n_rows,)
  std::int64_t n_rows = 0;
  std::int64_t n = 0;
};

TD_HD inline void argmax_row(const ArgmaxArgs& a, std::int64_t r) {
  const float* x = a.x + r * a.n;
  std::int64_t best = 0;
  for (std::int64_t i = 1; i < a.n; ++i)
    if (x[i] > x[best]) best = i;
  a.out[r] = std::int32_t(best);
}

void validate(const ArgmaxArgs& a);
void argmax_host(const ArgmaxArgs& a);
void argmax_cuda(const ArgmaxArgs& a, CudaStream stream);

}  // namespace tapdiff::engine
