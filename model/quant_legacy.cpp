// Legacy 32-element block quants: Q4_0, Q4_1, Q5_0, Q5_1, Q8_0.
// The encoders follow ggml's reference quantizers (quantize_row_q*_ref) step for step, so
// they produce the same bytes as ggml and gguf-py for the same float32 input.
#include <algorithm>
#include <cmath>

#include "model/dequantize.hpp"
#include "model/half.hpp"
#include "model/quant_blocks.hpp"
#include "model/quantize.hpp"

namespace tapdiff {
namespace {

// The low 4 bits of element j: qs[j] low nibble for j < 16, qs[j - 16] high nibble after.
int low4(const std::uint8_t* qs, int j) {
  return j < kQK / 2 ? qs[j] & 0x0F : qs[j - kQK / 2] >> 4;
}

void set_low4(std::uint8_t* qs, int j, int q) {
  if (j < kQK / 2)
    qs[j] = std::uint8_t((qs[j] & 0xF0) | (q & 0x0F));
  else
    qs[j - kQK / 2] = std::uint8_t((qs[j - kQK / 2] & 0x0F) | ((q & 0x0F) << 4));
}

// Bit 4 of element j is bit j of qh read as a little-endian u32.
int high_bit(const std::uint8_t* qh, int j) { return (qh[j / 8] >> (j % 8)) & 1; }

void set_high_bit(std::uint8_t* qh, int j, int q) {
  qh[j / 8] = std::uint8_t(qh[j / 8] | (((q >> 4) & 1) << (j % 8)));
}

// The value with the largest magnitude, sign kept; the first one on ties (as ggml picks it).
float signed_absmax(const float* x) {
  float amax = 0, max = 0;
  for (int j = 0; j < kQK; ++j) {
    if (amax < std::fabs(x[j])) {
      amax = std::fabs(x[j]);
      max = x[j];
    }
  }
  return max;
}

struct Range {
  float min, max;
};

Range block_range(const float* x) {
  Range r{x[0], x[0]};
  for (int j = 1; j < kQK; ++j) {
    r.min = std::min(r.min, x[j]);
    r.max = std::max(r.max, x[j]);
  }
  return r;
}

// Symmetric encoders map the signed extreme to q = 0 (d = max / -half); q = trunc(x/d + half
// + 0.5), capped at 2*half - 1, so the opposite extreme may lose one step.
void quantize_symmetric(const float* x, int half, int* q, float* d) {
  *d = signed_absmax(x) / float(-half);
  const float id = *d != 0 ? 1.0f / *d : 0.0f;
  for (int j = 0; j < kQK; ++j)
    q[j] = std::min(2 * half - 1, int(x[j] * id + (float(half) + 0.5f)));
}

// Min/max encoders: x = d * q + min, q = trunc((x - min)/d + 0.5) capped at levels.
void quantize_affine(const float* x, int levels, int* q, float* d, float* m) {
  const Range r = block_range(x);
  *d = (r.max - r.min) / float(levels);
  *m = r.min;
  const float id = *d != 0 ? 1.0f / *d : 0.0f;
  for (int j = 0; j < kQK; ++j) q[j] = std::min(levels, int((x[j] - r.min) * id + 0.5f));
}

}  // namespace

void dequantize_row_q4_0(const void* src, float* dst, std::int64_t n) {
  for (std::int64_t b = 0; b < n / kQK; ++b) {
    const auto blk = load_block<BlockQ4_0>(src, b);
    const float d = fp16_to_fp32(blk.d);
    for (int j = 0; j < kQK; ++j) dst[b * kQK + j] = d * float(low4(blk.qs, j) - 8);
  }
}

void dequantize_row_q4_1(const void* src, float* dst, std::int64_t n) {
  for (std::int64_t b = 0; b < n / kQK; ++b) {
    const auto blk = load_block<BlockQ4_1>(src, b);
    const float d = fp16_to_fp32(blk.d), m = fp16_to_fp32(blk.m);
    for (int j = 0; j < kQK; ++j) dst[b * kQK + j] = d * float(low4(blk.qs, j)) + m;
  }
}

void dequantize_row_q5_0(const void* src, float* dst, std::int64_t n) {
  for (std::int64_t b = 0; b < n / kQK; ++b) {
    const auto blk = load_block<BlockQ5_0>(src, b);
    const float d = fp16_to_fp32(blk.d);
    for (int j = 0; j < kQK; ++j) {
      const int q = low4(blk.qs, j) | (high_bit(blk.qh, j) << 4);
      dst[b * kQK + j] = d * float(q - 16);
    }
  }
}

void dequantize_row_q5_1(const void* src, float* dst, std::int64_t n) {
  for (std::int64_t b = 0; b < n / kQK; ++b) {
    const auto blk = load_block<BlockQ5_1>(src, b);
    const float d = fp16_to_fp32(blk.d), m = fp16_to_fp32(blk.m);
    for (int j = 0; j < kQK; ++j) {
      const int q = low4(blk.qs, j) | (high_bit(blk.qh, j) << 4);
      dst[b * kQK + j] = d * float(q) + m;
    }
  }
}

void dequantize_row_q8_0(const void* src, float* dst, std::int64_t n) {
  for (std::int64_t b = 0; b < n / kQK; ++b) {
    const auto blk = load_block<BlockQ8_0>(src, b);
    const float d = fp16_to_fp32(blk.d);
    for (int j = 0; j < kQK; ++j) dst[b * kQK + j] = d * float(blk.qs[j]);
  }
}

void quantize_row_q4_0(const float* src, void* dst, std::int64_t n) {
  for (std::int64_t b = 0; b < n / kQK; ++b) {
    int q[kQK];
    float d;
    quantize_symmetric(src + b * kQK, 8, q, &d);
    BlockQ4_0 blk{};
    blk.d = fp32_to_fp16(d);
    for (int j = 0; j < kQK; ++j) set_low4(blk.qs, j, q[j]);
    store_block(dst, b, blk);
  }
}

void quantize_row_q4_1(const float* src, void* dst, std::int64_t n) {
  for (std::int64_t b = 0; b < n / kQK; ++b) {
    int q[kQK];
    float d, m;
    quantize_affine(src + b * kQK, 15, q, &d, &m);
    BlockQ4_1 blk{};
    blk.d = fp32_to_fp16(d);
    blk.m = fp32_to_fp16(m);
    for (int j = 0; j < kQK; ++j) set_low4(blk.qs, j, q[j]);
    store_block(dst, b, blk);
  }
}

void quantize_row_q5_0(const float* src, void* dst, std::int64_t n) {
  for (std::int64_t b = 0; b < n / kQK; ++b) {
    int q[kQK];
    float d;
    quantize_symmetric(src + b * kQK, 16, q, &d);
    BlockQ5_0 blk{};
    blk.d = fp32_to_fp16(d);
    for (int j = 0; j < kQK; ++j) {
      set_low4(blk.qs, j, q[j]);
      set_high_bit(blk.qh, j, q[j]);
    }
    store_block(dst, b, blk);
  }
}

void quantize_row_q5_1(const float* src, void* dst, std::int64_t n) {
  for (std::int64_t b = 0; b < n / kQK; ++b) {
    int q[kQK];
    float d, m;
    quantize_affine(src + b * kQK, 31, q, &d, &m);
    BlockQ5_1 blk{};
    blk.d = fp32_to_fp16(d);
    blk.m = fp32_to_fp16(m);
    for (int j = 0; j < kQK; ++j) {
      set_low4(blk.qs, j, q[j]);
      set_high_bit(blk.qh, j, q[j]);
    }
    store_block(dst, b, blk);
  }
}

void quantize_row_q8_0(const float* src, void* dst, std::int64_t n) {
  for (std::int64_t b = 0; b < n / kQK; ++b) {
    const float* x = src + b * kQK;
    float amax = 0;
    for (int j = 0; j < kQK; ++j) amax = std::fmax(amax, std::fabs(x[j]));
    const float d = amax / 127.0f;
    const float id = d != 0 ? 1.0f / d : 0.0f;
    BlockQ8_0 blk{};
    blk.d = fp32_to_fp16(d);
    for (int j = 0; j < kQK; ++j) blk.qs[j] = static_cast<std::int8_t>(std::lround(x[j] * id));
    store_block(dst, b, blk);
  }
}

}  // namespace tapdiff
