#include "engine/kernels/cuda_loop.cuh"
#include "engine/kernels/attention.hpp"

namespace tapdiff::engine {

void attention_cuda(const AttentionArgs& a, CudaStream stream) {
  cuda_for(a.n_rows * a.n_head, stream,
           [a] __device__(std::int64_t i) { attention_row_head(a, i); });
  TD_CUDA_CHECK_LAUNCH("attention");
}

}  // namespace tapdiff::engine
