#include "model/dequantize.hpp"

#include <stdexcept>

namespace tapdiff {

void dequantize_row(GgmlType type, const void* src, float* dst, std::int64_t n) {
  if (n % ggml_type_traits(type).block_elems != 0)
    throw std::invalid_argument("dequantize_row: n is not a multiple of the block size");
  switch (type) {
    case GgmlType::F32: return dequantize_row_f32(src, dst, n);
    case GgmlType::F16: return dequantize_row_f16(src, dst, n);
    case GgmlType::BF16: return dequantize_row_bf16(src, dst, n);
    case GgmlType::Q4_0: return dequantize_row_q4_0(src, dst, n);
    case GgmlType::Q4_1: return dequantize_row_q4_1(src, dst, n);
    case GgmlType::Q5_0: return dequantize_row_q5_0(src, dst, n);
    case GgmlType::Q5_1: return dequantize_row_q5_1(src, dst, n);
    case GgmlType::Q8_0: return dequantize_row_q8_0(src, dst, n);
    case GgmlType::Q4_K: return dequantize_row_q4_k(src, dst, n);
    case GgmlType::Q5_K: return dequantize_row_q5_k(src, dst, n);
    case GgmlType::Q6_K: return dequantize_row_q6_k(src, dst, n);
  }
  throw std::invalid_argument("dequantize_row: unsupported type");
}

std::vector<float> dequantize_tensor(const GgufTensorInfo& tensor) {
  std::vector<float> out(tensor.n_elements);
  dequantize_row(tensor.type, tensor.data, out.data(), static_cast<std::int64_t>(out.size()));
  return out;
}

}  // namespace tapdiff
