// Bias add over rows: x[r][i] += bias[i].
#pragma once

#include <cstdint>

#include "engine/device/stream.hpp"
#include "engine/device/td_hd.hpp"

namespace tapdiff::engine {

struct BiasArgs {
  float* x = nullptr;           // (n_rows, n)
  const float* bias = nullptr;  // (n,)
  std::int64_t n_rows = 0;
  std::int64_t n = 0;
};

TD_HD inline void bias_body(const BiasArgs& a, std::int64_t i) { a.x[i] += a.bias[i % a.n]; }

void validate(const BiasArgs& a);
void bias_host(const BiasArgs& a);
void bias_cuda(const BiasArgs& a, CudaStream stream);

}  // namespace tapdiff::engine
