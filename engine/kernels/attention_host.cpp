#include "engine/kernels/attention.hpp"
#include "engine/kernels/host_loop.hpp"

namespace tapdiff::engine {

void attention_host(const AttentionArgs& a) {
  host_for(a.n_rows * a.n_head, 4 * a.n_keys * a.head_dim,
           [&](std::int64_t i) { attention_row_head(a, i); });
}

}  // namespace tapdiff::engine
