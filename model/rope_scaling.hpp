// RoPE scaling for contexts past the trained one, as `{arch}.rope.scaling.*` declares it
// (model/config.cpp reads it; the reference and the engine each compute the angles on their own):
#pragma once

#include <cmath>

namespace tapdiff {

//   linear: every angle divided by `factor` (position interpolation; Gemma 3's global layers);
//   yarn:   pair i's angle mixes the interpolated angle θ/factor and the original θ by a ramp
//           over the pairs between the correction dims of beta_fast and beta_slow rotations in
//           n_ctx_orig positions, and cos and sin are scaled by attn_factor (1 + 0.1 ln factor).
//   longrope: Phi-3's LongRoPE: pair i's angle divided by a factor of its own, the short factors
//           (rope_factors_short) for a run within n_ctx_orig positions, the long ones past it
//           (llama.cpp's choice, by the run's context), and cos and sin times attn_factor.
enum class RopeScalingType { none, linear, yarn, longrope };

struct RopeScaling {
  RopeScalingType type = RopeScalingType::none;
  float factor = 1.0f;     // > 1: positions (linear) or low frequencies (yarn) slowed this much
  int n_ctx_orig = 0;      // yarn, longrope: the context the model was trained with before the extension
  float beta_fast = 32.0f;
  float beta_slow = 1.0f;
  float attn_factor = 1.0f;  // yarn: cos and sin times attn_factor · (1 + 0.1 ln factor); longrope: times it

  bool scales() const { return type != RopeScalingType::none; }
  // cos and sin scaled too, so that position 0 (angle 0) is not left as it was.
  bool scales_magnitude() const {
    if (type == RopeScalingType::yarn) return std::abs(attn_factor * (0.1 * std::log(double(factor)) + 1) - 1) > 1e-6;
    return type == RopeScalingType::longrope && attn_factor != 1.0f;
  }
};

}  // namespace tapdiff
