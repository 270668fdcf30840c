// Activations quantized to 8 bits, for precision q8: each block of values of a row gets the
// scale d = amax / 127 and the integers round(x / d) in [-127, 127]. Blocks of 32 are ggml's
// q8_0 (matmul_q8.hpp), with d times the sum of the block's integers for the weight encodings
// with an offset (as ggml's q8_1). Blocks of 256, the size of ggml's q8_K, are for the K-quants
// (matmul_q8k.hpp), with the integer sum of every 32 values for Q4_K's and Q5_K's mins. A block
// holding a NaN or an infinity gets a NaN scale, so every product it enters is NaN, as in
// float32.
#pragma once

#include <cmath>
#include <cstdint>

#include "engine/device/stream.hpp"
#include "engine/device/td_hd.hpp"

namespace tapdiff::engine {

inline constexpr int kQ8Block = 32;    // activation values sharing one scale (q8_0)
inline constexpr int kQ8KBlock = 256;  // the same for the K-quants' products (q8_K)

// n rows of k quantized values (k a multiple of block), row t at q + t k.
struct Q8Rows {
  std::int8_t* q = nullptr;       // (n, k)
  float* d = nullptr;             // (n, k / block) scales
  float* ds = nullptr;            // block kQ8Block: (n, k / 32) each block's d times the sum of its q
  std::int16_t* sums = nullptr;   // block kQ8KBlock: (n, k / 32) the sum of each 32 q
  int block = kQ8Block;
};

struct QuantizeQ8Args {
  const float* x = nullptr;  // row t at x + t ldx
  std::int64_t ldx = 0;
  std::int64_t n = 0;        // rows
  std::int64_t k = 0;        // values a row, a multiple of out.block
  Q8Rows out = {};
};

// The pieces of a block, shared by the host's thread per block and the CUDA executor's warp per
// block: the maximum, a sum of ±0 and NaN, and integer sums come out the same in any order.

// amax folded with one more value's magnitude; poison += x * 0 (NaN when x is not finite).
TD_HD inline void q8_fold(float x, float& amax, float& poison) {
  const float v = fabsf(x);
  amax = v > amax ? v : amax;
  poison += x * 0.0f;
}

TD_HD inline float q8_inverse_scale(float d) { return d != 0.0f ? 1.0f / d : 0.0f; }

TD_HD inline std::int8_t q8_round(float x, float id) {
  float v = roundf(x * id);
  v = v > 127.0f ? 127.0f : (v < -127.0f ? -127.0f : v);
  return v == v ? std::int8_t(v) : std::int8_t(0);
}

// Writes the sum of the 32 integers starting at element `at` of the rows (t k + b size + j0).
TD_HD inline void q8_store_sum(const QuantizeQ8Args& a, std::int64_t at, float scale, std::int32_t sum) {
  if (a.out.block == kQ8Block)
    a.out.ds[at / kQ8Block] = scale * float(sum);
  else
    a.out.sums[at / kQ8Block] = std::int16_t(sum);
}

// Block i: values [block (i % (k / block)), + block) of row i / (k / block).
TD_HD inline void quantize_q8_block(const QuantizeQ8Args& a, std::int64_t i) {
  const int size = a.out.block;
  const std::int64_t blocks = a.k / size, t = i / blocks, b = i % blocks;
  const float* x = a.x + t * a.ldx + b * size;
  float amax = 0.0f, poison = 0.0f;
  for (int j = 0; j < size; ++j) q8_fold(x[j], amax, poison);
  const float d = amax / 127.0f;
  const float id = q8_inverse_scale(d);
  std::int8_t* q = a.out.q + t * a.k + b * size;
  for (int j0 = 0; j0 < size; j0 += kQ8Block) {
    std::int32_t sum = 0;
    for (int j = j0; j < j0 + kQ8Block; ++j) {
      q[j] = q8_round(x[j], id);
      sum += q[j];
    }
    q8_store_sum(a, t * a.k + b * size + j0, d + poison, sum);
  }
  a.out.d[t * blocks + b] = d + poison;
}

void validate(const QuantizeQ8Args& a);
void quantize_q8_host(const QuantizeQ8Args& a);
void quantize_q8_cuda(const QuantizeQ8Args& a, CudaStream stream);

}  // namespace tapdiff::engine
