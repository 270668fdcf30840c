#include "engine/kernels/cuda_loop.cuh"
#include "engine/kernels/moe_combine.hpp"

namespace tapdiff::engine {

void moe_combine_cuda(const MoeCombineArgs& a, CudaStream stream) {
  cuda_for(a.n_rows * a.width, stream, [a] __device__(std::int64_t i) { moe_combine_body(a, i); });
  TD_CUDA_CHECK_LAUNCH("moe_combine");
}

}  // namespace tapdiff::engine
