// Residual add in place: x[i] += scale · y[i] (Granite's residual multiplier; 1 elsewhere).
#pragma once

#include <cstdint>

#include "engine/device/stream.hpp"
#include "engine/device/td_hd.hpp"

namespace tapdiff::engine {

struct AddArgs {
  float* x = nullptr;        // (n,)
  const float* y = nullptr;  // (n,)
  std::int64_t n = 0;
  float scale = 1.0f;
  // Fault resid-attn-dropped: the kernel's copy mode (x = y) where an add belonged.
  bool copy = false;
};

TD_HD inline void add_body(const AddArgs& a, std::int64_t i) {
  if (a.copy) {
    a.x[i] = a.scale * a.y[i];
    return;
  }
  a.x[i] += a.scale * a.y[i];
}

void validate(const AddArgs& a);
void add_host(const AddArgs& a);
void add_cuda(const AddArgs& a, CudaStream stream);

}  // namespace tapdiff::engine
