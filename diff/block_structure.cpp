#include "diff/block_structure.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <set>

#include <fmt/format.h>

namespace tapdiff::diff {
namespace {

// Elements that share one scale (and min): the block of the legacy types, 32 or 16 of a K-quant's 256.
std::size_t sub_block_elems(GgmlType type) { return type == GgmlType::Q6_K ? 16 : 32; }

// The greatest common divisor of two gaps measured in floats, a >= b (Euclid, a remainder within
// tol of 0 or of b is none).
double float_gcd(double a, double b, double tol) {
  while (b > tol) {
    double r = std::fmod(a, b);
    if (b - r <= tol) r = 0;
    a = b;
    b = r;
  }
  return a;
}

// The quantization step of a sub-block: the gcd of the gaps between its distinct values (0 when
// it holds fewer than two). Given the actual values beside the correct ones: where they lie on the
// same grid (whole steps apart) they fill in levels the correct ones miss.
double quantization_step(std::vector<double> e, double tol) {
  std::sort(e.begin(), e.end());
  double step = 0;
  for (std::size_t i = 1; i < e.size(); ++i) {
    const double gap = e[i] - e[i - 1];
    if (gap > tol) step = step == 0 ? gap : float_gcd(std::max(step, gap), std::min(step, gap), tol);
  }
  return step;
}

struct SubBlock {
  std::size_t row = 0, index = 0;  // index: the sub-block within its block
  bool zero = true;                // every actual value 0
  bool affine = false;                        // x = alpha e + beta, to the values' rounding
  double alpha = 1, beta = 0, magnitude = 0;
  double step = 0;
  long long whole_steps_gcd = 0;  // every difference a whole number of steps: their gcd; else 0
};

SubBlock measure(const Row& e, const Row& x, std::size_t begin, std::size_t n, double tol) {
  SubBlock s;
  double me = 0, mx = 0;
  std::vector<double> values(2 * n);
  for (std::size_t i = 0; i < n; ++i) {
    values[i] = e[begin + i];
    values[n + i] = x[begin + i];
    me += e[begin + i], mx += x[begin + i];
    s.zero = s.zero && x[begin + i] == 0.0f;
    s.magnitude = std::max({s.magnitude, std::fabs(double(e[begin + i])), std::fabs(double(x[begin + i]))});
  }
  me /= double(n), mx /= double(n);
  double see = 0, sex = 0;
  for (std::size_t i = 0; i < n; ++i) {
    see += (e[begin + i] - me) * (e[begin + i] - me);
    sex += (e[begin + i] - me) * (x[begin + i] - mx);
  }
  if (see > 0) {
    s.alpha = sex / see;
    s.beta = mx - s.alpha * me;
    double worst = 0;
    for (std::size_t i = 0; i < n; ++i)
      worst = std::max(worst, std::fabs(x[begin + i] - (s.alpha * e[begin + i] + s.beta)));
    s.affine = worst <= 1e-4 * std::max(s.magnitude, std::fabs(s.beta));
  }
  s.step = quantization_step(values, tol);
  if (s.step > 0) {
    long long g = 0;
    bool whole = true;
    for (std::size_t i = 0; i < n && whole; ++i) {
      const double k = (x[begin + i] - e[begin + i]) / s.step;
      whole = std::fabs(k - std::round(k)) <= 0.01;
      g = std::gcd(g, std::llabs(std::llround(k)));
    }
    s.whole_steps_gcd = whole ? g : 0;
  }
  return s;
}

// Each block holds the multiset of its own correct values.
bool same_values(const Row& e, const Row& x, std::size_t begin, std::size_t n, double tol) {
  std::vector<float> a(e.begin() + std::ptrdiff_t(begin), e.begin() + std::ptrdiff_t(begin + n));
  std::vector<float> b(x.begin() + std::ptrdiff_t(begin), x.begin() + std::ptrdiff_t(begin + n));
  std::sort(a.begin(), a.end());
  std::sort(b.begin(), b.end());
  for (std::size_t i = 0; i < n; ++i)
    if (std::fabs(a[i] - b[i]) > tol) return false;
  return true;
}

// "sub-blocks 4..7", "sub-blocks 1, 3 and 5".
std::string sub_block_list(const std::set<std::size_t>& s) {
  std::vector<std::string> parts;
  for (auto it = s.begin(); it != s.end();) {
    std::size_t first = *it, last = first;
    for (++it; it != s.end() && *it == last + 1; ++it) last = *it;
    parts.push_back(last > first + 1 ? fmt::format("{}..{}", first, last)
                                     : last > first ? fmt::format("{}, {}", first, last) : fmt::format("{}", first));
  }
  std::string out;
  for (std::size_t i = 0; i < parts.size(); ++i)
    out += (i == 0 ? "" : i + 1 == parts.size() ? " and " : ", ") + parts[i];
  return fmt::format("sub-block{} {}", s.size() == 1 ? "" : "s", out);
}

bool near(double a, double b, double tol) { return std::fabs(a - b) <= tol; }

}  // namespace

std::string decoder_structure(const Rows& expected, const Rows& actual, GgmlType type) {
  const std::size_t block = std::size_t(ggml_type_traits(type).block_elems);
  if (block <= 1) return "";
  const std::size_t sub = sub_block_elems(type), subs_per_block = block / sub;
  std::vector<SubBlock> differing;
  std::size_t blocks = 0, differing_blocks = 0, permuted_blocks = 0;
  for (std::size_t r = 0; r < std::min(expected.size(), actual.size()); ++r) {
    const Row &e = expected[r], &x = actual[r];
    if (e.empty() || e.size() != x.size() || e.size() % block != 0) continue;
    double largest = 0;
    for (float v : e) largest = std::max(largest, double(std::fabs(v)));
    const double tol = 1e-5 * largest;  // two programs' rounding of the same decode
    for (std::size_t b = 0; b < e.size() / block; ++b, ++blocks) {
      bool differs = false;
      for (std::size_t k = 0; k < subs_per_block; ++k) {
        const std::size_t begin = b * block + k * sub;
        bool equal = true;
        for (std::size_t i = begin; i < begin + sub && equal; ++i) equal = std::fabs(x[i] - e[i]) <= tol;
        if (equal) continue;
        differs = true;
        SubBlock s = measure(e, x, begin, sub, tol);
        s.row = r, s.index = k;
        differing.push_back(s);
      }
      if (!differs) continue;
      ++differing_blocks;
      permuted_blocks += same_values(e, x, b * block, block, tol);
    }
  }
  // Zeros are a buffer never written or a load that never happened, whatever their pattern.
  if (differing.empty() || std::any_of(differing.begin(), differing.end(), [](const SubBlock& s) { return s.zero; }))
    return "";

  std::set<std::size_t> indices;
  for (const SubBlock& s : differing) indices.insert(s.index);
  const std::string where =
      fmt::format("in {} of {} {} blocks{}", differing_blocks, blocks, ggml_type_name(type),
                  subs_per_block > 1 && indices.size() < subs_per_block
                      ? fmt::format(", only in {} of a block", sub_block_list(indices))
                      : "");
  const auto all = [&](auto predicate) { return std::all_of(differing.begin(), differing.end(), predicate); };

  if (permuted_blocks == differing_blocks)
    return fmt::format("each differing block holds its own correct values in another order ({}): the decoder "
                       "unpacks the quants in the wrong order",
                       where);
  if (all([](const SubBlock& s) { return s.affine; })) {
    const bool unit_scale = all([](const SubBlock& s) { return near(s.alpha, 1, 1e-4); });
    const bool no_offset = all([](const SubBlock& s) { return near(s.beta, 0, 1e-4 * s.magnitude); });
    // One factor or one constant over most of a row is the row's scale or a bias, not its blocks'
    // (a sub-block of zeros or of values under the rounding is the same either way).
    for (std::size_t r = 0; r < expected.size(); ++r) {
      std::vector<const SubBlock*> row;
      for (const SubBlock& s : differing)
        if (s.row == r) row.push_back(&s);
      if (row.size() < 2 || 2 * row.size() <= expected[r].size() / sub) continue;
      const SubBlock& f = *row.front();
      const bool one_factor = std::all_of(row.begin(), row.end(), [&](const SubBlock* s) {
        return near(s->beta, 0, 1e-4 * s->magnitude) && near(s->alpha, f.alpha, 1e-4);
      });
      const bool one_constant = std::all_of(row.begin(), row.end(), [&](const SubBlock* s) {
        return near(s->alpha, 1, 1e-4) && near(s->beta, f.beta, 1e-4 * s->magnitude);
      });
      if (one_factor || one_constant) return "";
    }
    const SubBlock& first = differing.front();
    // A decoder's wrong scale or min differs from block to block, as the right ones do.
    const bool one_for_all = all([&](const SubBlock& s) {
      return near(s.alpha, first.alpha, 1e-4) && near(s.beta, first.beta, 1e-4 * std::max(s.magnitude, first.magnitude));
    });
    // A legacy type's scale and min are its block's; a K-quant's, each sub-block's.
    const std::string unit = subs_per_block > 1 ? "sub-block" : "block";
    if (unit_scale) {
      const bool steps_known = all([](const SubBlock& s) { return s.step > 0; });
      // In steps of the block's scale, whose sign the spacing does not show.
      const double shift = steps_known ? std::fabs(first.beta) / first.step : 0;
      if (steps_known && std::round(shift) != 0 &&
          all([&](const SubBlock& s) { return near(std::fabs(s.beta) / s.step, std::round(shift), 0.01); }))
        return fmt::format("each differing {}'s values shifted by {} quantization steps ({}): the decoder's offset "
                           "(zero point) of the quants",
                           unit, std::llround(shift), where);
      if (one_for_all) return "";
      return fmt::format("each differing {0}'s values shifted by a constant of its own, their spacing right ({1}): "
                         "the {0} mins decoded wrong (their unpacking or index)",
                         unit, where);
    }
    if (one_for_all) return "";
    if (no_offset)
      return fmt::format("each differing {0}'s values times a factor of its own, zero kept ({1}): the {0} scales "
                         "decoded wrong (their unpacking or index)",
                         unit, where);
    return fmt::format("each differing {0} an affine map of its correct values, a factor and an offset of its own "
                       "({1}): the {0} scales or mins decoded wrong (their unpacking or index)",
                       unit, where);
  }
  long long g = 0;
  for (const SubBlock& s : differing) g = s.whole_steps_gcd > 0 && g >= 0 ? std::gcd(g, s.whole_steps_gcd) : -1;
  if (g >= 2) {
    const bool power_of_two = (g & (g - 1)) == 0;
    return fmt::format("every difference a whole multiple of {} quantization steps ({}): the quants' {} decoded "
                       "wrong",
                       g, where,
                       power_of_two ? fmt::format("bits from bit {} up (their high bits)", __builtin_ctzll(g))
                                    : std::string("integer values"));
  }
  return "";
}

}  // namespace tapdiff::diff
