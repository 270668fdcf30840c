#include "engine/kernels/cuda_loop.cuh"
#include "engine/kernels/embed.hpp"

namespace tapdiff::engine {

void embed_cuda(const EmbedArgs& a, CudaStream stream) {
  cuda_for(a.n_rows * a.n_embd, stream, [a] __device__(std::int64_t i) { embed_body(a, i); });
  TD_CUDA_CHECK_LAUNCH("embed");
}

}  // namespace tapdiff::engine
