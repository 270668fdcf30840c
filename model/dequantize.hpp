// CPU dequantization of GGUF tensor data to float32 (the reference's path; the engine has its
// own device kernels).
#pragma once

#include <cstdint>
#include <vector>

#include "model/ggml_type.hpp"
#include "model/gguf.hpp"

namespace tapdiff {

// Decodes `n` elements (a multiple of the type's block size) from `src` into `dst`.
void dequantize_row(GgmlType type, const void* src, float* dst, std::int64_t n);
// The whole tensor, in ggml order (row-major [ne[1]][ne[0]] for a matrix).
std::vector<float> dequantize_tensor(const GgufTensorInfo& tensor);

// One function per type, all with dequantize_row's contract.
void dequantize_row_f32(const void* src, float* dst, std::int64_t n);
void dequantize_row_f16(const void* src, float* dst, std::int64_t n);
void dequantize_row_bf16(const void* src, float* dst, std::int64_t n);
void dequantize_row_q4_0(const void* src, float* dst, std::int64_t n);
void dequantize_row_q4_1(const void* src, float* dst, std::int64_t n);
void dequantize_row_q5_0(const void* src, float* dst, std::int64_t n);
void dequantize_row_q5_1(const void* src, float* dst, std::int64_t n);
void dequantize_row_q8_0(const void* src, float* dst, std::int64_t n);
void dequantize_row_q4_k(const void* src, float* dst, std::int64_t n);
void dequantize_row_q5_k(const void* src, float* dst, std::int64_t n);
void dequantize_row_q6_k(const void* src, float* dst, std::int64_t n);

}  // namespace tapdiff
