// Scaling in place: x[i] *= factor (Granite's logits, divided by its logit scale).
#pragma once

#include <cstdint>

#include "engine/device/stream.hpp"
#include "engine/device/td_hd.hpp"

namespace tapdiff::engine {

struct ScaleArgs {
  float* x = nullptr;  // (n,)
  std::int64_t n = 0;
  float factor = 1.0f;  // finite
};

TD_HD inline void scale_body(const ScaleArgs& a, std::int64_t i) { a.x[i] *= a.factor; }

void validate(const ScaleArgs& a);
void scale_host(const ScaleArgs& a);
void scale_cuda(const ScaleArgs& a, CudaStream stream);

}  // namespace tapdiff::engine
