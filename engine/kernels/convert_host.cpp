#include "engine/kernels/convert.hpp"
#include "engine/kernels/host_loop.hpp"

namespace tapdiff::engine {

void convert_host(const ConvertArgs& a) {
  host_for(a.n, 4, [&](std::int64_t i) { convert_body(a, i); });
}

}  // namespace tapdiff::engine
