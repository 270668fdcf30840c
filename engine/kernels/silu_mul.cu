#include "engine/kernels/cuda_loop.cuh"
#include "engine/kernels/silu_mul.hpp"

namespace tapdiff::engine {

void silu_mul_cuda(const SiluMulArgs& a, CudaStream stream) {
  cuda_for(a.n, stream, [a] __device__(std::int64_t i) { silu_mul_body(a, i); });
  TD_CUDA_CHECK_LAUNCH("silu_mul");
}

}  // namespace tapdiff::engine
