// RMSNorm per row: out = x / sqrt(mean(x²) + eps) * w. The sum of squares runs in float32
// in index order (one row per thread), so both executors sum identically.
#pragma once

#include <cstdint>
#include <math.h>

#include "engine/device/stream.hpp"
#include "engine/device/td_hd.hpp"

namespace tapdiff::engine {

struct RmsNormArgs {
  const float* x = nullptr;       // (n_rows, n)
  const float* weight = nullptr;  // (n,); nullptr leaves the weight out (fault norm-weight-dropped)
  float* out = nullptr;           // (n_rows, n)
  std::int64_t n_rows = 0;
  std::int64_t n = 0;
  float eps = 1e-5f;
  // Fault norm-weight-plus-one: Gemma's convention, x̂ · (1 + w), for a model storing w itself.
  bool weight_plus_one = false;
  // Fault norm-mean-centered: LayerNorm statistics (x - mean) / sqrt(var + eps), no bias.
  bool subtract_mean = false;
};

TD_HD inline void rmsnorm_row(const RmsNormArgs& a, std::int64_t r) {
  const float* x = a.x + r * a.n;
  float* out = a.out + r * a.n;
  if (a.subtract_mean) {
    float sum = 0.0f;
    for (std::int64_t i = 0; i < a.n; ++i) sum += x[i];
    const float mean = sum / float(a.n);
    float var = 0.0f;
    for (std::int64_t i = 0; i < a.n; ++i) var += (x[i] - mean) * (x[i] - mean);
    const float inv_std = 1.0f / sqrtf(var / float(a.n) + a.eps);
    for (std::int64_t i = 0; i < a.n; ++i)
      out[i] = (x[i] - mean) * inv_std * (a.weight != nullptr ? a.weight[i] : 1.0f);
    return;
  }
  float ss = 0.0f;
  for (std::int64_t i = 0; i < a.n; ++i) ss += x[i] * x[i];
  const float inv = 1.0f / sqrtf(ss / float(a.n) + a.eps);
  if (a.weight_plus_one && a.weight != nullptr) {
    for (std::int64_t i = 0; i < a.n; ++i) out[i] = x[i] * inv * (1.0f + a.weight[i]);
    return;
  }
  for (std::int64_t i = 0; i < a.n; ++i)
    out[i] = x[i] * inv * (a.weight != nullptr ? a.weight[i] : 1.0f);
}

void validate(const RmsNormArgs& a);
void rmsnorm_host(const RmsNormArgs& a);
void rmsnorm_cuda(const RmsNormArgs& a, CudaStream stream);

}  // namespace tapdiff::engine
