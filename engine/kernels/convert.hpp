// Convert between storage types: dst[i] = src[i] read as src_type, stored as dst_type
// (rounded to nearest even when narrowing). Packs activations into 16-bit GEMM inputs,
// typed weights and KV cache rows, and decodes them back for taps.
#pragma once

#include <cstdint>

#include "engine/device/stream.hpp"
#include "engine/kernels/element.hpp"

namespace tapdiff::engine {

struct ConvertArgs {
  const void* src = nullptr;  // (n,) src_type
  ElemType src_type = ElemType::f32;
  void* dst = nullptr;  // (n,) dst_type
  ElemType dst_type = ElemType::f32;
  std::int64_t n = 0;
};

TD_HD inline void convert_body(const ConvertArgs& a, std::int64_t i) {
  store_element(a.dst, a.dst_type, i, load_element(a.src, a.src_type, i));
}

void validate(const ConvertArgs& a);
void convert_host(const ConvertArgs& a);
void convert_cuda(const ConvertArgs& a, CudaStream stream);

}  // namespace tapdiff::engine
