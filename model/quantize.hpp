// Simple, correct block encoders for every supported type: they make fixture models. Not
// tuned for quality like llama.cpp's importance-weighted quantizers; round-to-nearest with the
// block's absolute maximum (or min/max range) setting the scale.
#pragma once

#include <cstdint>
#include <vector>

#include "model/ggml_type.hpp"

namespace tapdiff {

// Encodes `n` floats (a multiple of the type's block size) into `dst`
// (n / block_elems * block_bytes bytes).
void quantize_row(GgmlType type, const float* src, void* dst, std::int64_t n);
std::vector<std::uint8_t> quantize(GgmlType type, const std::vector<float>& values);

void quantize_row_f32(const float* src, void* dst, std::int64_t n);
void quantize_row_f16(const float* src, void* dst, std::int64_t n);
void quantize_row_bf16(const float* src, void* dst, std::int64_t n);
void quantize_row_q4_0(const float* src, void* dst, std::int64_t n);
void quantize_row_q4_1(const float* src, void* dst, std::int64_t n);
void quantize_row_q5_0(const float* src, void* dst, std::int64_t n);
void quantize_row_q5_1(const float* src, void* dst, std::int64_t n);
void quantize_row_q8_0(const float* src, void* dst, std::int64_t n);
void quantize_row_q4_k(const float* src, void* dst, std::int64_t n);
void quantize_row_q5_k(const float* src, void* dst, std::int64_t n);
void quantize_row_q6_k(const float* src, void* dst, std::int64_t n);

}  // namespace tapdiff
