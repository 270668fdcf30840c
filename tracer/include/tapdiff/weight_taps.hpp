// Weight taps: every weight tensor as a program will use it (after loading and
// dequantization), recorded into the trace beside the activation taps so that diff can
// compare weights before any activation (docs/trace-schema.md, "Weight taps").
//
//   weight.<gguf name>        row r of the tensor at "position" r, row shape [cols]: every row
//                             in full mode, a seeded sample of rows in stats mode
//   weight_stats.<gguf name>  stats mode only: row r's statistics, row shape [11]
//
// A matrix of GGUF shape ne = [cols, rows] has `rows` rows of `cols` elements; a 1-D tensor
// is one row. Weight taps are global (layer -1) and written before the first step.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace tapdiff {

class TraceWriter;

enum class WeightTapMode { full, stats };

struct WeightTapOptions {
  WeightTapMode mode = WeightTapMode::full;
  int sample_rows = 8;     // stats mode: full rows kept per tensor
  std::uint64_t seed = 0;  // which rows are sampled
};

inline constexpr std::string_view kWeightTapPrefix = "weight.";
inline constexpr std::string_view kWeightStatsTapPrefix = "weight_stats.";
// `--weights auto` records statistics instead of full tensors above this many parameters.
inline constexpr std::uint64_t kWeightStatsAboveParameters = 50'000'000;

// "full", "stats" or "auto" (stats when n_parameters > stats_above). Throws
// std::invalid_argument naming the expected values.
WeightTapMode resolve_weight_tap_mode(std::string_view mode, std::uint64_t n_parameters,
                                      std::uint64_t stats_above = kWeightStatsAboveParameters);

// Exact per-row statistics: sums accumulated in double in index order over the finite
// elements, so two programs holding bit-identical rows record identical statistics.
struct WeightRowStats {
  double sum = 0;
  double sum_squares = 0;
  float min = 0, max = 0;  // over the finite elements; 0 when there are none
  std::int64_t nonfinite = 0;
  std::uint64_t hash = 0;  // FNV-1a 64 over the float32 bit patterns, little-endian bytes
};

// Stored as 11 floats: sum and sum_squares as (hi, lo) float pairs (hi + lo keeps 48 bits),
// min, max, nonfinite, and the hash as four 16-bit pieces (exact in float32), low first.
inline constexpr int kWeightStatsWidth = 11;
WeightRowStats weight_row_stats(const float* row, std::int64_t n);
void encode_weight_stats(const WeightRowStats& stats, float* out);  // kWeightStatsWidth floats
WeightRowStats decode_weight_stats(const float* in);

// Increasing row indices: all rows when n_sample >= n_rows, else n_sample of them chosen by
// (seed, gguf_name) — both programs pick the same rows.
std::vector<std::int64_t> sampled_weight_rows(std::string_view gguf_name, std::int64_t n_rows,
                                              int n_sample, std::uint64_t seed);

// Records one tensor, (rows, cols) row-major float32 in host memory. Throws TraceError.
void record_weight(TraceWriter& trace, std::string_view gguf_name, std::int64_t rows,
                   std::int64_t cols, const float* data, const WeightTapOptions& options);

std::string weight_tap_name(std::string_view gguf_name);        // "weight.<gguf name>"
std::string weight_stats_tap_name(std::string_view gguf_name);  // "weight_stats.<gguf name>"
bool is_weight_tap(std::string_view tap_name);                  // either prefix
// The tensor a "weight." tap holds; nullopt for other taps (weight_stats. included).
std::optional<std::string> weight_tap_tensor(std::string_view tap_name);

}  // namespace tapdiff
