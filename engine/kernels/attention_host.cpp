#include "engine/kernels/attention.hpp"
#include "engine/kernels/host_loop.hpp"

namespace tapdiff::engine {
namespace {

// Compiled with AVX2 and for any x86-64, picked at load time (as matvec_host.cpp's rows): the
// head dot products and the weighted values run eight floats wide where the CPU has AVX2.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
__attribute__((target_clones("avx2", "default"), flatten))
#endif
void attention_one(const AttentionArgs& a, std::int64_t i) {
  attention_row_head(a, i);
}

}  // namespace

void attention_host(const AttentionArgs& a) {
  host_for(a.n_rows * a.n_head, 4 * a.n_keys * a.head_dim, [&](std::int64_t i) { attention_one(a, i); });
}

}  // namespace tapdiff::engine
