#include "engine/kernels/dequant.hpp"
#include "engine/kernels/host_loop.hpp"

namespace tapdiff::engine {

void dequant_host(const DequantArgs& a) {
  host_for(a.n, 8, [&](std::int64_t i) { dequant_body(a, i); });
}

}  // namespace tapdiff::engine
