#include "engine/kernels/rmsnorm.hpp"
#include "engine/kernels/host_loop.hpp"

namespace tapdiff::engine {

void rmsnorm_host(const RmsNormArgs& a) {
  host_for(a.n_rows, 4 * a.n, [&](std::int64_t i) { rmsnorm_row(a, i); });
}

}  // namespace tapdiff::engine
