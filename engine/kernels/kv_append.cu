#include "engine/kernels/cuda_loop.cuh"
#include "engine/kernels/kv_append.hpp"

namespace tapdiff::engine {

void kv_append_cuda(const KvAppendArgs& a, CudaStream stream) {
  cuda_for(a.n_rows * a.row, stream, [a] __device__(std::int64_t i) { kv_append_body(a, i); });
  TD_CUDA_CHECK_LAUNCH("kv_append");
}

}  // namespace tapdiff::engine
