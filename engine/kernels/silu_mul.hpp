// SwiGLU activation: out[i] = silu(gate[i]) · up[i], silu(x) = x / (1 + e^-x).
#pragma once

#include <cstdint>
#include <math.h>

#include "engine/device/stream.hpp"
#include "engine/device/td_hd.hpp"

namespace tapdiff::engine {

struct SiluMulArgs {
  const float* gate = nullptr;  // (n,)
  const float* up = nullptr;    // (n,)
  float* out = nullptr;         // (n,)
  std::int64_t n = 0;
  // Fault ffn-gelu-for-silu: a GeGLU kernel's activation, gelu (tanh approximation) of gate.
  bool gelu = false;
};

TD_HD inline void silu_mul_body(const SiluMulArgs& a, std::int64_t i) {
  const float g = a.gate[i];
  if (a.gelu) {
    const float inner = 0.7978845608f * (g + 0.044715f * g * g * g);  // sqrt(2/pi) (g + c g^3)
    a.out[i] = 0.5f * g * (1.0f + tanhf(inner)) * a.up[i];
    return;
  }
  a.out[i] = g / (1.0f + expf(-g)) * a.up[i];
}

void validate(const SiluMulArgs& a);
void silu_mul_host(const SiluMulArgs& a);
void silu_mul_cuda(const SiluMulArgs& a, CudaStream stream);

}  // namespace tapdiff::engine
