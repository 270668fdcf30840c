#include "engine/kernels/cuda_loop.cuh"
#include "engine/kernels/softcap.hpp"

namespace tapdiff::engine {

void softcap_cuda(const SoftcapArgs& a, CudaStream stream) {
  cuda_for(a.n, stream, [a] __device__(std::int64_t i) { softcap_body(a, i); });
  TD_CUDA_CHECK_LAUNCH("softcap");
}

}  // namespace tapdiff::engine
