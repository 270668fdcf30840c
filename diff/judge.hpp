// Judging replayed hypotheses against the actual values. A variant reproduces the actual
// tensor only when its error is small relative to the actual's own size (never in absolute
// terms: a variant predicting near-zero values would "fit" a zero tensor), much smaller than
// the correct computation's, and clearly better than any other variant; variants as good as
// the best are ties, reported as such. Residuals are reported relative to the largest of the
// actual, the expected and the correct replay.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>
#include <vector>

#include "diff/hypotheses.hpp"
#include "diff/replay_rows.hpp"
#include "diff/result.hpp"

namespace tapdiff::diff {

struct Judged {
  const Candidate* candidate = nullptr;
  double residual = 0;  // Σ(actual - replay)² / scale
};

struct Judgement {
  std::optional<double> baseline_residual;  // absent when no baseline replays
  std::vector<Judged> reproducing;          // the best variant first, then its ties
  std::vector<Judged> runners_up;           // the next distinct variants, best first
};

// actual/expected: the rows at `positions` (expected may be empty rows where it lacks them).
// tolerance: the tap's threshold (nmse) in the run's precision. A variant reproduces B within it
// (at most 1e-3); replays closer than a tenth of it cannot be told apart. tap: the short name,
// where rows encode others (attn.probs.summary stands for an attn.probs row).
Judgement judge(const std::vector<Candidate>& candidates, const std::vector<std::int64_t>& positions,
                const Rows& actual, const Rows& expected, double tolerance, std::string_view tap = {});

}  // namespace tapdiff::diff
