// Dequantization of GGUF tensor data to float32, one element per call, for every type
// model/ supports. The engine's own decoder (independent of model/'s): it reads the block
// fields straight from the bytes (blocks are packed with no alignment; little-endian), with
// ggml's float expression order so results are bit-identical to ggml's dequantize_row_*.
//
// Block layouts (model/quant_blocks.hpp), element e of a block:
//   Q4_0  d f16 | qs[16]            q = nibble(e), x = d * (q - 8)
//   Q4_1  d, m f16 | qs[16]         x = d * q + m
//   Q5_0  d | qh[4] | qs[16]        q = nibble(e) | bit e of qh << 4, x = d * (q - 16)
//   Q5_1  d, m | qh[4] | qs[16]     x = d * q + m
//   Q8_0  d | qs[32] int8           x = d * q
//   nibble(e): qs[e] low 4 bits for e < 16, qs[e - 16] high 4 bits after.
//   Q4_K  d, dmin | scales[12] | qs[128]          x = (d * sc[s]) * q - (dmin * m[s]), s = e / 32
//   Q5_K  d, dmin | scales[12] | qh[32] | qs[128]  q gains bit s of qh[e % 32] as bit 4
//   Q6_K  ql[128] | qh[64] | scales[16] int8 | d   x = (d * scales[e / 16]) * (q - 32)
#pragma once

#include <cstddef>
#include <cstdint>

#include "engine/device/stream.hpp"
#include "engine/device/td_hd.hpp"
#include "engine/kernels/half.hpp"
#include "model/ggml_type.hpp"
#include "model/quant_blocks.hpp"

