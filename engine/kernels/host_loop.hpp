// The host executor's launcher: runs body(i) for i in [0, n) on OpenMP threads. Each index
// is computed whole by one thread with static scheduling, so results do not depend on the
// thread count.
//
// Small loops stay on the calling thread: a parallel region costs a fork and a barrier, and
// on a loaded machine a barrier waiting for a descheduled thread costs a whole time slice.
// Decode steps of small models are hundreds of tiny loops; only loops with at least
// kMinParallelWork units of work (cost = rough operations per index) fan out.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <strings.h>

namespace tapdiff::engine {

inline constexpr std::int64_t kMinParallelWork = std::int64_t(1) << 16;

// Whether this process's waiting OpenMP threads spin (OMP_WAIT_POLICY=active): read once, as
// libgomp reads it when it loads. Then a parallel region costs a fork, not a wake-up.
inline bool omp_threads_spin() {
  static const bool spin = [] {
    const char* policy = std::getenv("OMP_WAIT_POLICY");
    return policy != nullptr && strcasecmp(policy, "active") == 0;
  }();
  return spin;
}

template <typename Body>
void host_for(std::int64_t n, std::int64_t cost, const Body& body) {
#pragma omp parallel for schedule(static) if (n > 1 && n * cost >= kMinParallelWork)
  for (std::int64_t i = 0; i < n; ++i) body(i);
}

// host_for for loops of few, long indices, handed out in chunks as threads come free. Each
// index is still computed whole by one thread, so results still do not depend on the thread
// count or on which thread took it.
template <typename Body>
void host_for_balanced(std::int64_t n, std::int64_t cost, const Body& body) {
#pragma omp parallel for schedule(dynamic, 8) if (n > 1 && n * cost >= kMinParallelWork)
  for (std::int64_t i = 0; i < n; ++i) body(i);
}

}  // namespace tapdiff::engine
