#include "engine/kernels/argmax.hpp"
#include "engine/kernels/host_loop.hpp"

namespace tapdiff::engine {

void argmax_host(const ArgmaxArgs& a) {
  host_for(a.n_rows, a.n, [&](std::int64_t i) { argmax_row(a, i); });
}

}  // namespace tapdiff::engine
