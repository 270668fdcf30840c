// The host executor and OpenBLAS: GEMM slices call OpenBLAS single-threaded inside OpenMP, so
// a pthread build's own pool (started when the library loads, spinning for work for its first
// ~0.15 s) only takes cores from OpenMP: the executor ends it.
#include <cblas.h>
#include <dlfcn.h>
#include <filesystem>
#include <gtest/gtest.h>

#include "engine/executor.hpp"

namespace tapdiff::engine {
namespace {

long threads_of_this_process() {
  long n = 0;
  for ([[maybe_unused]] const auto& task : std::filesystem::directory_iterator("/proc/self/task")) ++n;
  return n;
}

TEST(HostExecutor, EndsOpenBlasOwnThreadPool) {
  if (::dlsym(RTLD_DEFAULT, "blas_thread_shutdown_") == nullptr)
    GTEST_SKIP() << "this OpenBLAS has no blas_thread_shutdown_ (not a pthread build): no pool of its own to end";
  // The pool holds one thread fewer than OpenBLAS's thread count, unless an executor of this
  // process ended it already (the count is 1 then).
  const long pool = openblas_get_num_threads() - 1;
  const long before = threads_of_this_process();
  const auto executor = make_host_executor();
  EXPECT_EQ(threads_of_this_process(), before - pool);
  EXPECT_EQ(openblas_get_num_threads(), 1);
}

}  // namespace
}  // namespace tapdiff::engine
