#include "engine/kernels/host_loop.hpp"
#include "engine/kernels/moe_route.hpp"

namespace tapdiff::engine {

void moe_route_host(const MoeRouteArgs& a) {
  host_for(a.n_rows, std::int64_t(a.n_expert) * a.n_expert, [&](std::int64_t r) { moe_route_row(a, r); });
}

void moe_select_host(const MoeSelectArgs& a) {
  host_for(a.n_rows, std::int64_t(a.n_expert) * a.n_expert, [&](std::int64_t r) { moe_select_row(a, r); });
}

}  // namespace tapdiff::engine
