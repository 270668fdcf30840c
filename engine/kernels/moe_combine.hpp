// A mixture of experts' output: out[r] = Σ_k weights[r, k] · rows[r · n_used + k], the used
// experts' down projections summed in ascending expert order. One element per thread.
#pragma once

#include <cstdint>

#include "engine/device/stream.hpp"
#include "engine/device/td_hd.hpp"

namespace tapdiff::engine {

struct MoeCombineArgs {
  const float* rows = nullptr;     // (n_rows · n_used, width)
  const float* weights = nullptr;  // (n_rows, n_used)
  float* out = nullptr;            // (n_rows, width)
  std::int64_t n_rows = 0;
  int n_used = 0;
  std::int64_t width = 0;
};

TD_HD inline void moe_combine_body(const MoeCombineArgs& a, std::int64_t i) {
  const std::int64_t r = i / a.width, c = i % a.width;
  float sum = 0.0f;
  for (int k = 0; k < a.n_used; ++k) sum += a.weights[r * a.n_used + k] * a.rows[(r * a.n_used + k) * a.width + c];
  a.out[i] = sum;
}

void validate(const MoeCombineArgs& a);
void moe_combine_host(const MoeCombineArgs& a);
void moe_combine_cuda(const MoeCombineArgs& a, CudaStream stream);

}  // namespace tapdiff::engine
