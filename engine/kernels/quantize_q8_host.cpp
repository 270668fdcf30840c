#include "engine/kernels/quantize_q8.hpp"
#include "engine/kernels/host_loop.hpp"

namespace tapdiff::engine {

void quantize_q8_host(const QuantizeQ8Args& a) {
  host_for(a.n * (a.k / a.out.block), 4 * a.out.block, [&](std::int64_t i) { quantize_q8_block(a, i); });
}

}  // namespace tapdiff::engine
