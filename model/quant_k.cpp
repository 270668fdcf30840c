// K-quants: 256-element super-blocks, Q4_K, Q5_K (8 sub-blocks of 32, 6-bit scale and min
// each) and Q6_K (16 sub-blocks of 16, int8 scale each). Element order and bit packing follow
// ggml's dequantize_row_q{4,5,6}_K exactly.
//
// The encoders are plain round-to-nearest, not llama.cpp's iterative search: per sub-block
// the min (clamped to <= 0) and max set an offset and a step; the super-block scales d and
// dmin are chosen so that 63 (Q6_K: 127) steps cover the largest of them, and every
// sub-block step is rounded *up* to a multiple of d so its range is never clipped.
#include <algorithm>
#include <cmath>

#include "model/dequantize.hpp"
#include "model/half.hpp"
#include "model/quant_blocks.hpp"
#include "model/quantize.hpp"

namespace tapdiff {
namespace {

constexpr int kSubBlocks = 8;   // Q4_K / Q5_K: sub-blocks of 32
constexpr int kSub6 = 16;       // Q6_K: sub-blocks of 16
constexpr int kMaxScale6 = 63;  // largest 6-bit scale or min

// --- scale/min packing (ggml's get_scale_min_k4) -------------------------------------------
// 12 bytes hold 8 six-bit scales sc[] and 8 six-bit mins m[]:
//   bytes 0..3   sc[0..3] in bits 0-5, bits 4-5 of sc[4..7] in bits 6-7
//   bytes 4..7   m[0..3]  in bits 0-5, bits 4-5 of m[4..7]  in bits 6-7
//   bytes 8..11  low 4 bits of sc[4..7] in bits 0-3, low 4 bits of m[4..7] in bits 4-7
struct ScaleMin {
  int sc, m;
};

ScaleMin unpack_scale_min(const std::uint8_t* s, int j) {
  if (j < 4) return {s[j] & 63, s[j + 4] & 63};
  return {(s[j + 4] & 0x0F) | ((s[j - 4] >> 6) << 4), (s[j + 4] >> 4) | ((s[j] >> 6) << 4)};
}

void pack_scale_min(std::uint8_t* s, const int* sc, const int* m) {
  for (int j = 0; j < 4; ++j) {
    s[j] = std::uint8_t(sc[j] | ((sc[j + 4] >> 4) << 6));
    s[j + 4] = std::uint8_t(m[j] | ((m[j + 4] >> 4) << 6));
    s[j + 8] = std::uint8_t((sc[j + 4] & 0x0F) | ((m[j + 4] & 0x0F) << 4));
  }
}

// --- element layouts -----------------------------------------------------------------------
// Q4_K/Q5_K low 4 bits: each 64 elements share 32 bytes of qs; sub-block s (32 elements)
// uses the low nibbles if s is even, the high nibbles if odd. Q5_K bit 4 of element
// 32*s + l is bit s of qh[l].
int k_low4(const std::uint8_t* qs, int e) {
  const int s = e / 32, l = e % 32;
  return (qs[(s / 2) * 32 + l] >> (4 * (s % 2))) & 0x0F;
}

void set_k_low4(std::uint8_t* qs, int e, int q) {
  const int s = e / 32, l = e % 32;
  qs[(s / 2) * 32 + l] = std::uint8_t(qs[(s / 2) * 32 + l] | ((q & 0x0F) << (4 * (s % 2))));
}

int k_high_bit(const std::uint8_t* qh, int e) { return (qh[e % 32] >> (e / 32)) & 1; }

void set_k_high_bit(std::uint8_t* qh, int e, int q) {
  qh[e % 32] = std::uint8_t(qh[e % 32] | (((q >> 4) & 1) << (e / 32)));
}

// Q6_K: each half (128 elements) owns 64 bytes of ql and 32 of qh. In a half, quarter k
// (32 elements, l = 0..31) takes low nibbles of ql[32*(k%2) + l] for k < 2, high nibbles for
// k >= 2, and bits 2k..2k+1 of qh[l] as bits 4-5. The scale of element e is scales[e / 16].
struct Q6Pos {
  int ql, ql_shift, qh, qh_shift;
};

Q6Pos q6_pos(int e) {
  const int h = e / 128, k = (e % 128) / 32, l = e % 32;
  return {h * 64 + (k % 2) * 32 + l, 4 * (k / 2), h * 32 + l, 2 * k};
}

int q6_value(const BlockQ6_K& blk, int e) {
  const Q6Pos p = q6_pos(e);
  return ((blk.ql[p.ql] >> p.ql_shift) & 0x0F) | (((blk.qh[p.qh] >> p.qh_shift) & 3) << 4);
}

void set_q6_value(BlockQ6_K& blk, int e, int q) {
  const Q6Pos p = q6_pos(e);
  blk.ql[p.ql] = std::uint8_t(blk.ql[p.ql] | ((q & 0x0F) << p.ql_shift));
  blk.qh[p.qh] = std::uint8_t(blk.qh[p.qh] | (((q >> 4) & 3) << p.qh_shift));
}

// --- encoder helpers -----------------------------------------------------------------------
// An fp16 scale u with fp16(u) * steps >= target (target >= 0, finite): the nearest fp16 of
// target / steps, moved up while rounding left it short.
std::uint16_t fp16_covering(float target, int steps) {
  std::uint16_t h = fp32_to_fp16(target / float(steps));
  while (fp16_to_fp32(h) * float(steps) < target && h < 0x7bffu) ++h;
  return h;
}

// The smallest integer multiple of `unit` (at most `max_index`) that reaches `need`.
int ceil_index(float need, float unit, int max_index) {
  if (unit <= 0) return 0;
  return std::min(max_index, int(std::ceil(need / unit)));
}

int round_clamped(float v, int lo, int hi) {
  return int(std::clamp(std::lround(v), long(lo), long(hi)));
}

// Q4_K / Q5_K encoding of one super-block: x = d*sc[s] * q - dmin*m[s], q in 0..levels.
struct KAffine {
  std::uint16_t d = 0, dmin = 0;
  int sc[kSubBlocks] = {}, m[kSubBlocks] = {};
  int q[kQK_K] = {};
};

KAffine quantize_k_affine(const float* x, int levels) {
  KAffine k;
  float lo[kSubBlocks], hi[kSubBlocks];  // sub-block min (clamped to <= 0) and max
  float max_offset = 0;
  for (int s = 0; s < kSubBlocks; ++s) {
    const float* xs = x + 32 * s;
    lo[s] = std::min(0.0f, *std::min_element(xs, xs + 32));
    hi[s] = *std::max_element(xs, xs + 32);
    max_offset = std::max(max_offset, -lo[s]);
  }
  k.dmin = fp16_covering(max_offset, kMaxScale6);
  const float dmin = fp16_to_fp32(k.dmin);
  float offset[kSubBlocks], need[kSubBlocks], max_need = 0;
  for (int s = 0; s < kSubBlocks; ++s) {
    k.m[s] = dmin > 0 ? round_clamped(-lo[s] / dmin, 0, kMaxScale6) : 0;
    offset[s] = dmin * float(k.m[s]);
    need[s] = std::max(0.0f, hi[s] + offset[s]) / float(levels);
    max_need = std::max(max_need, need[s]);
  }
  k.d = fp16_covering(max_need, kMaxScale6);
  const float d = fp16_to_fp32(k.d);
  for (int s = 0; s < kSubBlocks; ++s) {
    k.sc[s] = ceil_index(need[s], d, kMaxScale6);
    const float step = d * float(k.sc[s]);
    for (int l = 0; l < 32; ++l) {
      const int e = 32 * s + l;
      k.q[e] = step > 0 ? round_clamped((x[e] + offset[s]) / step, 0, levels) : 0;
    }
  }
  return k;
}

}  // namespace

void dequantize_row_q4_k(const void* src, float* dst, std::int64_t n) {
  for (std::int64_t b = 0; b < n / kQK_K; ++b) {
    const auto blk = load_block<BlockQ4_K>(src, b);
    const float d = fp16_to_fp32(blk.d), dmin = fp16_to_fp32(blk.dmin);
    float* y = dst + b * kQK_K;
    for (int s = 0; s < kSubBlocks; ++s) {
      const ScaleMin sm = unpack_scale_min(blk.scales, s);
      const float d1 = d * float(sm.sc), m1 = dmin * float(sm.m);
      for (int e = 32 * s; e < 32 * (s + 1); ++e) y[e] = d1 * float(k_low4(blk.qs, e)) - m1;
    }
  }
}

void dequantize_row_q5_k(const void* src, float* dst, std::int64_t n) {
  for (std::int64_t b = 0; b < n / kQK_K; ++b) {
    const auto blk = load_block<BlockQ5_K>(src, b);
    const float d = fp16_to_fp32(blk.d), dmin = fp16_to_fp32(blk.dmin);
    float* y = dst + b * kQK_K;
    for (int s = 0; s < kSubBlocks; ++s) {
      const ScaleMin sm = unpack_scale_min(blk.scales, s);
      const float d1 = d * float(sm.sc), m1 = dmin * float(sm.m);
      for (int e = 32 * s; e < 32 * (s + 1); ++e) {
        const int q = k_low4(blk.qs, e) | (k_high_bit(blk.qh, e) << 4);
        y[e] = d1 * float(q) - m1;
      }
    }
  }
}

void dequantize_row_q6_k(const void* src, float* dst, std::int64_t n) {
  for (std::int64_t b = 0; b < n / kQK_K; ++b) {
    const auto blk = load_block<BlockQ6_K>(src, b);
    const float d = fp16_to_fp32(blk.d);
    float* y = dst + b * kQK_K;
    for (int e = 0; e < kQK_K; ++e) {
      const float d1 = d * float(blk.scales[e / 16]);  // ggml: (d * sc) * q
      y[e] = d1 * float(q6_value(blk, e) - 32);
    }
  }
}

void quantize_row_q4_k(const float* src, void* dst, std::int64_t n) {
  for (std::int64_t b = 0; b < n / kQK_K; ++b) {
    const KAffine k = quantize_k_affine(src + b * kQK_K, 15);
    BlockQ4_K blk{};
    blk.d = k.d;
    blk.dmin = k.dmin;
    pack_scale_min(blk.scales, k.sc, k.m);
    for (int e = 0; e < kQK_K; ++e) set_k_low4(blk.qs, e, k.q[e]);
    store_block(dst, b, blk);
  }
}

void quantize_row_q5_k(const float* src, void* dst, std::int64_t n) {
  for (std::int64_t b = 0; b < n / kQK_K; ++b) {
    const KAffine k = quantize_k_affine(src + b * kQK_K, 31);
    BlockQ5_K blk{};
    blk.d = k.d;
    blk.dmin = k.dmin;
    pack_scale_min(blk.scales, k.sc, k.m);
    for (int e = 0; e < kQK_K; ++e) {
      set_k_low4(blk.qs, e, k.q[e]);
      set_k_high_bit(blk.qh, e, k.q[e]);
    }
    store_block(dst, b, blk);
  }
}

// Q6_K: symmetric, x = d*scales[j] * (q - 32). Each sub-block needs step amax/31 so that
// q - 32 in -31..31 covers it; d makes 127 steps cover the largest need.
void quantize_row_q6_k(const float* src, void* dst, std::int64_t n) {
  for (std::int64_t b = 0; b < n / kQK_K; ++b) {
    const float* x = src + b * kQK_K;
    float need[kSub6], max_need = 0;
    for (int j = 0; j < kSub6; ++j) {
      float amax = 0;
      for (int l = 0; l < 16; ++l) amax = std::max(amax, std::fabs(x[16 * j + l]));
      need[j] = amax / 31.0f;
      max_need = std::max(max_need, need[j]);
    }
    BlockQ6_K blk{};
    blk.d = fp16_covering(max_need, 127);
    const float d = fp16_to_fp32(blk.d);
    for (int j = 0; j < kSub6; ++j) {
      blk.scales[j] = std::int8_t(ceil_index(need[j], d, 127));
      const float step = d * float(blk.scales[j]);
      for (int e = 16 * j; e < 16 * (j + 1); ++e) {
        const int q = step > 0 ? round_clamped(x[e] / step, -32, 31) : 0;
        set_q6_value(blk, e, q + 32);
      }
    }
    store_block(dst, b, blk);
  }
}

}  // namespace tapdiff
