#include "tapdiff/attn_summary.hpp"

#include <algorithm>
#include <limits>

namespace tapdiff {
namespace {

// The larger of m and x, NaN once either is (as numpy's max, which the Python writer uses).
inline float larger(float m, float x) { return m < x || x != x ? x : m; }

// Sums over keys [begin, end) in sixteen lanes (a loop the compiler vectorizes; one running
// double sum would not be), added in double.
struct KeySums {
  double mass = 0, weighted_key = 0;
  float max = -std::numeric_limits<float>::infinity();
};

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
__attribute__((target_clones("avx512f", "avx2", "default")))
#endif
KeySums sum_keys(const float* w, std::int64_t begin, std::int64_t end) {
  constexpr int kLanes = 16;
  float mass[kLanes] = {}, weighted[kLanes] = {}, max[kLanes], key[kLanes];
  for (int l = 0; l < kLanes; ++l) {
    max[l] = -std::numeric_limits<float>::infinity();
    key[l] = float(l);
  }
  KeySums s;
  std::int64_t j = begin;
  // Keys counted from begin in float lanes: exact up to 2^24 keys.
  for (; j + kLanes <= end; j += kLanes) {
    for (int l = 0; l < kLanes; ++l) {
      const float x = w[j + l];
      mass[l] += x;
      weighted[l] += x * key[l];
      max[l] = larger(max[l], x);
      key[l] += float(kLanes);
    }
  }
  for (int l = 0; l < kLanes; ++l) {
    s.mass += mass[l];
    s.weighted_key += weighted[l] + double(begin) * mass[l];
    s.max = larger(s.max, max[l]);
  }
  for (; j < end; ++j) {
    s.mass += w[j];
    s.weighted_key += double(w[j]) * double(j);
    s.max = larger(s.max, w[j]);
  }
  return s;
}

}  // namespace

void summarize_attention_row(const float* probs, std::int64_t n_head, std::int64_t width, std::int64_t position,
                             float* summary) {
  const std::int64_t visible_end = std::min(width, position + 1);
  const double key_scale = 1.0 / double(std::max<std::int64_t>(position, 1));
  for (std::int64_t h = 0; h < n_head; ++h) {
    const float* w = probs + h * width;
    const KeySums past = sum_keys(w, 0, visible_end), future = sum_keys(w, visible_end, width);
    float* s = summary + h * kAttnSummaryFields;
    s[0] = float(1.0 - (past.mass + future.mass));
    s[1] = larger(future.max, past.max);
    s[2] = float((past.weighted_key + future.weighted_key) * key_scale);
    s[3] = float(future.mass);
  }
}

}  // namespace tapdiff
