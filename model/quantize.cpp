#include "model/quantize.hpp"

#include <stdexcept>

namespace tapdiff {

void quantize_row(GgmlType type, const float* src, void* dst, std::int64_t n) {
  if (n % ggml_type_traits(type).block_elems != 0)
    throw std::invalid_argument("quantize_row: n is not a multiple of the block size");
  switch (type) {
    case GgmlType::F32: return quantize_row_f32(src, dst, n);
    case GgmlType::F16: return quantize_row_f16(src, dst, n);
    case GgmlType::BF16: return quantize_row_bf16(src, dst, n);
    case GgmlType::Q4_0: return quantize_row_q4_0(src, dst, n);
    case GgmlType::Q4_1: return quantize_row_q4_1(src, dst, n);
    case GgmlType::Q5_0: return quantize_row_q5_0(src, dst, n);
    case GgmlType::Q5_1: return quantize_row_q5_1(src, dst, n);
    case GgmlType::Q8_0: return quantize_row_q8_0(src, dst, n);
    case GgmlType::Q4_K: return quantize_row_q4_k(src, dst, n);
    case GgmlType::Q5_K: return quantize_row_q5_k(src, dst, n);
    case GgmlType::Q6_K: return quantize_row_q6_k(src, dst, n);
  }
  throw std::invalid_argument("quantize_row: unsupported type");
}

std::vector<std::uint8_t> quantize(GgmlType type, const std::vector<float>& values) {
  const auto& t = ggml_type_traits(type);
  const auto n = static_cast<std::int64_t>(values.size());
  if (n % t.block_elems != 0)
    throw std::invalid_argument("quantize: value count is not a multiple of the block size");
  std::vector<std::uint8_t> out(static_cast<std::size_t>(n / t.block_elems * t.block_bytes));
  quantize_row(type, values.data(), out.data(), n);
  return out;
}

}  // namespace tapdiff
