#include "engine/kernels/cuda_loop.cuh"
#include "engine/kernels/matvec.hpp"

namespace tapdiff::engine {

void matvec_cuda(const MatvecArgs& a, CudaStream stream) {
  cuda_for(a.rows, stream, [a] __device__(std::int64_t r) { matvec_row(a, r); });
  TD_CUDA_CHECK_LAUNCH("matvec");
}

}  // namespace tapdiff::engine
