#include "engine/kernels/cuda_loop.cuh"
#include "engine/kernels/rmsnorm.hpp"

namespace tapdiff::engine {

void rmsnorm_cuda(const RmsNormArgs& a, CudaStream stream) {
  cuda_for(a.n_rows, stream, [a] __device__(std::int64_t i) { rmsnorm_row(a, i); });
  TD_CUDA_CHECK_LAUNCH("rmsnorm");
}

}  // namespace tapdiff::engine
