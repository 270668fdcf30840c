#include "engine/kernels/argmax.hpp"
#include "engine/kernels/cuda_loop.cuh"

namespace tapdiff::engine {
namespace {

constexpr int kArgmaxWarps = 32;  // a block per row: a decode step's one row of logits is long

// The better of two candidates (an index, -1 for none, and its value): the larger value, the
// lower index on ties. Associative and commutative, so any order of reduction gives one answer.
__device__ void keep_better(std::int64_t& best, float& value, std::int64_t other, float other_value) {
  if (other < 0) return;
  if (best < 0 || other_value > value || (other_value == value && other < best)) best = other, value = other_value;
}

__device__ void warp_keep_best(std::int64_t& best, float& value) {
  for (int offset = kWarp / 2; offset > 0; offset /= 2) {
    const std::int64_t other = __shfl_xor_sync(kAllLanes, best, offset);
    const float other_value = __shfl_xor_sync(kAllLanes, value, offset);
    keep_better(best, value, other, other_value);
  }
}

// A block per row, with argmax_row's answer: the first index of the largest value that is not
// a NaN, unless x[0] is a NaN (the scan never leaves index 0 then); 0 when every value is a NaN.
// Each thread finds its columns' candidate, each warp its threads', then the first warp the
// block's.
__global__ void argmax_blocks(ArgmaxArgs a) {
  __shared__ std::int64_t warp_best[kArgmaxWarps];
  __shared__ float warp_value[kArgmaxWarps];
  const std::int64_t r = blockIdx.x;
  const int lane = lane_index(), warp = warp_in_block();
  const float* x = a.x + r * a.n;
  std::int64_t best = -1;
  float value = 0.0f;
  for (std::int64_t i = threadIdx.x; i < a.n; i += blockDim.x)
    if (!isnan(x[i])) keep_better(best, value, i, x[i]);
  warp_keep_best(best, value);
  if (lane == 0) warp_best[warp] = best, warp_value[warp] = value;
  __syncthreads();
  if (warp != 0) return;
  best = warp_best[lane];
  value = warp_value[lane];
  warp_keep_best(best, value);
  if (lane == 0) a.out[r] = std::int32_t(best < 0 || isnan(x[0]) ? 0 : best);
}

}  // namespace

void argmax_cuda(const ArgmaxArgs& a, CudaStream stream) {
  if (a.n_rows <= 0) return;
  argmax_blocks<<<static_cast<unsigned>(a.n_rows), kArgmaxWarps * kWarp, 0, stream>>>(a);
  TD_CUDA_CHECK_LAUNCH("argmax");
}

}  // namespace tapdiff::engine
