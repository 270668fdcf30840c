#include "engine/kernels/cuda_loop.cuh"
#include "engine/kernels/scale.hpp"

namespace tapdiff::engine {

void scale_cuda(const ScaleArgs& a, CudaStream stream) {
  cuda_for(a.n, stream, [a] __device__(std::int64_t i) { scale_body(a, i); });
  TD_CUDA_CHECK_LAUNCH("scale");
}

}  // namespace tapdiff::engine
