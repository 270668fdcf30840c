// reference/ops against hand-computed cases: every formula checked on small vectors whose
// outputs were worked out by hand (the arithmetic is in the comments).
#include <cmath>
#include <cstring>
#include <gtest/gtest.h>
#include <vector>

#include "reference/ops.hpp"

namespace tapdiff::ref {
namespace {

void expect_near(const std::vector<double>& got, const std::vector<double>& want, double tol,
                 const char* what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (std::size_t i = 0; i < got.size(); ++i)
    EXPECT_NEAR(got[i], want[i], tol) << what << " [" << i << "]";
}

TEST(RefOps, RmsNorm) {
  // mean(x²) = (1+4+9+16)/4 = 7.5, 1/sqrt(7.5) = 0.36514837; w scales element-wise.
  const std::vector<double> x = {1, 2, 3, 4};
  const std::vector<float> w = {1, 1, 2, 0.5f};
  std::vector<double> out(4);
  rmsnorm(x.data(), w.data(), 4, 0.0f, out.data());
  expect_near(out, {0.36514837, 0.73029674, 2.19089023, 0.73029674}, 1e-8, "rmsnorm");
  rmsnorm(x.data(), nullptr, 4, 0.0f, out.data());
  expect_near(out, {0.36514837, 0.73029674, 1.09544512, 1.46059349}, 1e-8, "rmsnorm no weight");
  // eps enters under the root: x = {1}, eps = 3 → 1/sqrt(1+3) = 0.5
  const std::vector<double> one = {1};
  std::vector<double> o1(1);
  rmsnorm(one.data(), nullptr, 1, 3.0f, o1.data());
  EXPECT_DOUBLE_EQ(o1[0], 0.5);
}

TEST(RefOps, MatvecRowMajorAndTransposed) {
  // W = [[1,2,3],[4,5,6]] (2 out × 3 in), x = [1,0,-1] → [1-3, 4-6] = [-2,-2]
  const std::vector<float> W = {1, 2, 3, 4, 5, 6};
  const std::vector<double> x = {1, 0, -1};
  std::vector<double> y(2);
  matvec(W.data(), x.data(), 3, 2, y.data());
  expect_near(y, {-2, -2}, 0, "W x");
  // Square S = [[1,2],[3,4]], x = [1,1]: S x = [3,7]; Sᵀ x = [4,6]
  const std::vector<float> S = {1, 2, 3, 4};
  const std::vector<double> ones = {1, 1};
  matvec(S.data(), ones.data(), 2, 2, y.data());
  expect_near(y, {3, 7}, 0, "S x");
  matvec(S.data(), ones.data(), 2, 2, y.data(), /*transposed=*/true);
  expect_near(y, {4, 6}, 0, "S^T x");
}

TEST(RefOps, DotIsSixteenOrderedSumsOnEveryCpu) {
  // dot is compiled for AVX-512 too (target_clones): there its sixteen sums are one register's
  // lanes, and must round exactly as the sums written out here do, unfused (an FMA rounds
  // once where a multiply and an add round twice). Lengths below, at and past 16, and ragged.
  std::vector<float> w(301), xf(301);
  std::vector<double> xd(301);
  for (std::size_t i = 0; i < w.size(); ++i) {
    w[i] = std::sin(float(i) * 0.37f) * 1.7f;
    xf[i] = std::cos(float(i) * 0.11f) / 3.0f;
    xd[i] = double(xf[i]) * (1.0 + 1e-9 * double(i));
  }
  for (const int n : {0, 7, 16, 17, 64, 301}) {
    float sf[16] = {};
    double sd[16] = {};
    for (int i = 0; i < n; ++i) {
      volatile float pf = w[std::size_t(i)] * xf[std::size_t(i)];  // rounded: no fused add
      sf[i % 16] += pf;
      volatile double pd = double(w[std::size_t(i)]) * xd[std::size_t(i)];
      sd[i % 16] += pd;
    }
    float want_f = 0;
    double want_d = 0;
    for (int j = 0; j < 16; ++j) want_f += sf[j], want_d += sd[j];
    const float got_f = dot(w.data(), xf.data(), n);
    const double got_d = dot(w.data(), xd.data(), n);
    EXPECT_EQ(0, std::memcmp(&got_f, &want_f, sizeof got_f)) << n << ": " << got_f << " vs " << want_f;
    EXPECT_EQ(0, std::memcmp(&got_d, &want_d, sizeof got_d)) << n << ": " << got_d << " vs " << want_d;
  }
}

TEST(RefOps, AddBias) {
  std::vector<double> x = {1, 2};
  const std::vector<float> b = {0.5f, -2};
  add_bias(x.data(), b.data(), 2);
  expect_near(x, {1.5, 0}, 0, "bias");
}

TEST(RefOps, RopeAtPositionZeroIsIdentityForBothPairings) {
  const std::vector<double> x0 = {0.3, -1.2, 2.5, 0.7, 1.1, -0.4, 0.9, 3.3};
  for (auto pairing : {Pairing::norm, Pairing::neox}) {
    auto x = x0;
    rope(x.data(), 2, 4, 4, 0, 10000.0f, pairing);
    expect_near(x, x0, 0, "rope p=0");
  }
}

TEST(RefOps, RopePairingsOnTheSameInput) {
  // head_dim 4, n_rot 4, base 10000, position 1: θ0 = 1, θ1 = 10000^(-2/4) = 0.01.
  // x = [1, 0, 0, 0]:
  //   norm pairs (0,1) with θ0 and (2,3) with θ1 → [cos 1, sin 1, 0, 0]
  //   neox pairs (0,2) with θ0 and (1,3) with θ1 → [cos 1, 0, sin 1, 0]
  std::vector<double> x = {1, 0, 0, 0};
  rope(x.data(), 1, 4, 4, 1, 10000.0f, Pairing::norm);
  expect_near(x, {std::cos(1.0), std::sin(1.0), 0, 0}, 1e-12, "norm");
  x = {1, 0, 0, 0};
  rope(x.data(), 1, 4, 4, 1, 10000.0f, Pairing::neox);
  expect_near(x, {std::cos(1.0), 0, std::sin(1.0), 0}, 1e-12, "neox");
  // x = [0, 0, 1, 0] at position 2 under norm: pair (2,3) by θ = 2·0.01 → [0, 0, cos .02, sin .02]
  x = {0, 0, 1, 0};
  rope(x.data(), 1, 4, 4, 2, 10000.0f, Pairing::norm);
  expect_near(x, {0, 0, std::cos(0.02), std::sin(0.02)}, 1e-12, "norm p=2");
}

// The engine's kernel test (HostOps.RopeLinearAndYarnScaling) works these angles out.
TEST(RefOps, RopeLinearAndYarnScaling) {
  RopeScaling linear, yarn;
  linear.type = RopeScalingType::linear;
  linear.factor = 4.0f;
  yarn.type = RopeScalingType::yarn;
  yarn.factor = 4.0f;
  yarn.n_ctx_orig = 64;
  const double m = 1.0 + 0.1 * std::log(4.0);
  const std::pair<RopeScaling, std::vector<double>> cases[] = {
      {linear, {std::cos(0.25), std::sin(0.25), std::cos(0.025), std::sin(0.025), std::cos(0.0025), std::sin(0.0025),
                std::cos(0.00025), std::sin(0.00025)}},
      {yarn, {m * std::cos(1.0), m * std::sin(1.0), m * std::cos(0.0625), m * std::sin(0.0625), m * std::cos(0.0025),
              m * std::sin(0.0025), m * std::cos(0.00025), m * std::sin(0.00025)}}};
  for (const auto& [scaling, want] : cases) {
    std::vector<double> x = {1, 0, 1, 0, 1, 0, 1, 0};
    rope(x.data(), 1, 8, 8, 1, 10000.0f, Pairing::norm, nullptr, scaling);
    expect_near(x, want, 1e-12, scaling.type == RopeScalingType::linear ? "linear" : "yarn");
  }
  // Linear scaling by 8 at position 8 is the unscaled rotation at 1.
  std::vector<double> a = {0.3, -1.2, 2.5, 0.7}, b = a;
  linear.factor = 8.0f;
  rope(a.data(), 1, 4, 4, 8, 10000.0f, Pairing::neox, nullptr, linear);
  rope(b.data(), 1, 4, 4, 1, 10000.0f, Pairing::neox);
  expect_near(a, b, 1e-12, "linear x8 at 8");
}

TEST(RefOps, RopePartialRotationLeavesTheTail) {
  // n_rot 2 of head_dim 4: only dims 0,1 rotate (θ0 = p = 1); dims 2,3 untouched.
  std::vector<double> x = {1, 0, 5, 6, 1, 0, 7, 8};
  rope(x.data(), 2, 4, 2, 1, 10000.0f, Pairing::norm);
  expect_near(x, {std::cos(1.0), std::sin(1.0), 5, 6, std::cos(1.0), std::sin(1.0), 7, 8}, 1e-12,
              "partial");
}

TEST(RefOps, Softmax) {
  // exp of [0, ln 2, ln 3] = [1, 2, 3] → [1/6, 2/6, 3/6]; a shift changes nothing.
  std::vector<double> x = {0, std::log(2.0), std::log(3.0)};
  softmax(x.data(), 3);
  expect_near(x, {1.0 / 6, 2.0 / 6, 3.0 / 6}, 1e-15, "softmax");
  std::vector<double> big = {1000, 1000 + std::log(3.0)};
  softmax(big.data(), 2);
  expect_near(big, {0.25, 0.75}, 1e-12, "softmax large");
}

TEST(RefOps, SiluAndSwiglu) {
  // silu(x) = x / (1 + e^-x): silu(0) = 0, silu(1) = 0.7310585786, silu(-1) = -0.2689414214
  EXPECT_DOUBLE_EQ(silu(0.0), 0.0);
  EXPECT_NEAR(silu(1.0), 0.7310585786300049, 1e-15);
  EXPECT_NEAR(silu(-1.0), -0.2689414213699951, 1e-15);
  const std::vector<double> g = {1, -1}, u = {2, 3};
  std::vector<double> out(2);
  swiglu(g.data(), u.data(), 2, out.data());
  expect_near(out, {1.4621171572600098, -0.8068242641099853}, 1e-14, "swiglu");
}

TEST(RefOps, GqaMaps) {
  // 4 query heads, 2 kv heads: grouped → 0,0,1,1; modulo → 0,1,0,1
  const int grouped[] = {0, 0, 1, 1}, modulo[] = {0, 1, 0, 1};
  for (int h = 0; h < 4; ++h) {
    EXPECT_EQ(kv_head_for(h, 4, 2, GqaMap::grouped), grouped[h]);
    EXPECT_EQ(kv_head_for(h, 4, 2, GqaMap::modulo), modulo[h]);
  }
}

TEST(RefOps, AttentionOneHead) {
  // K = [[1,0],[0,1]], V = [[1,2],[3,4]], q = [ln 3, 0], scale 1:
  // scores [ln 3, 0] → p = [3/4, 1/4] → out = 3/4·[1,2] + 1/4·[3,4] = [1.5, 2.5]
  const std::vector<double> K = {1, 0, 0, 1}, V = {1, 2, 3, 4}, q = {std::log(3.0), 0};
  std::vector<double> out(2), probs(4, -1);
  attention(q.data(), K.data(), V.data(), 0, 2, AttentionShape{1, 1, 2}, 1.0f, GqaMap::grouped,
            out.data(), probs.data(), 4);
  expect_near(out, {1.5, 2.5}, 1e-14, "out");
  expect_near(probs, {0.75, 0.25, -1, -1}, 1e-14, "probs (only the visible keys written)");
  // Only the first key visible: p = [1] → out = V[0]
  attention(q.data(), K.data(), V.data(), 0, 1, AttentionShape{1, 1, 2}, 1.0f, GqaMap::grouped,
            out.data());
  expect_near(out, {1, 2}, 0, "one key");
  // scale 1/2 (e.g. 1/d for d = 2): scores [ln3/2, 0] → p ∝ [√3, 1]
  attention(q.data(), K.data(), V.data(), 0, 2, AttentionShape{1, 1, 2}, 0.5f, GqaMap::grouped,
            out.data());
  const double p0 = std::sqrt(3.0) / (std::sqrt(3.0) + 1);
  expect_near(out, {p0 * 1 + (1 - p0) * 3, p0 * 2 + (1 - p0) * 4}, 1e-7, "scale");
}

TEST(RefOps, AttentionGqaPicksTheKvHead) {
  // 2 query heads, 1 kv row with 2 kv heads of dim 1: V = [10, 20]; one key → out_h = V[g(h)].
  // n_head 2, n_head_kv 2 (grouped and modulo agree) vs n_head 4, n_head_kv 2 (they differ).
  const std::vector<double> K = {1, 1}, V = {10, 20}, q = {0, 0, 0, 0};
  std::vector<double> out(4);
  attention(q.data(), K.data(), V.data(), 0, 1, AttentionShape{4, 2, 1}, 1.0f, GqaMap::grouped,
            out.data());
  expect_near(out, {10, 10, 20, 20}, 0, "grouped");
  attention(q.data(), K.data(), V.data(), 0, 1, AttentionShape{4, 2, 1}, 1.0f, GqaMap::modulo,
            out.data());
  expect_near(out, {10, 20, 10, 20}, 0, "modulo");
}

}  // namespace
}  // namespace tapdiff::ref
