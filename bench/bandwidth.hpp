// Memory read bandwidth probe for benchmarks: the bound a memory-bound decode is judged by.
#pragma once

#include <cstddef>

namespace tapdiff::bench {

// Best-of-`repeats` GB/s reading a `bytes`-sized buffer with the current OpenMP thread count.
double read_bandwidth_gbs(std::size_t bytes = std::size_t(1) << 30, int repeats = 5);

}  // namespace tapdiff::bench