namespace tapdiff::engine {

struct DequantArgs {
  const std::uint8_t* src = nullptr;  // (n / block_elems, block_bytes) GGUF-encoded blocks
  GgmlType type = GgmlType::F32;
  float* dst = nullptr;  // (n,)
  std::int64_t n = 0;    // a multiple of the type's block size
  // Fault dequant-q8-scale: the Q8_0 block scale decoded as bf16 instead of f16.
  bool q8_scale_as_bf16 = false;
  // Fault dequant-q8-unsigned: the Q8_0 quant bytes read as uint8 instead of int8.
  bool q8_quant_unsigned = false;
  // Fault dequant-q8-block-stride: Q8_0 blocks addressed every 32 bytes (the quants alone).
  bool q8_block_stride_quants = false;
};

namespace dequant_detail {

TD_HD inline std::uint16_t u16(const std::uint8_t* p) {
  return std::uint16_t(p[0] | (std::uint16_t(p[1]) << 8));
}
TD_HD inline std::uint32_t u32(const std::uint8_t* p) {
  return std::uint32_t(p[0]) | (std::uint32_t(p[1]) << 8) | (std::uint32_t(p[2]) << 16) |
         (std::uint32_t(p[3]) << 24);
}
TD_HD inline float f16(const std::uint8_t* p) { return f16_bits_to_f32(u16(p)); }

// Legacy quants: the 4 low bits of element j of a 32-element block.
TD_HD inline int nibble(const std::uint8_t* qs, int j) {
  return j < 16 ? (qs[j] & 0x0F) : (qs[j - 16] >> 4);
}

// k-quants: 6-bit scale and min of sub-block j (ggml's get_scale_min_k4).
TD_HD inline void scale_min_k4(const std::uint8_t* s, int j, int* sc, int* m) {
  if (j < 4) {
    *sc = s[j] & 63;
    *m = s[j + 4] & 63;
  } else {
    *sc = (s[j + 4] & 0x0F) | ((s[j - 4] >> 6) << 4);
    *m = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
  }
}

// Q4_K / Q5_K low 4 bits of element e: 64-element chunks share 32 bytes, the even
// sub-block in the low nibbles, the odd one in the high nibbles.
TD_HD inline int k_nibble(const std::uint8_t* qs, int e) {
  const int s = e / 32;
  return (qs[(s / 2) * 32 + e % 32] >> (4 * (s % 2))) & 0x0F;
}

TD_HD inline float q4_0(const std::uint8_t* b, int j) {
  return f16(b) * float(nibble(b + offsetof(BlockQ4_0, qs), j) - 8);
}
TD_HD inline float q4_1(const std::uint8_t* b, int j) {
  return f16(b) * float(nibble(b + offsetof(BlockQ4_1, qs), j)) + f16(b + offsetof(BlockQ4_1, m));
}
TD_HD inline float q5_0(const std::uint8_t* b, int j) {
  const int high = int((u32(b + offsetof(BlockQ5_0, qh)) >> j) & 1u);
  return f16(b) * float((nibble(b + offsetof(BlockQ5_0, qs), j) | (high << 4)) - 16);
}
TD_HD inline float q5_1(const std::uint8_t* b, int j) {
  const int high = int((u32(b + offsetof(BlockQ5_1, qh)) >> j) & 1u);
  const int q = nibble(b + offsetof(BlockQ5_1, qs), j) | (high << 4);
  return f16(b) * float(q) + f16(b + offsetof(BlockQ5_1, m));
}
TD_HD inline float q8_0(const std::uint8_t* b, int j, bool scale_as_bf16, bool quant_unsigned) {
  // The fault branch reads the fp16 scale's bits as a bf16: a 16-bit float-type mix-up.
  const float d = scale_as_bf16 ? bf16_bits_to_f32(u16(b)) : f16(b);
  const std::uint8_t q = b[offsetof(BlockQ8_0, qs) + j];
  // The other fault branch loads the quant through an unsigned type: -1 reads as 255.
  if (quant_unsigned) return d * float(q);
  return d * float(static_cast<std::int8_t>(q));
}
TD_HD inline float q4_k(const std::uint8_t* b, int e) {
  int sc = 0, m = 0;
  scale_min_k4(b + offsetof(BlockQ4_K, scales), e / 32, &sc, &m);
  const float d1 = f16(b) * float(sc), m1 = f16(b + offsetof(BlockQ4_K, dmin)) * float(m);
  return d1 * float(k_nibble(b + offsetof(BlockQ4_K, qs), e)) - m1;
}
TD_HD inline float q5_k(const std::uint8_t* b, int e) {
  int sc = 0, m = 0;
  scale_min_k4(b + offsetof(BlockQ5_K, scales), e / 32, &sc, &m);
  const float d1 = f16(b) * float(sc), m1 = f16(b + offsetof(BlockQ5_K, dmin)) * float(m);
  const int high = (b[offsetof(BlockQ5_K, qh) + e % 32] >> (e / 32)) & 1;
  return d1 * float(k_nibble(b + offsetof(BlockQ5_K, qs), e) | (high << 4)) - m1;
}
TD_HD inline float q6_k(const std::uint8_t* b, int e) {
  // Each 128-element half owns 64 bytes of ql and 32 of qh; its quarter k (32 elements)
  // takes low (k < 2) or high nibbles of ql[32 (k % 2) + l] and bits 2k, 2k+1 of qh[l].
  const int half = e / 128, k = (e % 128) / 32, l = e % 32;
  const std::uint8_t* ql = b + offsetof(BlockQ6_K, ql) + half * 64 + (k % 2) * 32 + l;
  const std::uint8_t* qh = b + offsetof(BlockQ6_K, qh) + half * 32 + l;
  const int q = ((*ql >> (4 * (k / 2))) & 0x0F) | (((*qh >> (2 * k)) & 3) << 4);
  const auto scale = static_cast<std::int8_t>(b[offsetof(BlockQ6_K, scales) + e / 16]);
  const float d1 = f16(b + offsetof(BlockQ6_K, d)) * float(scale);
  return d1 * float(q - 32);
}

}  // namespace dequant_detail

// Element i of the tensor.
TD_HD inline float dequant_element(const DequantArgs& a, std::int64_t i) {
  namespace dd = dequant_detail;
  const std::uint8_t* s = a.src;
  switch (a.type) {
    case GgmlType::F32:
      return bits_f32(dd::u32(s + 4 * i));
    case GgmlType::F16:
      return dd::f16(s + 2 * i);
    case GgmlType::BF16:
      return bf16_bits_to_f32(dd::u16(s + 2 * i));
    case GgmlType::Q4_0:
      return dd::q4_0(s + (i / kQK) * sizeof(BlockQ4_0), int(i % kQK));
    case GgmlType::Q4_1:
      return dd::q4_1(s + (i / kQK) * sizeof(BlockQ4_1), int(i % kQK));
    case GgmlType::Q5_0:
      return dd::q5_0(s + (i / kQK) * sizeof(BlockQ5_0), int(i % kQK));
    case GgmlType::Q5_1:
      return dd::q5_1(s + (i / kQK) * sizeof(BlockQ5_1), int(i % kQK));
    case GgmlType::Q8_0:
      // The fault's stride forgets the block's 2-byte scale: sizeof(qs) instead of the block's.
      return dd::q8_0(s + (i / kQK) * (a.q8_block_stride_quants ? sizeof(BlockQ8_0::qs)
                                                                  : sizeof(BlockQ8_0)),
                      int(i % kQK), a.q8_scale_as_bf16, a.q8_quant_unsigned);
    case GgmlType::Q4_K:
      return dd::q4_k(s + (i / kQK_K) * sizeof(BlockQ4_K), int(i % kQK_K));
    case GgmlType::Q5_K:
      return dd::q5_k(s + (i / kQK_K) * sizeof(BlockQ5_K), int(i % kQK_K));
    case GgmlType::Q6_K:
      return dd::q6_k(s + (i / kQK_K) * sizeof(BlockQ6_K), int(i % kQK_K));
  }
  return 0.0f;
}

TD_HD inline void dequant_body(const DequantArgs& a, std::int64_t i) {
  a.dst[i] = dequant_element(a, i);
}

void validate(const DequantArgs& a);  // throws std::invalid_argument
void dequant_host(const DequantArgs& a);
void dequant_cuda(const DequantArgs& a, CudaStream stream);

}  // namespace tapdiff::engine
