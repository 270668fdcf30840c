// The CUDA executor's launchers: a grid-stride loop running body(i) for i in [0, n), and the
// shape of the warp-per-row kernels. Every launcher follows its launch with
// TD_CUDA_CHECK_LAUNCH, so a launch error names the op's .cu file.
#pragma once

#include <algorithm>
#include <cstdint>

#include "engine/device/cuda_check.hpp"
#include "engine/device/stream.hpp"

namespace tapdiff::engine {

template <typename Body>
__global__ void grid_stride_kernel(std::int64_t n, Body body) {
  const std::int64_t stride = std::int64_t(blockDim.x) * gridDim.x;
  for (std::int64_t i = std::int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride)
    body(i);
}

inline constexpr int kThreadsPerBlock = 256;
inline constexpr std::int64_t kMaxBlocks = 8192;  // the grid-stride loop covers the rest

template <typename Body>
void cuda_for(std::int64_t n, CudaStream stream, Body body) {
  if (n <= 0) return;
  const std::int64_t blocks =
      std::min<std::int64_t>((n + kThreadsPerBlock - 1) / kThreadsPerBlock, kMaxBlocks);
  grid_stride_kernel<<<static_cast<unsigned>(blocks), kThreadsPerBlock, 0, stream>>>(n, body);
}

// The row reductions' launcher shape: a warp per index (a row, or a row and head), kWarpsPerBlock
// warps a block. A kernel finds its index and lane with warp_index() and lane_index(), and
// returns whole warps past the end, so no lane of a live warp misses a __syncwarp.
inline constexpr int kWarp = 32;
inline constexpr unsigned kAllLanes = 0xffffffffu;
inline constexpr int kWarpsPerBlock = 4;
inline constexpr int kWarpBlockThreads = kWarpsPerBlock * kWarp;

inline unsigned warp_blocks(std::int64_t n) {
  return static_cast<unsigned>((n + kWarpsPerBlock - 1) / kWarpsPerBlock);
}
__device__ inline int lane_index() { return int(threadIdx.x) % kWarp; }
__device__ inline int warp_in_block() { return int(threadIdx.x) / kWarp; }
__device__ inline std::int64_t warp_index() { return std::int64_t(blockIdx.x) * kWarpsPerBlock + warp_in_block(); }

// Every lane gets every lane's value (slot s from lane s), so each lane can add them in
// sum_slots's order itself.
__device__ inline void gather_slots(float mine, float* slots) {
  for (int s = 0; s < kWarp; ++s) slots[s] = __shfl_sync(kAllLanes, mine, s);
}

}  // namespace tapdiff::engine
