#include "tapdiff/weight_taps.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <stdexcept>

#include "tapdiff/trace_writer.hpp"

namespace tapdiff {
namespace {

constexpr std::uint64_t kFnvOffset = 0xcbf29ce484222325ull;
constexpr std::uint64_t kFnvPrime = 0x100000001b3ull;

std::uint64_t fnv1a(std::uint64_t h, std::uint8_t byte) { return (h ^ byte) * kFnvPrime; }

std::uint64_t splitmix64(std::uint64_t& state) {
  std::uint64_t z = (state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

void encode_double(double x, float* out) {
  out[0] = static_cast<float>(x);
  out[1] = static_cast<float>(x - double(out[0]));
}

}  // namespace

WeightTapMode resolve_weight_tap_mode(std::string_view mode, std::uint64_t n_parameters,
                                      std::uint64_t stats_above) {
  if (mode == "full") return WeightTapMode::full;
  if (mode == "stats") return WeightTapMode::stats;
  if (mode == "auto") return n_parameters > stats_above ? WeightTapMode::stats : WeightTapMode::full;
  throw std::invalid_argument("--weights: expected full, stats or auto, got \"" +
                              std::string(mode) + "\"");
}

WeightRowStats weight_row_stats(const float* row, std::int64_t n) {
  WeightRowStats s;
  s.hash = kFnvOffset;
  bool any_finite = false;
  for (std::int64_t i = 0; i < n; ++i) {
    const float x = row[i];
    std::uint32_t bits = 0;
    std::memcpy(&bits, &x, sizeof bits);
    for (int b = 0; b < 4; ++b) s.hash = fnv1a(s.hash, std::uint8_t(bits >> (8 * b)));
    if (!std::isfinite(x)) {
      ++s.nonfinite;
      continue;
    }
    s.sum += double(x);
    s.sum_squares += double(x) * double(x);
    s.min = any_finite ? std::min(s.min, x) : x;
    s.max = any_finite ? std::max(s.max, x) : x;
    any_finite = true;
  }
  return s;
}

void encode_weight_stats(const WeightRowStats& s, float* out) {
  encode_double(s.sum, out);
  encode_double(s.sum_squares, out + 2);
  out[4] = s.min;
  out[5] = s.max;
  out[6] = static_cast<float>(s.nonfinite);
  for (int k = 0; k < 4; ++k) out[7 + k] = static_cast<float>((s.hash >> (16 * k)) & 0xFFFFu);
}

WeightRowStats decode_weight_stats(const float* in) {
  WeightRowStats s;
  s.sum = double(in[0]) + double(in[1]);
  s.sum_squares = double(in[2]) + double(in[3]);
  s.min = in[4];
  s.max = in[5];
  s.nonfinite = static_cast<std::int64_t>(in[6]);
  for (int k = 0; k < 4; ++k)
    s.hash |= (static_cast<std::uint64_t>(in[7 + k]) & 0xFFFFu) << (16 * k);
  return s;
}

std::vector<std::int64_t> sampled_weight_rows(std::string_view gguf_name, std::int64_t n_rows,
                                              int n_sample, std::uint64_t seed) {
  std::vector<std::int64_t> rows;
  if (n_sample >= n_rows) {
    for (std::int64_t r = 0; r < n_rows; ++r) rows.push_back(r);
    return rows;
  }
  std::uint64_t state = seed;
  for (char c : gguf_name) state = fnv1a(state ^ kFnvOffset, std::uint8_t(c));
  // Selection sampling (Knuth's algorithm S): increasing rows, each set equally likely.
  std::int64_t needed = n_sample;
  for (std::int64_t r = 0; r < n_rows && needed > 0; ++r) {
    const double u = double(splitmix64(state) >> 11) * 0x1.0p-53;
    if (u * double(n_rows - r) < double(needed)) {
      rows.push_back(r);
      --needed;
    }
  }
  return rows;
}

void record_weight(TraceWriter& trace, std::string_view gguf_name, std::int64_t rows,
                   std::int64_t cols, const float* data, const WeightTapOptions& o) {
  const std::string name = weight_tap_name(gguf_name);
  if (o.mode == WeightTapMode::full) {
    trace.record(name, -1, 0, rows, {cols}, data);
    return;
  }
  std::vector<float> stats(std::size_t(rows) * kWeightStatsWidth);
  for (std::int64_t r = 0; r < rows; ++r)
    encode_weight_stats(weight_row_stats(data + r * cols, cols),
                        stats.data() + r * kWeightStatsWidth);
  trace.record(weight_stats_tap_name(gguf_name), -1, 0, rows, {kWeightStatsWidth}, stats.data());
  for (std::int64_t r : sampled_weight_rows(gguf_name, rows, o.sample_rows, o.seed))
    trace.record(name, -1, r, 1, {cols}, data + r * cols);
}

std::string weight_tap_name(std::string_view gguf_name) {
  return std::string(kWeightTapPrefix) + std::string(gguf_name);
}

std::string weight_stats_tap_name(std::string_view gguf_name) {
  return std::string(kWeightStatsTapPrefix) + std::string(gguf_name);
}

bool is_weight_tap(std::string_view tap_name) {
  return tap_name.substr(0, kWeightTapPrefix.size()) == kWeightTapPrefix ||
         tap_name.substr(0, kWeightStatsTapPrefix.size()) == kWeightStatsTapPrefix;
}

std::optional<std::string> weight_tap_tensor(std::string_view tap_name) {
  if (tap_name.substr(0, kWeightTapPrefix.size()) != kWeightTapPrefix) return std::nullopt;
  return std::string(tap_name.substr(kWeightTapPrefix.size()));
}

}  // namespace tapdiff
