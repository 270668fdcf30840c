#include "engine/kernels/cuda_loop.cuh"
#include "engine/kernels/add.hpp"

namespace tapdiff::engine {

void add_cuda(const AddArgs& a, CudaStream stream) {
  cuda_for(a.n, stream, [a] __device__(std::int64_t i) { add_body(a, i); });
  TD_CUDA_CHECK_LAUNCH("add");
}

}  // namespace tapdiff::engine
