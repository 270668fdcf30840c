#include "engine/kernels/cuda_loop.cuh"
#include "engine/kernels/argmax.hpp"

namespace tapdiff::engine {

void argmax_cuda(const ArgmaxArgs& a, CudaStream stream) {
  cuda_for(a.n_rows, stream, [a] __device__(std::int64_t i) { argmax_row(a, i); });
  TD_CUDA_CHECK_LAUNCH("argmax");
}

}  // namespace tapdiff::engine
