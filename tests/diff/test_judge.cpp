// The judge of replayed hypotheses: residuals relative to the actual's own size (a near-zero
// prediction never "fits" a zero or near-zero tensor by accident), the margin over the correct
// computation, ties reported as ties, exact copies over approximate ones.
#include <gtest/gtest.h>

#include "diff/judge.hpp"

namespace tapdiff::diff {
namespace {

const std::vector<std::int64_t> kPositions = {0, 1};

// A candidate replaying `rows` (one per position in kPositions).
Candidate replaying(const std::string& variant, const std::string& cls, Rows rows, bool baseline = false) {
  return {variant, cls, baseline, [rows](std::int64_t p) { return rows[std::size_t(p)]; }};
}

Rows scaled(const Rows& rows, float factor) {
  Rows out = rows;
  for (Row& r : out)
    for (float& v : r) v *= factor;
  return out;
}

const Rows kExpected = {{1, -2, 3, 0.5f}, {-1, 2, 0.25f, 4}};

std::vector<std::string> variants(const std::vector<Judged>& list) {
  std::vector<std::string> out;
  for (const auto& j : list) out.push_back(j.candidate->variant);
  return out;
}

TEST(Judge, ANearZeroPredictionDoesNotExplainAZeroTensor) {
  const Rows zero = {{0, 0, 0, 0}, {0, 0, 0, 0}};
  std::vector<Candidate> c = {replaying("correct", "", kExpected, true),
                              replaying("tiny", "rope", scaled(kExpected, 1e-20f))};
  EXPECT_TRUE(judge(c, kPositions, zero, kExpected, 1e-8).reproducing.empty());
  // Only a variant that writes zeros by design may explain zeros.
  Candidate never_written = replaying("never written", "kv-cache", zero);
  never_written.explains_zeros = true;
  c.push_back(never_written);
  const Judgement j = judge(c, kPositions, zero, kExpected, 1e-8);
  EXPECT_EQ(variants(j.reproducing), std::vector<std::string>{"never written"});
}

TEST(Judge, ANearZeroActualNeedsItsOwnValuesExplained) {
  const Rows tiny = scaled(kExpected, 1e-30f);
  Candidate zeros = replaying("zeros", "buffer", {{0, 0, 0, 0}, {0, 0, 0, 0}});
  zeros.explains_zeros = true;
  const std::vector<Candidate> c = {replaying("correct", "", kExpected, true), zeros,
                                    replaying("scale read as bf16", "dequantization", tiny)};
  const Judgement j = judge(c, kPositions, tiny, kExpected, 1e-8);
  EXPECT_EQ(variants(j.reproducing), std::vector<std::string>{"scale read as bf16"});
  ASSERT_TRUE(j.baseline_residual.has_value());
  EXPECT_GT(*j.baseline_residual, 0.9);  // relative to the expected tensor's size, not the tiny actual's
}

TEST(Judge, VariantsPredictingTheSameValuesTie) {
  const Rows actual = scaled(kExpected, 2);
  const std::vector<Candidate> c = {replaying("correct", "", kExpected, true),
                                    replaying("scale doubled", "attention-scale", actual),
                                    replaying("residual added twice", "residual", actual),
                                    replaying("close but worse", "rope", scaled(kExpected, 2.3f))};
  const Judgement j = judge(c, kPositions, actual, kExpected, 1e-8);
  EXPECT_EQ(variants(j.reproducing), (std::vector<std::string>{"scale doubled", "residual added twice"}));
  EXPECT_EQ(variants(j.runners_up), std::vector<std::string>{"close but worse"});
}

TEST(Judge, AClearlyBetterVariantIsNoTie) {
  Rows actual = scaled(kExpected, 2), near = actual, far = actual;
  near[0][0] += 1e-6f;  // residual ~1e-14: reproduces
  far[0][0] += 8e-3f;   // residual ~5e-7: under the tolerance (1e-6) too, but far above the noise
  const std::vector<Candidate> c = {replaying("correct", "", kExpected, true), replaying("far", "rope", far),
                                    replaying("near", "attention-scale", near)};
  const Judgement j = judge(c, kPositions, actual, kExpected, 1e-6);
  EXPECT_EQ(variants(j.reproducing), std::vector<std::string>{"near"});
  EXPECT_EQ(variants(j.runners_up), std::vector<std::string>{"far"});
}

TEST(Judge, WithinTheNoiseEveryReproducingVariantTies) {
  Rows actual = scaled(kExpected, 2), a = actual, b = actual;
  a[0][0] += 1e-6f;
  b[0][0] += 1e-4f;  // 10^4 times a's error, but both far below the noise (1e-5 relative)
  const std::vector<Candidate> c = {replaying("correct", "", kExpected, true), replaying("a", "rope", a),
                                    replaying("b", "kv-cache", b)};
  EXPECT_EQ(variants(judge(c, kPositions, actual, kExpected, 1e-4).reproducing), (std::vector<std::string>{"a", "b"}));
}

TEST(Judge, AnExactCopyIsNotTiedByACopyThatComesClose) {
  Rows actual = scaled(kExpected, 2), close = actual;
  close[1][3] += 1e-4f;
  Candidate exact = replaying("copy of X", "buffer", actual), near = replaying("copy of Y", "buffer", close);
  exact.takes = "blk.0.x";
  near.takes = "blk.0.y";
  const std::vector<Candidate> c = {replaying("correct", "", kExpected, true), near, exact};
  EXPECT_EQ(variants(judge(c, kPositions, actual, kExpected, 1e-4).reproducing),
            std::vector<std::string>{"copy of X"});
}

// A tap that resembles another buffer (the residual stream dominated by the norm's output, the
// FFN's share a thousandth of it) is no copy of it: only a bit-exact generic copy reproduces.
TEST(Judge, AGenericCopyMustBeExact) {
  Rows actual = scaled(kExpected, 2), resembling = actual;
  resembling[0][1] += 2e-3f;
  Candidate copy = replaying("the values of ffn_norm", "buffer", resembling);
  copy.takes = "blk.0.ffn_norm";
  copy.generic = true;
  const std::vector<Candidate> c = {replaying("correct", "", kExpected, true), copy};
  EXPECT_TRUE(judge(c, kPositions, actual, kExpected, 1e-4).reproducing.empty());
  copy.replay = [actual](std::int64_t p) { return actual[std::size_t(p)]; };
  const std::vector<Candidate> exact = {replaying("correct", "", kExpected, true), copy};
  EXPECT_EQ(variants(judge(exact, kPositions, actual, kExpected, 1e-4).reproducing),
            std::vector<std::string>{"the values of ffn_norm"});
}

// attn.probs.summary of an all-zero attn.probs row (every head: 1 missing, max 0) is judged as
// the zero row it stands for: a variant that also attends to nothing fits it only by design.
TEST(Judge, TheSummaryOfAZeroRowIsAZeroRow) {
  const Rows nothing = {{1, 0, 0, 0, 1, 0, 0, 0}, {1, 0, 0, 0, 1, 0, 0, 0}};
  const Rows expected = {{0, 0.5f, 1, 0, 0, 0.9f, 0.7f, 0}, {0, 0.4f, 0.8f, 0, 0, 0.6f, 0.9f, 0}};
  std::vector<Candidate> c = {replaying("correct", "", expected, true), replaying("empty window", "kv-cache", nothing)};
  EXPECT_EQ(variants(judge(c, kPositions, nothing, expected, 1e-8).reproducing), std::vector<std::string>{"empty window"});
  EXPECT_TRUE(judge(c, kPositions, nothing, expected, 1e-8, "attn.probs.summary").reproducing.empty());
  c[1].explains_zeros = true;
  EXPECT_EQ(variants(judge(c, kPositions, nothing, expected, 1e-8, "attn.probs.summary").reproducing),
            std::vector<std::string>{"empty window"});
}

// The bar is the tap's tolerance in the run's precision: in f32 a variant 1e-5 off is not a
// reproduction; in a precision whose tolerance is 1e-3, it is.
TEST(Judge, TheBarIsThePrecisionsTolerance) {
  Rows actual = scaled(kExpected, 2), close = actual;
  close[0][1] += 0.04f;  // residual ~1e-5
  const std::vector<Candidate> c = {replaying("correct", "", kExpected, true), replaying("close", "rope", close)};
  EXPECT_TRUE(judge(c, kPositions, actual, kExpected, 1e-8).reproducing.empty());
  EXPECT_EQ(variants(judge(c, kPositions, actual, kExpected, 1e-3).reproducing), std::vector<std::string>{"close"});
}

TEST(Judge, AVariantPredictingTheCorrectValuesIsNoEvidence) {
  const Rows actual = scaled(kExpected, 2);
  const std::vector<Candidate> c = {replaying("correct", "", kExpected, true),
                                    replaying("same as correct here", "rope", kExpected)};
  const Judgement j = judge(c, kPositions, actual, kExpected, 1e-8);
  EXPECT_TRUE(j.reproducing.empty());
  EXPECT_TRUE(j.runners_up.empty());
}

TEST(Judge, NoBaselineMeansNoBaselineResidual) {
  const Rows actual = scaled(kExpected, 2);
  const std::vector<Candidate> c = {replaying("doubled", "residual", actual)};
  const Judgement j = judge(c, kPositions, actual, kExpected, 1e-8);
  EXPECT_FALSE(j.baseline_residual.has_value());
  EXPECT_EQ(variants(j.reproducing), std::vector<std::string>{"doubled"});
}

TEST(Judge, TheSameNonFiniteValuesOnBothSidesMatch) {
  Rows actual = kExpected, predicted = kExpected;
  actual[0][1] = predicted[0][1] = std::numeric_limits<float>::infinity();
  actual[1][2] = predicted[1][2] = std::numeric_limits<float>::quiet_NaN();
  actual[1][0] = predicted[1][0] = 7;
  Rows correct = kExpected;
  const std::vector<Candidate> c = {replaying("correct", "", correct, true), replaying("overflow", "non-finite", predicted)};
  EXPECT_EQ(variants(judge(c, kPositions, actual, kExpected, 1e-8).reproducing),
            std::vector<std::string>{"overflow"});
}

}  // namespace
}  // namespace tapdiff::diff
