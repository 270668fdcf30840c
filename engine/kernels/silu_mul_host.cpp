#include "engine/kernels/silu_mul.hpp"
#include "engine/kernels/host_loop.hpp"

namespace tapdiff::engine {

void silu_mul_host(const SiluMulArgs& a) {
  host_for(a.n, 16, [&](std::int64_t i) { silu_mul_body(a, i); });
}

}  // namespace tapdiff::engine
