#include "engine/kernels/cuda_loop.cuh"
#include "engine/kernels/matmul_q8.hpp"
#include "engine/kernels/matmul_q8k.hpp"

namespace tapdiff::engine {

// One thread per (weight row, tile of activation rows).
void matmul_q8_cuda(const MatmulQ8Args& a, CudaStream stream) {
  const std::int64_t tiles = (a.n + kQ8Tile - 1) / kQ8Tile;
  cuda_for(a.rows * tiles, stream, [a, tiles] __device__(std::int64_t i) {
    const std::int64_t r = i / tiles, t0 = (i % tiles) * kQ8Tile, t1 = t0 + kQ8Tile < a.n ? t0 + kQ8Tile : a.n;
    if (a.x.block == kQ8KBlock)
      matmul_q8k_row<KDotLoop>(a, r, t0, t1);
    else
      matmul_q8_row<IntDotLoop>(a, r, t0, t1);
  });
  TD_CUDA_CHECK_LAUNCH("matmul_q8");
}

}  // namespace tapdiff::engine
