#include "engine/kernels/embed.hpp"
#include "engine/kernels/host_loop.hpp"

namespace tapdiff::engine {

void embed_host(const EmbedArgs& a) {
  const std::int64_t runs = embed_runs_per_row(a);
  host_for(a.n_rows * runs, 4 * kDecodeRun, [&](std::int64_t i) { embed_body(a, i, runs); });
}

}  // namespace tapdiff::engine
