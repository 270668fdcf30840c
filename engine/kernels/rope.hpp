// RoPE in place, per (row, pair) for every head, each row at its own position:
//   θ_i = position · base^(-2i / n_rot) / f_i,  i < n_rot / 2  (f_i: frequency factors, or 1)
//   (a, b) ← (a cos θ_i − b sin θ_i,  a sin θ_i + b cos θ_i)
// norm pairs (x[2i], x[2i+1]); neox pairs (x[i], x[i + n_rot/2]). Dimensions past n_rot are
// left alone. θ, cos and sin are computed in double, then rounded to float.
// RoPE scaling takes ggml's rope_ext parameters: θ_i becomes freq_scale · θ_i, moved back toward
// θ_i by ext_factor · ramp(i), the ramp 1 below corr_low falling to 0 at corr_high; cos and sin
// are times mscale, and under ext_factor times 1 + 0.1 ln(1 / freq_scale) as well (YaRN).
#pragma once

#include <cstdint>
#include <math.h>

#include "engine/device/stream.hpp"
#include "engine/device/td_hd.hpp"
#include "model/config.hpp"
#include "model/rope_scaling.hpp"

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
  float freq_scale = 1.0f;  // 1 / the scaling factor (linear, yarn)
  float ext_factor = 0.0f;  // 1 under yarn
  float corr_low = 0.0f, corr_high = 0.0f;
  float mscale = 1.0f;      // yarn's and longrope's attn_factor
};

// The scaling parameters of `s` for a rotation at `a.base` over the exponent's dims n (n_rot, or
// freq_dim). The correction dims: the pair index at which a wave of the original context turns
// beta times, floor and ceil of n · ln(n_ctx_orig / (2π beta)) / (2 ln base), clamped to [0, n - 1].
inline void rope_scale(RopeArgs& a, const RopeScaling& s) {
  if (s.type == RopeScalingType::longrope) a.mscale = s.attn_factor;  // its factors are freq_factors
  if (s.type != RopeScalingType::linear && s.type != RopeScalingType::yarn) return;
  a.freq_scale = 1.0f / s.factor;
  if (s.type != RopeScalingType::yarn) return;
  const int dims = a.freq_dim > 0 ? a.freq_dim : a.n_rot;
  const auto corr_dim = [&](double beta) {
    return dims * log(double(s.n_ctx_orig) / (beta * 2 * M_PI)) / (2 * log(double(a.base)));
  };
  a.ext_factor = 1.0f;
  a.corr_low = float(fmax(0.0, floor(corr_dim(s.beta_fast))));
  a.corr_high = float(fmin(double(dims - 1), ceil(corr_dim(s.beta_slow))));
  a.mscale = s.attn_factor;
}

// Pair i of every head of row index / (n_rot / 2): θ once, rotated into each head.
TD_HD inline void rope_pair(const RopeArgs& a, std::int64_t index) {
  const int half = a.n_rot / 2;
  const int i = int(index % half);
  const std::int64_t row = index / half;
  const int freq_dim = a.freq_dim > 0 ? a.freq_dim : a.n_rot;
  const double extrapolated = double(a.positions[row]) * pow(double(a.base), -2.0 * i / freq_dim) /
                              (a.freq_factors != nullptr ? double(a.freq_factors[i]) : 1.0);
  double mix = 0.0, m = a.mscale;
  if (a.ext_factor != 0.0f) {
    const double y = (i - double(a.corr_low)) / fmax(0.001, double(a.corr_high) - double(a.corr_low));
    mix = (1.0 - fmin(1.0, fmax(0.0, y))) * a.ext_factor;
    m *= 1.0 + 0.1 * log(1.0 / double(a.freq_scale));
  }
  const double theta = double(a.freq_scale) * extrapolated * (1.0 - mix) + extrapolated * mix;
  const float c = float(cos(theta) * m), s = float(sin(theta) * m);
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
