#include "engine/kernels/cuda_loop.cuh"
#include "engine/kernels/matmul_q8.hpp"

namespace tapdiff::engine {

// One thread per (weight row, tile of activation rows).
void matmul_q8_cuda(const MatmulQ8Args& a, CudaStream stream) {
  const std::int64_t tiles = (a.n + kQ8Tile - 1) / kQ8Tile;
  cuda_for(a.rows * tiles, stream, [a, tiles] __device__(std::int64_t i) {
    const std::int64_t r = i / tiles, t0 = (i % tiles) * kQ8Tile;
    matmul_q8_row<IntDotLoop>(a, r, t0, t0 + kQ8Tile < a.n ? t0 + kQ8Tile : a.n);
  });
  TD_CUDA_CHECK_LAUNCH("matmul_q8");
}

}  // namespace tapdiff::engine
