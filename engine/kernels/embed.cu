#include "engine/kernels/cuda_loop.cuh"
#include "engine/kernels/embed.hpp"

namespace tapdiff::engine {

void embed_cuda(const EmbedArgs& a, CudaStream stream) {
  const std::int64_t runs = embed_runs_per_row(a);
  cuda_for(a.n_rows * runs, stream, [a, runs] __device__(std::int64_t i) { embed_body(a, i, runs); });
  TD_CUDA_CHECK_LAUNCH("embed");
}

}  // namespace tapdiff::engine
