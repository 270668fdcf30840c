// What the actual values look like against the expected ones, said without naming a cause:
// the position pattern, intact positions, and the degenerate shapes an error takes (all zero,
// constant, sign flipped, scaled, permuted, the same offset at every position).
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "diff/replay_rows.hpp"
#include "diff/result.hpp"
#include "tapdiff/trace_reader.hpp"

namespace tapdiff::diff {

struct Observations {
  std::vector<std::string> lines;  // one sentence each, for Diagnosis::signatures
  bool constant_offset = false;    // B - A is the same vector at every diverged position
  std::optional<double> scale;     // B is A times this factor at the first diverged position
  // attn.probs: each head's row A's times a factor of its own (their least and greatest), not all 1
  std::optional<std::pair<double, double>> head_factors;
};

Observations observe(const DiffResult& r, const FirstDivergence& f, const TraceReader& a, const TraceReader& b);

}  // namespace tapdiff::diff
