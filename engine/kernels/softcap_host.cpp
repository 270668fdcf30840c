#include "engine/kernels/host_loop.hpp"
#include "engine/kernels/softcap.hpp"

namespace tapdiff::engine {

void softcap_host(const SoftcapArgs& a) {
  host_for(a.n, 1, [&](std::int64_t i) { softcap_body(a, i); });
}

}  // namespace tapdiff::engine
