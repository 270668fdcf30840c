#include "engine/kernels/cuda_loop.cuh"
#include "engine/kernels/rmsnorm.hpp"

namespace tapdiff::engine {
namespace {

static_assert(kSlots == kWarp, "a lane per slot");

// A warp per row: lane s sums slot s, then writes the elements s, s + 32, ...
__global__ void rmsnorm_warps(RmsNormArgs a) {
  const std::int64_t r = warp_index();
  if (r >= a.n_rows) return;  // the whole warp
  const int lane = lane_index();
  const float* x = a.x + r * a.n;
  float* out = a.out + r * a.n;
  float slots[kSlots];
  float mean = 0.0f;
  if (a.subtract_mean) {
    gather_slots(rmsnorm_slot(x, a.n, lane, 0.0f, false), slots);
    mean = sum_slots(0.0f, slots) / float(a.n);
  }
  gather_slots(rmsnorm_slot(x, a.n, lane, mean, true), slots);
  const float inv = rmsnorm_inv(a, slots);
  for (std::int64_t i = lane; i < a.n; i += kWarp) out[i] = rmsnorm_element(a, x, i, mean, inv);
}

}  // namespace

void rmsnorm_cuda(const RmsNormArgs& a, CudaStream stream) {
  if (a.n_rows <= 0) return;
  rmsnorm_warps<<<warp_blocks(a.n_rows), kWarpBlockThreads, 0, stream>>>(a);
  TD_CUDA_CHECK_LAUNCH("rmsnorm");
}

}  // namespace tapdiff::engine
