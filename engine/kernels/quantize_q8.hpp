// Activations quantized to 8 bits, for precision q8 (matmul_q8.hpp): each block of 32 values
// of a row gets the scale d = amax / 127 and the integers round(x / d) in [-127, 127], as
// ggml's quantize_row_q8_0, and d times the sum of its integers, for weight encodings with an
// offset (Q4_1, Q5_1, Q4_K, Q5_K; as ggml's q8_1). A block holding a NaN or an infinity gets
// a NaN scale, so every product it enters is NaN, as in float32.
#pragma once

#include <cmath>
#include <cstdint>

#include "engine/device/stream.hpp"
#include "engine/device/td_hd.hpp"

namespace tapdiff::engine {

inline constexpr int kQ8Block = 32;  // activation values sharing one scale

// n rows of k quantized values (k a multiple of kQ8Block), row t at q + t k.
struct Q8Rows {
  std::int8_t* q = nullptr;  // (n, k)
  float* d = nullptr;        // (n, k / kQ8Block) scales
  float* ds = nullptr;       // (n, k / kQ8Block) each block's d times the sum of its q
};

struct QuantizeQ8Args {
  const float* x = nullptr;  // row t at x + t ldx
  std::int64_t ldx = 0;
  std::int64_t n = 0;        // rows
  std::int64_t k = 0;        // values a row, a multiple of kQ8Block
  Q8Rows out = {};
};

// Block i: values [32 (i % (k / 32)), + 32) of row i / (k / 32).
TD_HD inline void quantize_q8_block(const QuantizeQ8Args& a, std::int64_t i) {
  const std::int64_t blocks = a.k / kQ8Block, t = i / blocks, b = i % blocks;
  const float* x = a.x + t * a.ldx + b * kQ8Block;
  float amax = 0.0f, poison = 0.0f;  // poison: NaN when a value is not finite
  for (int j = 0; j < kQ8Block; ++j) {
    const float v = fabsf(x[j]);
    amax = v > amax ? v : amax;
    poison += x[j] * 0.0f;
  }
  const float d = amax / 127.0f;
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  std::int8_t* q = a.out.q + t * a.k + b * kQ8Block;
  std::int32_t sum = 0;
  for (int j = 0; j < kQ8Block; ++j) {
    float v = roundf(x[j] * id);
    v = v > 127.0f ? 127.0f : (v < -127.0f ? -127.0f : v);
    q[j] = v == v ? std::int8_t(v) : std::int8_t(0);
    sum += q[j];
  }
  a.out.d[t * blocks + b] = d + poison;
  a.out.ds[t * blocks + b] = (d + poison) * float(sum);
}

void validate(const QuantizeQ8Args& a);
void quantize_q8_host(const QuantizeQ8Args& a);
void quantize_q8_cuda(const QuantizeQ8Args& a, CudaStream stream);

}  // namespace tapdiff::engine
