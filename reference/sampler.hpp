// Next-token choice: greedy (what the harness uses) or, for users, temperature / top-k / top-p
// sampling from a seeded generator.
#pragma once

#include <cstdint>
#include <vector>

namespace tapdiff::ref {

struct SamplingOptions {
  float temperature = 0.0f;  // 0: greedy argmax
  int top_k = 0;             // 0: no limit
  float top_p = 1.0f;        // 1: no nucleus cut
  std::uint64_t seed = 0;
};

class Sampler {
public:
  explicit Sampler(SamplingOptions options);
  template <typename T>
  int sample(const std::vector<T>& logits);

private:
  double uniform();
  SamplingOptions o_;
  std::uint64_t state_;
};

// Index of the largest value; the first one on ties.
template <typename T>
int argmax(const std::vector<T>& v) {
  int best = 0;
  for (int i = 1; i < static_cast<int>(v.size()); ++i)
    if (v[static_cast<std::size_t>(i)] > v[static_cast<std::size_t>(best)]) best = i;
  return best;
}

}  // namespace tapdiff::ref
