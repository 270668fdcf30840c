#include "engine/kernels/bias.hpp"
#include "engine/kernels/host_loop.hpp"

namespace tapdiff::engine {

void bias_host(const BiasArgs& a) {
  host_for(a.n_rows * a.n, 1, [&](std::int64_t i) { bias_body(a, i); });
}

}  // namespace tapdiff::engine
