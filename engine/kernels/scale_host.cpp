#include "engine/kernels/host_loop.hpp"
#include "engine/kernels/scale.hpp"

namespace tapdiff::engine {

void scale_host(const ScaleArgs& a) {
  host_for(a.n, 1, [&](std::int64_t i) { scale_body(a, i); });
}

}  // namespace tapdiff::engine
