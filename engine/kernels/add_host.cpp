#include "engine/kernels/add.hpp"
#include "engine/kernels/host_loop.hpp"

namespace tapdiff::engine {

void add_host(const AddArgs& a) {
  host_for(a.n, 1, [&](std::int64_t i) { add_body(a, i); });
}

}  // namespace tapdiff::engine
