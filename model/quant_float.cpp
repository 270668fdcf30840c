// F32, F16 and BF16: element-wise storage, no blocks.
#include <cstring>

#include "model/dequantize.hpp"
#include "model/half.hpp"
#include "model/quantize.hpp"

namespace tapdiff {

void dequantize_row_f32(const void* src, float* dst, std::int64_t n) {
  std::memcpy(dst, src, static_cast<std::size_t>(n) * sizeof(float));
}

void dequantize_row_f16(const void* src, float* dst, std::int64_t n) {
  const auto* b = static_cast<const std::uint8_t*>(src);
  for (std::int64_t i = 0; i < n; ++i) {
    std::uint16_t h;
    std::memcpy(&h, b + 2 * i, 2);
    dst[i] = fp16_to_fp32(h);
  }
}

void dequantize_row_bf16(const void* src, float* dst, std::int64_t n) {
  const auto* b = static_cast<const std::uint8_t*>(src);
  for (std::int64_t i = 0; i < n; ++i) {
    std::uint16_t h;
    std::memcpy(&h, b + 2 * i, 2);
    dst[i] = bf16_to_fp32(h);
  }
}

void quantize_row_f32(const float* src, void* dst, std::int64_t n) {
  std::memcpy(dst, src, static_cast<std::size_t>(n) * sizeof(float));
}

void quantize_row_f16(const float* src, void* dst, std::int64_t n) {
  auto* b = static_cast<std::uint8_t*>(dst);
  for (std::int64_t i = 0; i < n; ++i) {
    const std::uint16_t h = fp32_to_fp16(src[i]);
    std::memcpy(b + 2 * i, &h, 2);
  }
}

void quantize_row_bf16(const float* src, void* dst, std::int64_t n) {
  auto* b = static_cast<std::uint8_t*>(dst);
  for (std::int64_t i = 0; i < n; ++i) {
    const std::uint16_t h = fp32_to_bf16(src[i]);
    std::memcpy(b + 2 * i, &h, 2);
  }
}

}  // namespace tapdiff
