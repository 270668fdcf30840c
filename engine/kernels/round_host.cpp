#include "engine/kernels/round.hpp"
#include "engine/kernels/host_loop.hpp"

namespace tapdiff::engine {

void round_host(const RoundArgs& a) {
  host_for(a.n, 4, [&](std::int64_t i) { round_body(a, i); });
}

}  // namespace tapdiff::engine
