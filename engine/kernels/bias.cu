#include "engine/kernels/cuda_loop.cuh"
#include "engine/kernels/bias.hpp"

namespace tapdiff::engine {

void bias_cuda(const BiasArgs& a, CudaStream stream) {
  cuda_for(a.n_rows * a.n, stream, [a] __device__(std::int64_t i) { bias_body(a, i); });
  TD_CUDA_CHECK_LAUNCH("bias");
}

}  // namespace tapdiff::engine
