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

// Block i: values [block (i % (k / block)), + block) of row i / (k / block).
TD_HD inline void quantize_q8_block(const QuantizeQ8Args& a, std::int64_t i) {
  const int size = a.out.block;
  const std::int64_t blocks = a.k / size, t = i / blocks, b = i % blocks;
  const float* x = a.x + t * a.ldx + b * size;
  float amax = 0.0f, poison = 0.0f;  // poison: NaN when a value is not finite
  for (int j = 0; j < size; ++j) {
    const float v = fabsf(x[j]);
    amax = v > amax ? v : amax;
    poison += x[j] * 0.0f;
  }
  const float d = amax / 127.0f;
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  std::int8_t* q = a.out.q + t * a.k + b * size;
  for (int j0 = 0; j0 < size; j0 += kQ8Block) {
    std::int32_t sum = 0;
    for (int j = j0; j < j0 + kQ8Block; ++j) {
      float v = roundf(x[j] * id);
      v = v > 127.0f ? 127.0f : (v < -127.0f ? -127.0f : v);
      q[j] = v == v ? std::int8_t(v) : std::int8_t(0);
      sum += q[j];
    }
    const std::int64_t sub = (t * a.k + b * size + j0) / kQ8Block;
    if (size == kQ8Block)
      a.out.ds[sub] = (d + poison) * float(sum);
    else
      a.out.sums[sub] = std::int16_t(sum);
  }
  a.out.d[t * blocks + b] = d + poison;
}

void validate(const QuantizeQ8Args& a);
void quantize_q8_host(const QuantizeQ8Args& a);
void quantize_q8_cuda(const QuantizeQ8Args& a, CudaStream stream);

}  // namespace tapdiff::engine
