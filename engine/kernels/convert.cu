#include "engine/kernels/cuda_loop.cuh"
#include "engine/kernels/convert.hpp"

namespace tapdiff::engine {

void convert_cuda(const ConvertArgs& a, CudaStream stream) {
  cuda_for(a.n, stream, [a] __device__(std::int64_t i) { convert_body(a, i); });
  TD_CUDA_CHECK_LAUNCH("convert");
}

}  // namespace tapdiff::engine
