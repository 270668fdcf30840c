#include "engine/kernels/cuda_loop.cuh"
#include "engine/kernels/quantize_q8.hpp"

namespace tapdiff::engine {
namespace {

static_assert(kQ8Block == kWarp, "a lane per value of each 32");

// A warp per block (quantize_q8_block's index): lane l takes the values l, l + 32, ...
__global__ void quantize_q8_warps(QuantizeQ8Args a) {
  const int size = a.out.block;
  const std::int64_t blocks = a.k / size, i = warp_index();
  if (i >= a.n * blocks) return;  // the whole warp
  const int lane = lane_index();
  const std::int64_t t = i / blocks, b = i % blocks;
  const float* x = a.x + t * a.ldx + b * size;
  float amax = 0.0f, poison = 0.0f;
  for (int j = lane; j < size; j += kWarp) q8_fold(x[j], amax, poison);
  for (int offset = kWarp / 2; offset > 0; offset /= 2) {
    const float other = __shfl_xor_sync(kAllLanes, amax, offset);
    amax = other > amax ? other : amax;
    poison += __shfl_xor_sync(kAllLanes, poison, offset);
  }
  const float d = amax / 127.0f;
  const float id = q8_inverse_scale(d);
  std::int8_t* q = a.out.q + t * a.k + b * size;
  for (int j0 = 0; j0 < size; j0 += kQ8Block) {
    q[j0 + lane] = q8_round(x[j0 + lane], id);
    std::int32_t sum = q[j0 + lane];
    for (int offset = kWarp / 2; offset > 0; offset /= 2) sum += __shfl_xor_sync(kAllLanes, sum, offset);
    if (lane == 0) q8_store_sum(a, t * a.k + b * size + j0, d + poison, sum);
  }
  if (lane == 0) a.out.d[t * blocks + b] = d + poison;
}

}  // namespace

void quantize_q8_cuda(const QuantizeQ8Args& a, CudaStream stream) {
  const std::int64_t blocks = a.n * (a.k / a.out.block);
  if (blocks <= 0) return;
  quantize_q8_warps<<<warp_blocks(blocks), kWarpBlockThreads, 0, stream>>>(a);
  TD_CUDA_CHECK_LAUNCH("quantize_q8");
}

}  // namespace tapdiff::engine
