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

// Under a causal mask later rows see more keys: rows are taken from both ends in turn, so each
// thread's contiguous share of the loop holds about the same work.
void attention_host(const AttentionArgs& a) {
  host_for(a.n_rows * a.n_head, 4 * a.n_keys * a.head_dim, [&](std::int64_t i) {
    const std::int64_t k = i / a.n_head, row = k % 2 == 0 ? k / 2 : a.n_rows - 1 - k / 2;
    attention_one(a, row * a.n_head + i % a.n_head);
  });
}

}  // namespace tapdiff::engine
