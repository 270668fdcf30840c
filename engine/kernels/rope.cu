#include "engine/kernels/cuda_loop.cuh"
#include "engine/kernels/rope.hpp"

namespace tapdiff::engine {

void rope_cuda(const RopeArgs& a, CudaStream stream) {
  cuda_for(a.n_rows * (a.n_rot / 2), stream,
           [a] __device__(std::int64_t i) { rope_pair(a, i); });
  TD_CUDA_CHECK_LAUNCH("rope");
}

}  // namespace tapdiff::engine
