#include "engine/kernels/copy_rows.hpp"
#include "engine/kernels/cuda_loop.cuh"

namespace tapdiff::engine {

void copy_rows_cuda(const CopyRowsArgs& a, CudaStream stream) {
  cuda_for(a.n_rows * a.width, stream, [a] __device__(std::int64_t i) { copy_rows_body(a, i); });
  TD_CUDA_CHECK_LAUNCH("copy_rows");
}

}  // namespace tapdiff::engine
