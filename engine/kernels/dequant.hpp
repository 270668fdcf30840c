// Decoding of GGUF tensor data to float32 for every type model/ supports: the engine's own
// decoder (independent of model/'s), shared by every kernel that reads a weight in its GGUF
// encoding: dequantize (into a scratch matrix for a GEMM, a norm weight, a weight tap), matvec
// (decode GEMVs) and embed. It reads the block fields straight from the bytes (blocks are
// packed with no alignment; little-endian), block by block in ggml's loop order and float
// expression order, so results are bit-identical to ggml's dequantize_row_*.
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
#include <cstring>

#include "engine/device/stream.hpp"
#include "engine/device/td_hd.hpp"
#include "engine/kernels/element.hpp"
#include "model/ggml_type.hpp"
#include "model/quant_blocks.hpp"

namespace tapdiff::engine {

// Decoder bugs the fault catalogue plants (engine/faults.hpp); all false in a correct run.
struct DequantQuirks {
  // Fault dequant-q8-scale: the Q8_0 block scale decoded as bf16 instead of f16.
  bool q8_scale_as_bf16 = false;
  // Fault dequant-q8-unsigned: the Q8_0 quant bytes read as uint8 instead of int8.
  bool q8_quant_unsigned = false;
  // Fault dequant-q8-block-stride: Q8_0 blocks addressed every 32 bytes (the quants alone).
  bool q8_block_stride_quants = false;

