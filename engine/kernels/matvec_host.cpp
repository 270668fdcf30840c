#include "engine/kernels/host_loop.hpp"
#include "engine/kernels/matvec.hpp"
#include "engine/kernels/matvec_avx512.hpp"

namespace tapdiff::engine {
namespace {

// The rows [r0, r1): compiled twice, for x86-64-v3 (AVX2 and FMA) and for any x86-64, and
// picked at load time, so the decode loops run eight floats wide, a fused multiply-add a lane,
// wherever the CPU has both (flatten: the body is inlined into each clone, so it is compiled for
// that target too; elsewhere each fmaf is a call into libm, the same value, slowly).
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
__attribute__((target_clones("arch=x86-64-v3", "default"), flatten))
#endif
void matvec_rows(const MatvecArgs& a, std::int64_t r0, std::int64_t r1) {
  for (std::int64_t r = r0; r < r1; ++r) matvec_row(a, r);
}

constexpr std::int64_t kRowsPerTask = 16;

}  // namespace

void matvec_host(const MatvecArgs& a) {
  const std::int64_t tasks = (a.rows + kRowsPerTask - 1) / kRowsPerTask;
  const bool avx512 = matvec_avx512_applies(a);
  host_for_balanced(tasks, kRowsPerTask * a.k, [&](std::int64_t t) {
    const std::int64_t r0 = t * kRowsPerTask, r1 = r0 + kRowsPerTask < a.rows ? r0 + kRowsPerTask : a.rows;
    if (avx512) matvec_avx512_rows(a, r0, r1);
    else matvec_rows(a, r0, r1);
  });
}

}  // namespace tapdiff::engine
