// Typed element access for buffers stored as f32, f16 or bf16: loads widen exactly, stores
// round to nearest even.
#pragma once

#include <cstdint>

#include "engine/device/elem_type.hpp"
#include "engine/device/td_hd.hpp"
#include "engine/kernels/half.hpp"

namespace tapdiff::engine {

TD_HD inline float load_element(const void* base, ElemType type, std::int64_t i) {
  switch (type) {
    case ElemType::f16:
      return f16_bits_to_f32(static_cast<const std::uint16_t*>(base)[i]);
    case ElemType::bf16:
      return bf16_bits_to_f32(static_cast<const std::uint16_t*>(base)[i]);
    case ElemType::f32:
      break;
  }
  return static_cast<const float*>(base)[i];
}

TD_HD inline void store_element(void* base, ElemType type, std::int64_t i, float value) {
  switch (type) {
    case ElemType::f16:
      static_cast<std::uint16_t*>(base)[i] = f32_to_f16_bits(value);
      return;
    case ElemType::bf16:
      static_cast<std::uint16_t*>(base)[i] = f32_to_bf16_bits(value);
      return;
    case ElemType::f32:
      break;
  }
  static_cast<float*>(base)[i] = value;
}

// The value `value` becomes when stored as `type`.
TD_HD inline float round_to(ElemType type, float value) {
  switch (type) {
    case ElemType::f16:
      return round_to_f16(value);
    case ElemType::bf16:
      return round_to_bf16(value);
    case ElemType::f32:
      break;
  }
  return value;
}

// x[0..n) rounded to `type` in place, the type's loop chosen once; eight at a time (a loop
// of fixed count the host compiler vectorizes), then the rest.
TD_HD inline void round_run(ElemType type, float* x, int n) {
  if (type == ElemType::f32) return;
  int i = 0;
  if (type == ElemType::f16) {
    for (; i + 8 <= n; i += 8)
      for (int u = 0; u < 8; ++u) x[i + u] = round_to_f16(x[i + u]);
    for (; i < n; ++i) x[i] = round_to_f16(x[i]);
  } else {
    for (; i + 8 <= n; i += 8)
      for (int u = 0; u < 8; ++u) x[i + u] = round_to_bf16(x[i + u]);
    for (; i < n; ++i) x[i] = round_to_bf16(x[i]);
  }
}

}  // namespace tapdiff::engine
