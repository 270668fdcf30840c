#include "engine/kernels/copy_rows.hpp"
#include "engine/kernels/host_loop.hpp"

namespace tapdiff::engine {

void copy_rows_host(const CopyRowsArgs& a) {
  host_for(a.n_rows * a.width, 1, [&](std::int64_t i) { copy_rows_body(a, i); });
}

}  // namespace tapdiff::engine
