#include "reference/sampler.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace tapdiff::ref {

Sampler::Sampler(SamplingOptions options) : o_(options), state_(options.seed) {}

double Sampler::uniform() {
  std::uint64_t z = (state_ += 0x9e3779b97f4a7c15ull);  // splitmix64
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return double((z ^ (z >> 31)) >> 11) * (1.0 / 9007199254740992.0);
}

template <typename T>
int Sampler::sample(const std::vector<T>& logits) {
  if (o_.temperature <= 0.0f) return argmax(logits);
  std::vector<int> order(logits.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) {
    return logits[static_cast<std::size_t>(a)] > logits[static_cast<std::size_t>(b)];
  });
  std::size_t keep = order.size();
  if (o_.top_k > 0) keep = std::min(keep, static_cast<std::size_t>(o_.top_k));
  // Softmax over the kept candidates at the given temperature.
  const double max = double(logits[static_cast<std::size_t>(order[0])]);
  std::vector<double> p(keep);
  double sum = 0;
  for (std::size_t i = 0; i < keep; ++i)
    sum += p[i] = std::exp((double(logits[static_cast<std::size_t>(order[i])]) - max) / o_.temperature);
  for (auto& x : p) x /= sum;
  // Nucleus: the smallest prefix whose mass reaches top_p.
  double mass = 0;
  std::size_t n = 0;
  while (n < keep && (n == 0 || mass < o_.top_p)) mass += p[n++];
  double r = uniform() * mass;
  for (std::size_t i = 0; i < n; ++i) {
    r -= p[i];
    if (r <= 0) return order[i];
  }
  return order[n - 1];
}

template int Sampler::sample<float>(const std::vector<float>&);
template int Sampler::sample<double>(const std::vector<double>&);

}  // namespace tapdiff::ref
