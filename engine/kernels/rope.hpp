// RoPE in place, per (row, pair) for every head, each row at its own position:
//   θ_i = position · base^(-2i / n_rot) / f_i,  i < n_rot / 2  (f_i: frequency factors, or 1)
//   (a, b) ← (a cos θ_i − b sin θ_i,  a sin θ_i + b cos θ_i)
// norm pairs (x[2i], x[2i+1]); neox pairs (x[i], x[i + n_rot/2]). Dimensions past n_rot are
// left alone. θ, cos and sin are computed in double, then rounded to float.
#pragma once

#include <cstdint>
#include <math.h>

#include "engine/device/stream.hpp"
#include "engine/device/td_hd.hpp"
#include "model/config.hpp"

namespace tapdiff::engine {

struct RopeArgs {
  float* x = nullptr;                       // (n_rows, n_heads, head_dim)
  const std::int32_t* positions = nullptr;  // (n_rows,)
  std::int64_t n_rows = 0;
  int n_heads = 0;
  int head_dim = 0;
  int n_rot = 0;  // even, <= head_dim
  float base = 10000.0f;
  RopePairing pairing = RopePairing::norm;
  // The exponent's denominator: 0 means n_rot. Fault rope-freq-n-embd sets the model width.
  int freq_dim = 0;
  const float* freq_factors = nullptr;  // (n_rot / 2,) Llama 3.1's rope_freqs; nullptr: all 1
};

// Pair i of every head of row index / (n_rot / 2): θ once, rotated into each head.
TD_HD inline void rope_pair(const RopeArgs& a, std::int64_t index) {
  const int half = a.n_rot / 2;
  const int i = int(index % half);
  const std::int64_t row = index / half;
  const int freq_dim = a.freq_dim > 0 ? a.freq_dim : a.n_rot;
  const double theta = double(a.positions[row]) * pow(double(a.base), -2.0 * i / freq_dim) /
                       (a.freq_factors != nullptr ? double(a.freq_factors[i]) : 1.0);
  const float c = float(cos(theta)), s = float(sin(theta));
  const int ia = a.pairing == RopePairing::norm ? 2 * i : i;
  const int ib = a.pairing == RopePairing::norm ? 2 * i + 1 : i + half;
  for (int h = 0; h < a.n_heads; ++h) {
    float* head = a.x + (row * a.n_heads + h) * a.head_dim;
    const float x0 = head[ia], x1 = head[ib];
    head[ia] = x0 * c - x1 * s;
    head[ib] = x0 * s + x1 * c;
  }
}

void validate(const RopeArgs& a);
void rope_host(const RopeArgs& a);
void rope_cuda(const RopeArgs& a, CudaStream stream);

}  // namespace tapdiff::engine
