#include "engine/kernels/host_loop.hpp"
#include "engine/kernels/moe_combine.hpp"

namespace tapdiff::engine {

void moe_combine_host(const MoeCombineArgs& a) {
  host_for(a.n_rows * a.width, 2 * a.n_used, [&](std::int64_t i) { moe_combine_body(a, i); });
}

}  // namespace tapdiff::engine
