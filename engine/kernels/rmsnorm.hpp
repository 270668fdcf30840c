// RMSNorm per row: out = x / sqrt(mean(x²) + eps) * w. The sum of squares runs in float32 in
// 32 slots (slots.hpp), so both executors sum identically.
#pragma once

#include <cstdint>
#include <math.h>

#include "engine/device/stream.hpp"
#include "engine/device/td_hd.hpp"
#include "engine/kernels/slots.hpp"

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

// A row's statistics sum in slots (slots.hpp): slot s's share of Σ (x[i] - center), or of
// Σ (x[i] - center)² when `square`. center is 0 but for the mean-centered fault.
TD_HD inline float rmsnorm_slot(const float* x, std::int64_t n, int s, float center, bool square) {
  float sum = 0.0f;
  for (std::int64_t i = s; i < n; i += kSlots) {
    const float d = x[i] - center;
    sum += square ? d * d : d;
  }
  return sum;
}

// Element i of a row, given its mean (0 unless subtract_mean) and 1 / sqrt(mean square + eps).
TD_HD inline float rmsnorm_element(const RmsNormArgs& a, const float* x, std::int64_t i, float mean, float inv) {
  float w = a.weight != nullptr ? a.weight[i] : 1.0f;
  if (a.weight_plus_one && a.weight != nullptr && !a.subtract_mean) w = 1.0f + w;
  return (x[i] - mean) * inv * w;
}

TD_HD inline float rmsnorm_inv(const RmsNormArgs& a, const float* squares) {
  return 1.0f / sqrtf(sum_slots(0.0f, squares) / float(a.n) + a.eps);
}

// The host's row: the slots one after another. The CUDA executor runs a warp per row.
TD_HD inline void rmsnorm_row(const RmsNormArgs& a, std::int64_t r) {
  const float* x = a.x + r * a.n;
  float* out = a.out + r * a.n;
  float slots[kSlots];
  float mean = 0.0f;
  if (a.subtract_mean) {
    for (int s = 0; s < kSlots; ++s) slots[s] = rmsnorm_slot(x, a.n, s, 0.0f, false);
    mean = sum_slots(0.0f, slots) / float(a.n);
  }
  for (int s = 0; s < kSlots; ++s) slots[s] = rmsnorm_slot(x, a.n, s, mean, true);
  const float inv = rmsnorm_inv(a, slots);
  for (std::int64_t i = 0; i < a.n; ++i) out[i] = rmsnorm_element(a, x, i, mean, inv);
}

void validate(const RmsNormArgs& a);
void rmsnorm_host(const RmsNormArgs& a);
void rmsnorm_cuda(const RmsNormArgs& a, CudaStream stream);

}  // namespace tapdiff::engine
