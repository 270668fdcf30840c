// A KV cache's values as the run stored them (diff/cache_rounding.hpp). Whether they match
// llama.cpp's is the llama.cpp tests' to say (test_llama_cpp.py replays its attention to 1e-6);
// these pin the properties the replay relies on.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <set>

#include "diff/cache_rounding.hpp"

namespace tapdiff::diff {
namespace {

std::vector<double> random_rows(std::size_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<double> normal(0, 1);
  std::vector<double> x(n);
  for (double& v : x) v = normal(rng);
  return x;
}

CacheFormat format(const std::string& type, bool rotated) { return {type, rotated, rotated, true}; }

TEST(CacheRounding, AnF32CacheIsUntouched) {
  auto x = random_rows(4 * 128, 1);
  const auto before = x;
  round_k_to_cache(format("f32", false), x, 128, 64);
  round_q_to_cache(format("f32", false), x, 64);
  EXPECT_EQ(x, before);
}

TEST(CacheRounding, UnwrittenSlotsStayZeroAndNoWidthIsNoRow) {
  auto x = random_rows(3 * 64, 2);
  std::fill(x.begin() + 64, x.begin() + 128, 0.0);  // the slot no position wrote
  round_v_to_cache(format("q4_0", true), x, 64, 64);
  for (std::size_t i = 64; i < 128; ++i) EXPECT_EQ(x[i], 0.0);
  std::vector<double> none;
  round_k_to_cache(format("q8_0", false), none, 0, 64);  // returns: nothing to round
  EXPECT_TRUE(none.empty());
}

// A block type keeps at most 2^bits values per block of 32, and a stored row stores as itself:
// in the plain basis and in llama.cpp's rotated one (K over 128 at head_dim 128, V over 64).
TEST(CacheRounding, BlockTypesStoreAStoredRowAsItself) {
  for (const char* type : {"q8_0", "q4_0", "q4_1", "q5_0", "q5_1", "iq4_nl"})
    for (bool rotated : {false, true}) {
      auto k = random_rows(2 * 256, 3), v = k;
      round_k_to_cache(format(type, rotated), k, 256, 128);
      round_v_to_cache(format(type, rotated), v, 256, 128);
      if (!rotated) {
        const std::size_t levels = std::string(type) == "q8_0" ? 256 : std::string(type).rfind("q5", 0) == 0 ? 32 : 16;
        for (std::size_t b = 0; b < k.size(); b += 32)
          EXPECT_LE(std::set<double>(k.begin() + std::ptrdiff_t(b), k.begin() + std::ptrdiff_t(b + 32)).size(), levels)
              << type;
      } else {
        EXPECT_NE(k, v) << type << ": K rotated over 128, V over 64 blocks";
      }
      for (auto* rows : {&k, &v}) {
        auto again = *rows;
        if (rows == &k) round_k_to_cache(format(type, rotated), again, 256, 128);
        else round_v_to_cache(format(type, rotated), again, 256, 128);
        for (std::size_t i = 0; i < again.size(); ++i) ASSERT_NEAR(again[i], (*rows)[i], 1e-6) << type << " " << i;
      }
    }
}

// q is rounded to q8_0 in K's basis: the rotation is orthonormal, so an f32-exact q keeps its
// norm within q8_0's rounding, rotated or not.
TEST(CacheRounding, QGoesToQ8InKsBasis) {
  const auto q = random_rows(4 * 128, 4);
  double norm = 0;
  for (double v : q) norm += v * v;
  for (bool rotated : {false, true}) {
    auto r = q;
    round_q_to_cache(format("q4_0", rotated), r, 128);
    double err = 0;
    for (std::size_t i = 0; i < q.size(); ++i) err += (r[i] - q[i]) * (r[i] - q[i]);
    EXPECT_GT(err, 0);
    EXPECT_LT(err / norm, 1e-4) << "rotated " << rotated;
  }
}

TEST(CacheRounding, TypesTheReplayModels) {
  for (const char* t : {"f32", "f16", "bf16", "q8_0", "q4_0", "q4_1", "q5_0", "q5_1", "iq4_nl"})
    EXPECT_TRUE(cache_type_modeled(t)) << t;
  for (const char* t : {"q4_K", "tq1_0", "Q4_0", ""}) EXPECT_FALSE(cache_type_modeled(t)) << t;
}

}  // namespace
}  // namespace tapdiff::diff
