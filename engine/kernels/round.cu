#include "engine/kernels/cuda_loop.cuh"
#include "engine/kernels/round.hpp"

namespace tapdiff::engine {

void round_cuda(const RoundArgs& a, CudaStream stream) {
  cuda_for(a.n, stream, [a] __device__(std::int64_t i) { round_body(a, i); });
  TD_CUDA_CHECK_LAUNCH("round");
}

}  // namespace tapdiff::engine
