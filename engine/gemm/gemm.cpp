// Argument rules shared by both executors' GEMM.
#include <algorithm>
#include <fmt/format.h>

#include "engine/gemm/gemm.hpp"
#include "engine/require.hpp"

namespace tapdiff::engine {

void validate(const GemmArgs& g) {
  require(g.m >= 0 && g.n >= 0 && g.k >= 0, "gemm",
          [&] { return fmt::format("m {} n {} k {}", g.m, g.n, g.k); });
  const int a_rows = g.op_a == GemmOp::N ? g.m : g.k;
  const int b_rows = g.op_b == GemmOp::N ? g.k : g.n;
  require(g.lda >= (a_rows > 1 ? a_rows : 1), "gemm",
          [&] { return fmt::format("lda {} < {}", g.lda, a_rows); });
  require(g.ldb >= (b_rows > 1 ? b_rows : 1), "gemm",
          [&] { return fmt::format("ldb {} < {}", g.ldb, b_rows); });
  require(g.ldc >= (g.m > 1 ? g.m : 1), "gemm", [&] { return fmt::format("ldc {} < m {}", g.ldc, g.m); });
  if (g.m > 0 && g.n > 0)
    require(g.c != nullptr && (g.k == 0 || (g.a != nullptr && g.b != nullptr)), "gemm", "null operand");
}

void validate(const EncodedGemmArgs& g) {
  const GgmlTypeTraits& traits = ggml_type_traits(g.w.type);
  require(g.m >= 0 && g.n >= 0 && g.k >= 0, "gemm",
          [&] { return fmt::format("m {} n {} k {}", g.m, g.n, g.k); });
  require(g.k % traits.block_elems == 0, "gemm", [&] {
    return fmt::format("rows of {} {} elements: expected whole blocks of {}", g.k, traits.name, traits.block_elems);
  });
  require(g.ldb >= std::max(g.k, 1), "gemm", [&] { return fmt::format("ldb {} < k {}", g.ldb, g.k); });
  require(g.ldc >= std::max(g.m, 1), "gemm", [&] { return fmt::format("ldc {} < m {}", g.ldc, g.m); });
  if (g.m > 0 && g.n > 0)
    require(g.c != nullptr && (g.k == 0 || (g.w.bytes != nullptr && g.b != nullptr)), "gemm",
            "null operand");
}

std::int64_t gemm_b_extent(const GemmArgs& g) {
  const std::int64_t rows = g.op_b == GemmOp::N ? g.k : g.n;
  const std::int64_t cols = g.op_b == GemmOp::N ? g.n : g.k;
  return cols == 0 ? 0 : std::int64_t(g.ldb) * (cols - 1) + rows;
}

}  // namespace tapdiff::engine
