#include "diff/cache_rounding.hpp"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdint>

#include "model/dequantize.hpp"
#include "model/ggml_type.hpp"
#include "model/half.hpp"
#include "model/quantize.hpp"

namespace tapdiff::diff {
namespace {

constexpr std::size_t kBlock = 32;

// IQ4_NL's 16 levels (ggml's kvalues_iq4nl).
constexpr float kIq4nlLevels[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};

// The level nearest x, ties to the upper one, as ggml's best_index_int8 picks it.
int nearest_iq4nl_level(float x) {
  if (x <= kIq4nlLevels[0]) return 0;
  if (x >= kIq4nlLevels[15]) return 15;
  int lo = 0, hi = 15;
  while (hi - lo > 1) {
    const int mid = (lo + hi) / 2;
    (x < kIq4nlLevels[mid] ? hi : lo) = mid;
  }
  return x - kIq4nlLevels[hi - 1] < kIq4nlLevels[hi] - x ? hi - 1 : hi;
}

// One block of 32 through ggml's reference IQ4_NL encoder (quantize_row_iq4_nl_ref, with which
// its CPU backend stores a cache) and back: levels from the signed extreme over the lowest
// level, then the scale refit by least squares weighted by x², stored in f16.
void round_iq4_nl_block(float* x) {
  float amax = 0, max = 0;
  for (std::size_t j = 0; j < kBlock; ++j)
    if (std::fabs(x[j]) > amax) {
      amax = std::fabs(x[j]);
      max = x[j];
    }
  if (amax < 1e-15f) {
    std::fill_n(x, kBlock, 0.0f);
    return;
  }
  const float id = 1 / (max / kIq4nlLevels[0]);
  int level[kBlock];
  float sum_qx = 0, sum_q2 = 0;
  for (std::size_t j = 0; j < kBlock; ++j) {
    level[j] = nearest_iq4nl_level(id * x[j]);
    const float q = kIq4nlLevels[level[j]], w = x[j] * x[j];
    sum_qx += w * q * x[j];
    sum_q2 += w * q * q;
  }
  const float d = fp16_to_fp32(fp32_to_fp16(sum_qx / sum_q2));
  for (std::size_t j = 0; j < kBlock; ++j) x[j] = d * kIq4nlLevels[level[j]];
}

// `values`, rows of `width`, as a cache of `type` stores them: 16-bit types element by element,
// block types in blocks of 32 along each row (model/'s encoders follow ggml's reference
// quantizers step for step).
void round_to(const std::string& type, std::vector<double>& values, std::size_t width) {
  if (type == "f16" || type == "bf16") {
    for (double& x : values) x = rounded_16bit(static_cast<float>(x), type == "bf16");
    return;
  }
  if (width == 0 || width % kBlock != 0) return;  // no cache llama.cpp would make
  std::string upper = type;
  for (char& c : upper) c = char(std::toupper(static_cast<unsigned char>(c)));
  const auto block_type = ggml_type_from_name(upper);
  std::vector<float> row(width);
  std::vector<std::uint8_t> blocks;
  if (block_type) blocks.resize(width / kBlock * std::size_t(ggml_type_traits(*block_type).block_bytes));
  for (std::size_t start = 0; start + width <= values.size(); start += width) {
    const auto first = values.begin() + std::ptrdiff_t(start);
    if (std::all_of(first, first + std::ptrdiff_t(width), [](double v) { return v == 0; })) continue;
    std::copy_n(first, width, row.begin());
    if (block_type) {
      quantize_row(*block_type, row.data(), blocks.data(), std::int64_t(width));
      dequantize_row(*block_type, blocks.data(), row.data(), std::int64_t(width));
    } else if (type == "iq4_nl") {
      for (std::size_t b = 0; b < width; b += kBlock) round_iq4_nl_block(row.data() + b);
    }
    std::copy(row.begin(), row.end(), values.begin() + std::ptrdiff_t(start));
  }
}

// x <- H x over each block of n elements, H the orthonormal Sylvester-Hadamard matrix of size n
// (a power of 2; H = Hᵀ = H⁻¹, as llama.cpp builds it): a fast Walsh-Hadamard transform.
void hadamard_blocks(std::vector<double>& x, std::size_t n) {
  if (n < 2) return;
  const double norm = 1 / std::sqrt(double(n));
  for (std::size_t b = 0; b + n <= x.size(); b += n) {
    const auto first = x.begin() + std::ptrdiff_t(b);
    if (std::all_of(first, first + std::ptrdiff_t(n), [](double v) { return v == 0; })) continue;
    for (std::size_t h = 1; h < n; h *= 2)
      for (std::size_t i = b; i < b + n; i += 2 * h)
        for (std::size_t j = i; j < i + h; ++j) {
          const double u = x[j], v = x[j + h];
          x[j] = u + v;
          x[j + h] = u - v;
        }
    for (std::size_t i = b; i < b + n; ++i) x[i] *= norm;
  }
}

// A rotated cache rounds in the rotated basis: K and q over the largest power of 2 dividing
// head_dim, V over 64 (llama.cpp's sizes; measured: they replay its attention to 1e-14).
std::size_t k_rotation(const CacheFormat& cache, std::size_t head_dim) {
  return cache.rotated_k && head_dim % 64 == 0 ? head_dim & (~head_dim + 1) : 0;
}

// A replayed cache's slots no position wrote are zero, and stay so: neither step touches them.
void round_rotated(std::vector<double>& x, const std::string& type, std::size_t width, std::size_t rotation) {
  hadamard_blocks(x, rotation);
  round_to(type, x, width);
  hadamard_blocks(x, rotation);
}

}  // namespace

bool cache_type_modeled(std::string_view type) {
  for (std::string_view t : {"f32", "f16", "bf16", "q8_0", "q4_0", "q4_1", "q5_0", "q5_1", "iq4_nl"})
    if (type == t) return true;
  return false;
}

void round_k_to_cache(const CacheFormat& cache, std::vector<double>& rows, std::size_t kv_dim, std::size_t head_dim) {
  if (cache.type != "f32") round_rotated(rows, cache.type, kv_dim, k_rotation(cache, head_dim));
}

void round_v_to_cache(const CacheFormat& cache, std::vector<double>& rows, std::size_t kv_dim, std::size_t head_dim) {
  if (cache.type != "f32") round_rotated(rows, cache.type, kv_dim, cache.rotated_v && head_dim % 64 == 0 ? 64 : 0);
}

void round_q_to_cache(const CacheFormat& cache, std::vector<double>& q, std::size_t head_dim) {
  if (cache.type == "f32") return;
  const bool sixteen_bit = cache.type == "f16" || cache.type == "bf16";
  round_rotated(q, sixteen_bit ? cache.type : "q8_0", q.size(), k_rotation(cache, head_dim));
}

}  // namespace tapdiff::diff
