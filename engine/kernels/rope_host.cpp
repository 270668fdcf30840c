#include "engine/kernels/rope.hpp"
#include "engine/kernels/host_loop.hpp"

namespace tapdiff::engine {

void rope_host(const RopeArgs& a) {
  host_for(a.n_rows * (a.n_rot / 2), 64 + 8 * a.n_heads, [&](std::int64_t i) { rope_pair(a, i); });
}

}  // namespace tapdiff::engine
