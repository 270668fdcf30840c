// The CUDA executor's launcher: a grid-stride loop running body(i) for i in [0, n). Every
// launcher follows it with TD_CUDA_CHECK_LAUNCH, so a launch error names the op's .cu file.
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

}  // namespace tapdiff::engine
