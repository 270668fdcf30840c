#include "engine/kernels/cuda_loop.cuh"
#include "engine/kernels/quantize_q8.hpp"

namespace tapdiff::engine {

void quantize_q8_cuda(const QuantizeQ8Args& a, CudaStream stream) {
  cuda_for(a.n * (a.k / a.out.block), stream, [a] __device__(std::int64_t i) { quantize_q8_block(a, i); });
  TD_CUDA_CHECK_LAUNCH("quantize_q8");
}

}  // namespace tapdiff::engine
