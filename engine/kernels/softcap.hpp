// Soft-capping in place: x[i] = cap · tanh(x[i] / cap) (Gemma 2's final logits).
#pragma once

#include <cstdint>
#include <math.h>

#include "engine/device/stream.hpp"
#include "engine/device/td_hd.hpp"

namespace tapdiff::engine {

struct SoftcapArgs {
  float* x = nullptr;  // (n,)
  std::int64_t n = 0;
  float cap = 0.0f;  // > 0
};

TD_HD inline void softcap_body(const SoftcapArgs& a, std::int64_t i) { a.x[i] = a.cap * tanhf(a.x[i] / a.cap); }

void validate(const SoftcapArgs& a);
void softcap_host(const SoftcapArgs& a);
void softcap_cuda(const SoftcapArgs& a, CudaStream stream);

}  // namespace tapdiff::engine
