// IEEE binary16 and bfloat16 conversions, round-to-nearest-even, bit-exact and identical on
// both executors (the engine's own implementation, independent of model/'s).
//   f16: 1 sign, 5 exponent (bias 15), 10 mantissa bits; max 65504, |x| >= 65520 -> inf;
//        subnormals are multiples of 2^-24.
//   bf16: the top 16 bits of a float32, rounded.
// NaN stays NaN (quieted, sign kept).
#pragma once

#include <cstdint>
#include <cstring>
#include <math.h>

#include "engine/device/td_hd.hpp"

namespace tapdiff::engine {

TD_HD inline std::uint32_t f32_bits(float f) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(f);
#else
  std::uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
#endif
}

TD_HD inline float bits_f32(std::uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
#endif
}

// Without branches (masks, all ones where true), so that a loop of them vectorizes: decode
// steps widen every F16 weight they read.
TD_HD inline float f16_bits_to_f32(std::uint16_t h) {
  const std::uint32_t sign = std::uint32_t(h & 0x8000u) << 16;
  const std::uint32_t exponent = (h >> 10) & 0x1fu;
  const std::uint32_t mantissa = h & 0x3ffu;
  const std::uint32_t normal = ((exponent + (127 - 15)) << 23) | (mantissa << 13);
  const std::uint32_t inf_nan = 0x7f800000u | (mantissa << 13);
  const std::uint32_t subnormal = f32_bits(float(mantissa) * 5.9604644775390625e-8f);  // exact
  const std::uint32_t top = 0u - std::uint32_t(exponent == 0x1fu), zero = 0u - std::uint32_t(exponent == 0);
  std::uint32_t r = (inf_nan & top) | (normal & ~top);
  r = (subnormal & zero) | (r & ~zero);
  return bits_f32(sign | r);
}

TD_HD inline std::uint16_t f32_to_f16_bits(float f) {
  const std::uint32_t u = f32_bits(f);
  const std::uint16_t sign = std::uint16_t((u >> 16) & 0x8000u);
  const std::uint32_t a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return std::uint16_t(sign | 0x7e00u | ((a >> 13) & 0x3ffu));  // NaN
  if (a >= 0x477ff000u) return std::uint16_t(sign | 0x7c00u);  // >= 65520 rounds to inf
  if (a < 0x38800000u) {
    // Below 2^-14: a subnormal f16 counts units of 2^-24. |x| * 2^24 is exact in float32 and
    // rintf rounds it to nearest even; 1024 is the smallest normal (0x0400), also correct.
    const float units = bits_f32(a) * 16777216.0f;
    return std::uint16_t(sign | std::uint16_t(rintf(units)));
  }
  // Normal: rebias the exponent and round away the 13 low mantissa bits to nearest even; a
  // carry out of the mantissa correctly bumps the exponent.
  const std::uint32_t rounded = a + 0xfffu + ((a >> 13) & 1u);
  return std::uint16_t(sign | ((rounded - 0x38000000u) >> 13));
}

TD_HD inline float bf16_bits_to_f32(std::uint16_t b) { return bits_f32(std::uint32_t(b) << 16); }

TD_HD inline std::uint16_t f32_to_bf16_bits(float f) {
  const std::uint32_t u = f32_bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return std::uint16_t((u >> 16) | 0x40u);  // quiet NaN
  return std::uint16_t((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

// The value f becomes when stored in 16 bits and read back: the conversions above composed,
// without branches so that a loop of them vectorizes (a decode step rounds every weight it
// reads). Tests hold them to the composed conversions bit for bit.
TD_HD inline float round_to_f16(float f) {
  const std::uint32_t u = f32_bits(f), sign = u & 0x80000000u, a = u & 0x7fffffffu;
  const std::uint32_t normal = (a + 0xfffu + ((a >> 13) & 1u)) & 0xffffe000u;
  // Below 2^-14 the f16 step is 2^-24, float32's step in [0.5, 1): adding and taking away 0.5
  // rounds to it, to nearest even.
  const std::uint32_t subnormal = f32_bits((bits_f32(a) + 0.5f) - 0.5f);
  // Masks (all ones where true) rather than ?:, which the host compiler keeps as branches.
  const std::uint32_t tiny = 0u - std::uint32_t(a < 0x38800000u);
  const std::uint32_t huge = 0u - std::uint32_t(a >= 0x477ff000u);  // to inf
  const std::uint32_t nan = 0u - std::uint32_t(a > 0x7f800000u);    // quieted, payload kept
  std::uint32_t r = (subnormal & tiny) | (normal & ~tiny);
  r = (0x7f800000u & huge) | (r & ~huge);
  r = ((0x7fc00000u | (a & 0x007fe000u)) & nan) | (r & ~nan);
  return bits_f32(sign | r);
}
TD_HD inline float round_to_bf16(float f) {
  const std::uint32_t u = f32_bits(f);
  const std::uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u;
  return bits_f32((u & 0x7fffffffu) > 0x7f800000u ? ((u & 0xffff0000u) | 0x400000u) : rounded);
}

}  // namespace tapdiff::engine