  TD_HD bool any() const { return q8_scale_as_bf16 || q8_quant_unsigned || q8_block_stride_quants; }
};

// A tensor in its GGUF encoding, as a kernel reads it.
struct Encoded {
  const std::uint8_t* bytes = nullptr;  // (n / block_elems, block_bytes) GGUF-encoded blocks
  GgmlType type = GgmlType::F32;
  DequantQuirks quirks = {};
};

// Elements decoded at a time: one Q4_K/Q5_K/Q6_K block, eight legacy blocks.
inline constexpr int kDecodeRun = 256;

// The length of the run that starts `remaining` elements before the end.
TD_HD inline int run_length(std::int64_t remaining) {
  return int(remaining < kDecodeRun ? remaining : kDecodeRun);
}

namespace dequant_detail {

TD_HD inline std::uint16_t u16(const std::uint8_t* p) {
  return std::uint16_t(p[0] | (std::uint16_t(p[1]) << 8));
}
TD_HD inline std::uint32_t u32(const std::uint8_t* p) {
  return std::uint32_t(p[0]) | (std::uint32_t(p[1]) << 8) | (std::uint32_t(p[2]) << 16) |
         (std::uint32_t(p[3]) << 24);
}
TD_HD inline float f16(const std::uint8_t* p) { return f16_bits_to_f32(u16(p)); }

// len 16-bit floats (bf16 or f16) widened, eight at a time (a loop the host compiler
// vectorizes), then the rest.
TD_HD inline void widen_run(const std::uint8_t* p, int len, float* out, bool bf16) {
  int i = 0;
  if (bf16) {
    for (; i + 8 <= len; i += 8)
      for (int u = 0; u < 8; ++u) out[i + u] = bf16_bits_to_f32(u16(p + 2 * (i + u)));
    for (; i < len; ++i) out[i] = bf16_bits_to_f32(u16(p + 2 * i));
  } else {
    for (; i + 8 <= len; i += 8)
      for (int u = 0; u < 8; ++u) out[i + u] = f16(p + 2 * (i + u));
    for (; i < len; ++i) out[i] = f16(p + 2 * i);
  }
}

// The integers of the block layouts, shared by the float decoders below and matmul_q8's
// integer unpacking (kernels/matmul_q8.hpp).

// Q4_K / Q5_K: the eight sub-blocks' 6-bit scales sc[j] and mins m[j] (ggml's
// get_scale_min_k4 of j = 0..7) from the 12 packed bytes, four at a time in 32-bit words.
// Bytes 0-3 hold sc[0..3] in their low 6 bits, 4-7 m[0..3]; bytes 8-11 the low 4 bits of
// sc[4..7] and, high, of m[4..7], whose top 2 bits are the top bits of bytes 0-3 and 4-7.
// Kept as two little-endian 64-bit words, sc[0..7] and m[0..7]: vector code moves them into a
// register without a round trip through memory (a load of bytes just stored waits for them).
struct KScales {
  std::uint64_t sc, m;
  TD_HD unsigned scale(int j) const { return unsigned(sc >> (8 * j)) & 0xffu; }
  TD_HD unsigned min(int j) const { return unsigned(m >> (8 * j)) & 0xffu; }
};
TD_HD inline KScales k_scales_mins(const std::uint8_t* packed) {
  constexpr std::uint32_t kLow6 = 0x3f3f3f3fu, kLow4 = 0x0f0f0f0fu, kLow2 = 0x03030303u;
  const std::uint32_t w0 = u32(packed), w1 = u32(packed + 4), w2 = u32(packed + 8);
  const std::uint32_t sc_high = (w2 & kLow4) | (((w0 >> 6) & kLow2) << 4);
  const std::uint32_t m_high = ((w2 >> 4) & kLow4) | (((w1 >> 6) & kLow2) << 4);
  return {(w0 & kLow6) | std::uint64_t(sc_high) << 32, (w1 & kLow6) | std::uint64_t(m_high) << 32};
}

// Q5_0 / Q5_1: the 5-bit integers of a block, the nibbles of qs with bit 4 from qh.
TD_HD inline void q5_ints(const std::uint8_t* qh_bytes, const std::uint8_t* qs, std::int8_t* q) {
  const std::uint32_t qh = u32(qh_bytes);
  for (int j = 0; j < kQK / 2; ++j) q[j] = std::int8_t((qs[j] & 0x0F) | int(((qh >> j) << 4) & 0x10));
  for (int j = 0; j < kQK / 2; ++j) q[j + kQK / 2] = std::int8_t((qs[j] >> 4) | int((qh >> (j + 12)) & 0x10));
}

// K-quant integers of sub-block j (32 elements), elements [l0, l0 + n) of it into q[0..n).
// Q4_K: the low (even j) or high nibbles of the 32 bytes of qs chunk j / 2.
TD_HD inline void q4_k_sub_ints(const std::uint8_t* __restrict__ qs, int j, std::int8_t* __restrict__ q, int l0 = 0,
                                int n = 32) {
  const std::uint8_t* ql = qs + 32 * (j / 2);
  const int shift = 4 * (j % 2);
  for (int l = l0; l < l0 + n; ++l) q[l - l0] = std::int8_t((ql[l] >> shift) & 0x0F);
}
// Q5_K: Q4_K's nibbles with bit j of qh[l] as bit 4.
TD_HD inline void q5_k_sub_ints(const std::uint8_t* __restrict__ qs, const std::uint8_t* __restrict__ qh, int j,
                                std::int8_t* __restrict__ q, int l0 = 0, int n = 32) {
  const std::uint8_t* ql = qs + 32 * (j / 2);
  const int shift = 4 * (j % 2);
  for (int l = l0; l < l0 + n; ++l) q[l - l0] = std::int8_t(((ql[l] >> shift) & 0x0F) | (((qh[l] >> j) & 1) << 4));
}
// Q6_K: the integers q - 32 of quarter k of a 128-element half, from the half's 64 bytes of ql
// and 32 of qh: the low (k < 2) or high nibbles of ql[32 (k % 2) + l] and bits 2k, 2k+1 of qh[l].
TD_HD inline void q6_k_quarter_ints(const std::uint8_t* __restrict__ ql, const std::uint8_t* __restrict__ qh, int k,
                                    std::int8_t* __restrict__ q, int l0 = 0, int n = 32) {
  const std::uint8_t* lo = ql + 32 * (k % 2);
  const int shift = 4 * (k / 2);
  for (int l = l0; l < l0 + n; ++l)
    q[l - l0] = std::int8_t(int(((lo[l] >> shift) & 0x0F) | (((qh[l] >> (2 * k)) & 3) << 4)) - 32);
}

// One block each, into y[0..block_elems).
TD_HD inline void q4_0(const std::uint8_t* b, float* y) {
  const float d = f16(b);
  const std::uint8_t* qs = b + offsetof(BlockQ4_0, qs);
  for (int j = 0; j < kQK / 2; ++j) y[j] = float((qs[j] & 0x0F) - 8) * d;
  for (int j = 0; j < kQK / 2; ++j) y[j + kQK / 2] = float((qs[j] >> 4) - 8) * d;
}
TD_HD inline void q4_1(const std::uint8_t* b, float* y) {
  const float d = f16(b), m = f16(b + offsetof(BlockQ4_1, m));
  const std::uint8_t* qs = b + offsetof(BlockQ4_1, qs);
  for (int j = 0; j < kQK / 2; ++j) y[j] = float(qs[j] & 0x0F) * d + m;
  for (int j = 0; j < kQK / 2; ++j) y[j + kQK / 2] = float(qs[j] >> 4) * d + m;
}
TD_HD inline void q5_0(const std::uint8_t* b, float* y) {
  const float d = f16(b);
  std::int8_t q[kQK];
  q5_ints(b + offsetof(BlockQ5_0, qh), b + offsetof(BlockQ5_0, qs), q);
  for (int j = 0; j < kQK; ++j) y[j] = float(q[j] - 16) * d;
}
TD_HD inline void q5_1(const std::uint8_t* b, float* y) {
  const float d = f16(b), m = f16(b + offsetof(BlockQ5_1, m));
  std::int8_t q[kQK];
  q5_ints(b + offsetof(BlockQ5_1, qh), b + offsetof(BlockQ5_1, qs), q);
  for (int j = 0; j < kQK; ++j) y[j] = float(q[j]) * d + m;
}
TD_HD inline void q8_0(const std::uint8_t* b, float* y, const DequantQuirks& quirks) {
  // The fault branch reads the fp16 scale's bits as a bf16: a 16-bit float-type mix-up.
  const float d = quirks.q8_scale_as_bf16 ? bf16_bits_to_f32(u16(b)) : f16(b);
  const std::uint8_t* qs = b + offsetof(BlockQ8_0, qs);
  // The other fault branch loads the quants through an unsigned type: -1 reads as 255.
  if (quirks.q8_quant_unsigned) {
    for (int j = 0; j < kQK; ++j) y[j] = float(qs[j]) * d;
  } else {
    for (int j = 0; j < kQK; ++j) y[j] = float(static_cast<std::int8_t>(qs[j])) * d;
  }
}
// A Q4_K / Q5_K superblock's scales: d and dmin, and the sub-blocks' 6-bit scales and mins.
struct KSuper {
  float d, dmin;
  KScales s;
};
template <typename Block>
TD_HD inline KSuper k_super(const std::uint8_t* b) {
  return {f16(b + offsetof(Block, d)), f16(b + offsetof(Block, dmin)), k_scales_mins(b + offsetof(Block, scales))};
}

// K-quant sub-block j (32 elements) of superblock b, into y[0..32).
TD_HD inline void q4_k_sub(const std::uint8_t* b, const KSuper& k, int j, float* y) {
  const float dj = k.d * float(k.s.scale(j)), mj = k.dmin * float(k.s.min(j));
  std::int8_t q[32];
  q4_k_sub_ints(b + offsetof(BlockQ4_K, qs), j, q);
  for (int l = 0; l < 32; ++l) y[l] = dj * float(q[l]) - mj;
}
TD_HD inline void q5_k_sub(const std::uint8_t* b, const KSuper& k, int j, float* y) {
  const float dj = k.d * float(k.s.scale(j)), mj = k.dmin * float(k.s.min(j));
  std::int8_t q[32];
  q5_k_sub_ints(b + offsetof(BlockQ5_K, qs), b + offsetof(BlockQ5_K, qh), j, q);
  for (int l = 0; l < 32; ++l) y[l] = dj * float(q[l]) - mj;
}
// Each 16 elements share a scale: element e of a half has sc[e / 16] of that half's eight.
TD_HD inline void q6_k_sub(const std::uint8_t* b, float d, int j, float* y) {
  const int half = j / 4, k = j % 4;
  const auto* sc = reinterpret_cast<const std::int8_t*>(b + offsetof(BlockQ6_K, scales)) + 8 * half + 2 * k;
  std::int8_t q[32];
  q6_k_quarter_ints(b + offsetof(BlockQ6_K, ql) + 64 * half, b + offsetof(BlockQ6_K, qh) + 32 * half, k, q);
  const float d0 = d * float(sc[0]), d1 = d * float(sc[1]);
  for (int l = 0; l < 16; ++l) y[l] = d0 * float(q[l]);
  for (int l = 16; l < 32; ++l) y[l] = d1 * float(q[l]);
}
TD_HD inline void q4_k(const std::uint8_t* b, float* y) {
  const KSuper k = k_super<BlockQ4_K>(b);
  TD_UNROLL for (int j = 0; j < 8; ++j) q4_k_sub(b, k, j, y + 32 * j);
}
TD_HD inline void q5_k(const std::uint8_t* b, float* y) {
  const KSuper k = k_super<BlockQ5_K>(b);
  TD_UNROLL for (int j = 0; j < 8; ++j) q5_k_sub(b, k, j, y + 32 * j);
}
TD_HD inline void q6_k(const std::uint8_t* b, float* y) {
  const float d = f16(b + offsetof(BlockQ6_K, d));
  TD_UNROLL for (int j = 0; j < 8; ++j) q6_k_sub(b, d, j, y + 32 * j);
}

// Block b of the tensor. The fault's stride forgets Q8_0's 2-byte scale: sizeof(qs), not the block's.
TD_HD inline const std::uint8_t* block_at(const Encoded& w, std::int64_t b, std::int64_t block_bytes) {
  if (w.type == GgmlType::Q8_0 && w.quirks.q8_block_stride_quants)
    return w.bytes + b * std::int64_t(sizeof(BlockQ8_0::qs));
  return w.bytes + b * block_bytes;
}

}  // namespace dequant_detail

// Decodes elements [first, first + len) of `w` into out. first is a multiple of the type's
// block size and len <= kDecodeRun; a quantized type decodes whole blocks, so out has room for
// len rounded up to the block size (kDecodeRun always suffices).
TD_HD inline void decode_run(const Encoded& w, std::int64_t first, int len, float* out) {
  namespace dd = dequant_detail;
  const std::uint8_t* s = w.bytes;
  const std::int64_t legacy = first / kQK, k = first / kQK_K;  // the first block's index
  switch (w.type) {
    case GgmlType::F32:
      memcpy(out, s + 4 * first, std::size_t(len) * 4);  // little-endian, as the file
      return;
    case GgmlType::F16:
      return dd::widen_run(s + 2 * first, len, out, false);
    case GgmlType::BF16:
      return dd::widen_run(s + 2 * first, len, out, true);
    case GgmlType::Q4_0:
      for (int i = 0; i * kQK < len; ++i) dd::q4_0(dd::block_at(w, legacy + i, sizeof(BlockQ4_0)), out + i * kQK);
      return;
    case GgmlType::Q4_1:
      for (int i = 0; i * kQK < len; ++i) dd::q4_1(dd::block_at(w, legacy + i, sizeof(BlockQ4_1)), out + i * kQK);
      return;
    case GgmlType::Q5_0:
      for (int i = 0; i * kQK < len; ++i) dd::q5_0(dd::block_at(w, legacy + i, sizeof(BlockQ5_0)), out + i * kQK);
      return;
    case GgmlType::Q5_1:
      for (int i = 0; i * kQK < len; ++i) dd::q5_1(dd::block_at(w, legacy + i, sizeof(BlockQ5_1)), out + i * kQK);
      return;
    case GgmlType::Q8_0:
      for (int i = 0; i * kQK < len; ++i)
        dd::q8_0(dd::block_at(w, legacy + i, sizeof(BlockQ8_0)), out + i * kQK, w.quirks);
      return;
    case GgmlType::Q4_K:
      for (int i = 0; i * kQK_K < len; ++i) dd::q4_k(dd::block_at(w, k + i, sizeof(BlockQ4_K)), out + i * kQK_K);
      return;
    case GgmlType::Q5_K:
      for (int i = 0; i * kQK_K < len; ++i) dd::q5_k(dd::block_at(w, k + i, sizeof(BlockQ5_K)), out + i * kQK_K);
      return;
    case GgmlType::Q6_K:
      for (int i = 0; i * kQK_K < len; ++i) dd::q6_k(dd::block_at(w, k + i, sizeof(BlockQ6_K)), out + i * kQK_K);
      return;
  }
}

// Decodes elements [first, first + kSubBlock) of `w` into out: a legacy block, a K-quant's
// sub-block or 32 plain floats (first a multiple of 32 for the block types). The same values
// decode_run gives for them: it decodes its blocks with the same functions.
inline constexpr int kSubBlock = 32;
TD_HD inline void decode_sub_block(const Encoded& w, std::int64_t first, float* out) {
  namespace dd = dequant_detail;
  const std::int64_t k = first / kQK_K;
  const int j = int(first % kQK_K) / kSubBlock;
  switch (w.type) {
    case GgmlType::Q4_K: {
      const std::uint8_t* b = dd::block_at(w, k, sizeof(BlockQ4_K));
      return dd::q4_k_sub(b, dd::k_super<BlockQ4_K>(b), j, out);
    }
    case GgmlType::Q5_K: {
      const std::uint8_t* b = dd::block_at(w, k, sizeof(BlockQ5_K));
      return dd::q5_k_sub(b, dd::k_super<BlockQ5_K>(b), j, out);
    }
    case GgmlType::Q6_K: {
      const std::uint8_t* b = dd::block_at(w, k, sizeof(BlockQ6_K));
      return dd::q6_k_sub(b, dd::f16(b + offsetof(BlockQ6_K, d)), j, out);
    }
    default:
      return decode_run(w, first, kSubBlock, out);  // the plain floats, or one legacy block
  }
}

// dst[i] = element first + i of src, rounded to `round` and stored as dst_type.
struct DequantArgs {
  const std::uint8_t* src = nullptr;
  GgmlType type = GgmlType::F32;
  void* dst = nullptr;  // (n,) dst_type
  std::int64_t n = 0;   // a multiple of the type's block size
  DequantQuirks quirks = {};
  ElemType dst_type = ElemType::f32;
  ElemType round = ElemType::f32;  // the precision the values are rounded to
  std::int64_t first = 0;          // a multiple of the type's block size
};

// Run u: elements [u kDecodeRun, (u + 1) kDecodeRun) of dst.
TD_HD inline void dequant_body(const DequantArgs& a, std::int64_t u) {
  float v[kDecodeRun];
  const std::int64_t i0 = u * kDecodeRun;
  const int len = run_length(a.n - i0);
  decode_run(Encoded{a.src, a.type, a.quirks}, a.first + i0, len, v);
  round_run(a.round, v, len);
  for (int i = 0; i < len; ++i) store_element(a.dst, a.dst_type, i0 + i, v[i]);
}

inline std::int64_t decode_runs(std::int64_t n) { return (n + kDecodeRun - 1) / kDecodeRun; }

void validate(const DequantArgs& a);  // throws std::invalid_argument
void dequant_host(const DequantArgs& a);
void dequant_cuda(const DequantArgs& a, CudaStream stream);

}  // namespace tapdiff::engine
