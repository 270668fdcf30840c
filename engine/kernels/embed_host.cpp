#include "engine/kernels/embed.hpp"
#include "engine/kernels/host_loop.hpp"

namespace tapdiff::engine {

void embed_host(const EmbedArgs& a) {
  host_for(a.n_rows * a.n_embd, 2, [&](std::int64_t i) { embed_body(a, i); });
}

}  // namespace tapdiff::engine
