// Decode GEMV on a weight in its GGUF encoding: y[r] = sum_c round(W[r, c]) x[c] for r < rows,
// c < k, W row-major with `cols` elements a row. Each row decodes kDecodeRun elements at a time
// (dequant.hpp, the engine's one decoder) and accumulates the products in four accumulators of
// eight lanes. A decode step reads its weights once, in their encoding, as llama.cpp's
// mul_mat_vec kernels do.
#pragma once

#include <cmath>
#include <cstdint>

#include "engine/device/stream.hpp"
#include "engine/kernels/dequant.hpp"
#include "engine/kernels/slots.hpp"

namespace tapdiff::engine {

struct MatvecArgs {
  Encoded w = {};                  // (rows, cols) of the tensor, row-major
  std::int64_t cols = 0;           // elements a row (a multiple of the block size)
  std::int64_t rows = 0;           // rows computed: y's length
  std::int64_t k = 0;              // columns summed, <= cols
  const float* x = nullptr;        // (k,)
  float* y = nullptr;              // (rows,)
  ElemType round = ElemType::f32;  // the precision each weight is rounded to first
};

// A product added into a sum: one fused multiply-add, rounded once, on every executor (an
// explicit fma; the builds contract nothing on their own: docs/engine.md, "Executors").
TD_HD inline float product_add(float sum, float w, float x) { return fmaf(w, x, sum); }

// Eight float lanes: a vector register on the host (GCC vector extension: lane-wise fused
// multiply-adds, 8-wide under AVX2 and FMA), an array in a CUDA thread. The same lane-wise
// arithmetic either way; the host form only keeps the accumulators in registers.
#if defined(__CUDA_ARCH__)
struct Lanes {
  float v[8];
};
TD_HD inline void lanes_zero(Lanes& a) {
  for (float& v : a.v) v = 0.0f;
}
TD_HD inline void lanes_madd(Lanes& acc, const float* w, const float* x) {
  for (int u = 0; u < 8; ++u) acc.v[u] = product_add(acc.v[u], w[u], x[u]);
}
TD_HD inline float lane(const Lanes& a, int u) { return a.v[u]; }
#else
typedef float Lanes __attribute__((vector_size(32)));
inline void lanes_zero(Lanes& a) { a = Lanes{}; }
inline void lanes_madd(Lanes& acc, const float* w, const float* x) {
  for (int u = 0; u < 8; ++u) acc[u] = product_add(acc[u], w[u], x[u]);
}
inline float lane(const Lanes& a, int u) { return a[u]; }
#endif

// The order of a row's sums, which every executor keeps: slot s (0..31) adds the products of
// the columns c = s (mod 32) below k rounded down to a multiple of 32, in column order (the
// host's four accumulators of eight lanes; a CUDA warp's lanes); the columns after that add
// into `tail`, in order; then the slots are summed as sum_slots adds them.
inline constexpr int kMatvecSlots = kSlots;

TD_HD inline void matvec_row(const MatvecArgs& a, std::int64_t r) {
  float w[kDecodeRun];
  // Four accumulators of eight lanes and one for a run's tail.
  Lanes acc0, acc1, acc2, acc3;
  lanes_zero(acc0);
  lanes_zero(acc1);
  lanes_zero(acc2);
  lanes_zero(acc3);
  float tail = 0.0f;
  for (std::int64_t c0 = 0; c0 < a.k; c0 += kDecodeRun) {
    const int len = run_length(a.k - c0);
    decode_run(a.w, r * a.cols + c0, len, w);
    round_run(a.round, w, len);
    const float* x = a.x + c0;
    int j = 0;
    for (; j + 32 <= len; j += 32) {
      lanes_madd(acc0, w + j, x + j);
      lanes_madd(acc1, w + j + 8, x + j + 8);
      lanes_madd(acc2, w + j + 16, x + j + 16);
      lanes_madd(acc3, w + j + 24, x + j + 24);
    }
    for (; j < len; ++j) tail = product_add(tail, w[j], x[j]);
  }
  float slots[kMatvecSlots];
  for (int u = 0; u < 8; ++u) {
    slots[u] = lane(acc0, u);
    slots[u + 8] = lane(acc1, u);
    slots[u + 16] = lane(acc2, u);
    slots[u + 24] = lane(acc3, u);
  }
  a.y[r] = sum_slots(tail, slots);
}

void validate(const MatvecArgs& a);
void matvec_host(const MatvecArgs& a);
void matvec_cuda(const MatvecArgs& a, CudaStream stream);

}  // namespace tapdiff::engine
