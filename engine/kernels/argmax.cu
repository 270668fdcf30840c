#include "engine/kernels/argmax.hpp"
#include "engine/kernels/cuda_loop.cuh"

namespace tapdiff::engine {
namespace {

// A warp per row, with argmax_row's answer: the first index of the largest value that is not
// a NaN, unless x[0] is a NaN (the scan never leaves index 0 then); 0 when every value is a NaN.
// Each lane finds its columns' candidate, then the lanes keep the larger value, the lower index
// on ties.
__global__ void argmax_warps(ArgmaxArgs a) {
  const int lane = lane_index();
  const std::int64_t r = warp_index();
  if (r >= a.n_rows) return;  // the whole warp
  const float* x = a.x + r * a.n;
  std::int64_t best = -1;
  float value = 0.0f;
  for (std::int64_t i = lane; i < a.n; i += kWarp) {
    if (isnan(x[i])) continue;
    if (best < 0 || x[i] > value) best = i, value = x[i];
  }
  for (int offset = kWarp / 2; offset > 0; offset /= 2) {
    const std::int64_t other = __shfl_xor_sync(kAllLanes, best, offset);
    const float other_value = __shfl_xor_sync(kAllLanes, value, offset);
    if (other < 0) continue;
    if (best < 0 || other_value > value || (other_value == value && other < best)) best = other, value = other_value;
  }
  if (lane == 0) a.out[r] = std::int32_t(best < 0 || isnan(x[0]) ? 0 : best);
}

}  // namespace

void argmax_cuda(const ArgmaxArgs& a, CudaStream stream) {
  if (a.n_rows <= 0) return;
  argmax_warps<<<warp_blocks(a.n_rows), kWarpBlockThreads, 0, stream>>>(a);
  TD_CUDA_CHECK_LAUNCH("argmax");
}

}  // namespace tapdiff::engine
