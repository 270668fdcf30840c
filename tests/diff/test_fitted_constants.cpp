// Constants recovered from actual values: a rotation's frequency base, a norm's epsilon.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "diff/fitted_constants.hpp"

namespace tapdiff::diff {
namespace {

std::vector<float> random_row(std::size_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

TEST(FittedConstants, RopeBaseOfAnyRotation) {
  for (const auto pairing : {ref::Pairing::norm, ref::Pairing::neox})
    for (const float base : {500.0f, 10000.0f, 1e6f, 12345.0f})
      for (const std::int64_t position : {3, 7, 40}) {
        const std::vector<float> x = random_row(4 * 32, 7);
        std::vector<double> y(x.begin(), x.end());
        ref::rope(y.data(), 4, 32, 32, position, base, pairing);
        const auto fitted = fit_rope_base(x, std::vector<float>(y.begin(), y.end()), 4, 32, 32, position, pairing);
        ASSERT_TRUE(fitted) << base << " at " << position;
        EXPECT_NEAR(*fitted / base, 1.0, 1e-3) << base << " at " << position;
      }
}

TEST(FittedConstants, NoRotationNoBase) {
  const std::vector<float> x = random_row(64, 3);
  EXPECT_FALSE(fit_rope_base(x, x, 2, 32, 32, 5, ref::Pairing::norm));  // every angle 0
  EXPECT_FALSE(fit_rope_base(x, x, 2, 32, 32, 0, ref::Pairing::norm));  // position 0 rotates nothing
}

TEST(FittedConstants, RmsEpsilon) {
  const std::vector<float> x = random_row(64, 5), w = random_row(64, 6);
  for (const float eps : {1e-5f, 0.5f, 3.0f}) {
    std::vector<double> xd(x.begin(), x.end()), y(x.size());
    ref::rmsnorm(xd.data(), w.data(), 64, eps, y.data());
    const auto fitted = fit_rms_eps(x, std::vector<float>(y.begin(), y.end()), w.data());
    ASSERT_TRUE(fitted);
    EXPECT_NEAR(*fitted, eps, eps * 1e-2 + 1e-5) << eps;
  }
  // Not a scaled x: the sign flipped.
  std::vector<float> flipped(x.size());
  for (std::size_t i = 0; i < x.size(); ++i) flipped[i] = -x[i] * w[i];
  EXPECT_FALSE(fit_rms_eps(x, flipped, w.data()));
}

TEST(FittedConstants, ScaleOfAScaledRow) {
  const std::vector<float> x = {1.0f, -2.0f, 0.5f, 3.0f};
  std::vector<float> y(x.size());
  for (std::size_t i = 0; i < x.size(); ++i) y[i] = 2.5f * x[i];
  const auto c = fit_scale(x, y);
  ASSERT_TRUE(c);
  EXPECT_NEAR(*c, 2.5, 1e-6);
  EXPECT_FALSE(fit_scale(std::vector<float>(4, 0.0f), y));
  EXPECT_FALSE(fit_scale(x, std::vector<float>(3, 1.0f)));
}

// Two heads over five keys, the last key masked (0 in both rows): softmax(k s) against softmax(s).
TEST(FittedConstants, ScoreScaleOfASharperSoftmax) {
  const std::vector<double> scores = {0.3, -1.2, 2.0, 0.7, 0.0, -0.4, 1.1, 0.2, 1.9, 0.0};
  auto softmax = [&](double k) {
    std::vector<float> p(scores.size(), 0.0f);
    for (std::size_t h = 0; h < 2; ++h) {
      double sum = 0;
      for (std::size_t t = 0; t < 4; ++t) sum += std::exp(k * scores[h * 5 + t]);
      for (std::size_t t = 0; t < 4; ++t) p[h * 5 + t] = float(std::exp(k * scores[h * 5 + t]) / sum);
    }
    return p;
  };
  const auto k = fit_score_scale(softmax(0.6931), softmax(1.0), 2);
  ASSERT_TRUE(k);
  EXPECT_NEAR(*k, 0.6931, 1e-5);
  EXPECT_FALSE(fit_score_scale(softmax(0.5), std::vector<float>(10, 0.25f), 2)) << "a flat row fits nothing";
  EXPECT_FALSE(fit_score_scale(softmax(0.5), softmax(1.0), 3)) << "rows of another number of heads";
}

// A bias of 8 elements added to elements 2..5 of a row; element 4's bias is too small to tell and
// follows its neighbours.
TEST(FittedConstants, BiasMaskOfAPartlyAddedBias) {
  const std::vector<float> without = {1.0f, -2.0f, 0.5f, 3.0f, -1.5f, 0.25f, 2.0f, -0.75f};
  const std::vector<float> b = {0.5f, -0.4f, 0.3f, 0.6f, 1e-4f, -0.7f, 0.2f, 0.45f};
  std::vector<float> actual = without;
  for (std::size_t i = 2; i < 6; ++i) actual[i] += b[i];
  const auto mask = fit_bias_mask(without, actual, b);
  ASSERT_TRUE(mask);
  EXPECT_EQ(*mask, std::vector<bool>({false, false, true, true, true, true, false, false}));
  EXPECT_FALSE(fit_bias_mask(without, without, b)) << "no bias anywhere is the variant without it";
  std::vector<float> everywhere = without, halved = without;
  for (std::size_t i = 0; i < b.size(); ++i) everywhere[i] += b[i], halved[i] += 0.5f * b[i];
  EXPECT_FALSE(fit_bias_mask(without, everywhere, b)) << "the bias everywhere is the correct computation";
  EXPECT_FALSE(fit_bias_mask(without, halved, b)) << "half the bias is neither added nor not";
  EXPECT_FALSE(fit_bias_mask(without, actual, std::vector<float>(3, 1.0f))) << "rows of other sizes";
}

}  // namespace
}  // namespace tapdiff::diff
