#include "engine/kernels/cuda_loop.cuh"
#include "engine/kernels/dequant.hpp"

namespace tapdiff::engine {

void dequant_cuda(const DequantArgs& a, CudaStream stream) {
  cuda_for(decode_runs(a.n), stream, [a] __device__(std::int64_t u) { dequant_body(a, u); });
  TD_CUDA_CHECK_LAUNCH("dequant");
}

}  // namespace tapdiff::engine
