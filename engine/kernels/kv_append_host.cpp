#include "engine/kernels/kv_append.hpp"
#include "engine/kernels/host_loop.hpp"

namespace tapdiff::engine {

void kv_append_host(const KvAppendArgs& a) {
  host_for(a.n_rows * a.row, 4, [&](std::int64_t i) { kv_append_body(a, i); });
}

}  // namespace tapdiff::engine
