#include <algorithm>

#include "engine/kernels/dequant.hpp"
#include "engine/kernels/dequant_avx512.hpp"
#include "engine/kernels/host_loop.hpp"

namespace tapdiff::engine {

void dequant_host(const DequantArgs& a) {
  if (dequant_avx512_applies(a)) {
    constexpr std::int64_t kRunsPerTask = 16;
    const std::int64_t per_task = kRunsPerTask * kDecodeRun, tasks = (a.n + per_task - 1) / per_task;
    return host_for(tasks, per_task, [&](std::int64_t t) {
      dequant_avx512_range(a, t * per_task, std::min(a.n, (t + 1) * per_task));
    });
  }
  host_for(decode_runs(a.n), 4 * kDecodeRun, [&](std::int64_t u) { dequant_body(a, u); });
}

}  // namespace tapdiff::engine
