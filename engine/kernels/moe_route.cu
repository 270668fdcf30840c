#include "engine/kernels/cuda_loop.cuh"
#include "engine/kernels/moe_route.hpp"

namespace tapdiff::engine {

void moe_route_cuda(const MoeRouteArgs& a, CudaStream stream) {
  cuda_for(a.n_rows, stream, [a] __device__(std::int64_t r) { moe_route_row(a, r); });
  TD_CUDA_CHECK_LAUNCH("moe_route");
}

void moe_select_cuda(const MoeSelectArgs& a, CudaStream stream) {
  cuda_for(a.n_rows, stream, [a] __device__(std::int64_t r) { moe_select_row(a, r); });
  TD_CUDA_CHECK_LAUNCH("moe_select");
}

}  // namespace tapdiff::engine
