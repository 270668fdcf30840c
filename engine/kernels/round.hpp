// Precision rounding in place: x[i] becomes the value it has when stored as `to` (f16 or
// bf16, round to nearest even). Applied where a real engine stores an activation in 16 bits.
#pragma once

#include <cstdint>

#include "engine/device/stream.hpp"
#include "engine/kernels/element.hpp"

namespace tapdiff::engine {

struct RoundArgs {
  float* x = nullptr;  // (n,)
  std::int64_t n = 0;
  ElemType to = ElemType::f32;
};

TD_HD inline void round_body(const RoundArgs& a, std::int64_t i) {
  a.x[i] = round_to(a.to, a.x[i]);
}

void validate(const RoundArgs& a);
void round_host(const RoundArgs& a);
void round_cuda(const RoundArgs& a, CudaStream stream);

}  // namespace tapdiff::engine
