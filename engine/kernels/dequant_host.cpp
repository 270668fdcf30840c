#include "engine/kernels/dequant.hpp"
#include "engine/kernels/host_loop.hpp"

namespace tapdiff::engine {

void dequant_host(const DequantArgs& a) {
  host_for(decode_runs(a.n), 4 * kDecodeRun, [&](std::int64_t u) { dequant_body(a, u); });
}

}  // namespace tapdiff::engine
