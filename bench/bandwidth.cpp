#include "bandwidth.hpp"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <vector>

namespace tapdiff::bench {

constexpr int kLanes = 16;

double read_bandwidth_gbs(std::size_t bytes, int repeats) {
  const std::size_t n = bytes / sizeof(float);
  std::vector<float> buffer(n);
#pragma omp parallel for schedule(static)
  for (std::int64_t i = 0; i < std::int64_t(n); ++i) buffer[std::size_t(i)] = float(i & 7);
  double best = 0;
  volatile float sink = 0;
  for (int r = 0; r < repeats; ++r) {
    const auto start = std::chrono::steady_clock::now();
    float total = 0;
    // Sixteen independent running sums per thread, so the adds never wait on each other and
    // the loop is limited by memory, not by add latency.
#pragma omp parallel reduction(+ : total)
    {
      float acc[kLanes] = {};
#pragma omp for schedule(static)
      for (std::int64_t block = 0; block < std::int64_t(n / kLanes); ++block) {
        const float* p = buffer.data() + block * kLanes;
        for (int j = 0; j < kLanes; ++j) acc[j] += p[j];
      }
      for (float a : acc) total += a;
    }
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    sink = sink + total;
    best = std::max(best, double(bytes) / s / 1e9);
  }
  return best;
}

}  // namespace tapdiff::bench
