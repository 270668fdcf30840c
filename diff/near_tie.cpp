#include "diff/near_tie.hpp"

#include <algorithm>
#include <cmath>
#include <fmt/format.h>

#include "diff/replay_rows.hpp"

namespace tapdiff::diff {

std::optional<std::string> near_tie(const TraceReader& a, const TraceReader& b, std::int64_t p,
                                    const ToleranceProfile& profile) {
  if (profile.name == "f32" || p <= 0) return std::nullopt;
  const auto& ta = a.metadata().tokens;
  const auto& tb = b.metadata().tokens;
  if (p >= std::int64_t(std::min(ta.size(), tb.size()))) return std::nullopt;
  const Row la = trace_row(a, "output", -1, p - 1), lb = trace_row(b, "output", -1, p - 1);
  if (la.empty() || la.size() != lb.size()) return std::nullopt;
  const auto argmax = [](const Row& r) { return int(std::max_element(r.begin(), r.end()) - r.begin()); };
  const int want = ta[std::size_t(p)], got = tb[std::size_t(p)];
  if (argmax(la) != want || argmax(lb) != got || got < 0 || std::size_t(got) >= la.size()) return std::nullopt;
  // The noise: what the profile lets a logit row differ by (its rms error at the threshold),
  // for a difference of two logits; and no more than the error this row actually shows.
  double sum_squares = 0, max_abs = 0;
  for (std::size_t i = 0; i < la.size(); ++i) {
    sum_squares += double(la[i]) * la[i];
    max_abs = std::max(max_abs, std::abs(double(lb[i]) - la[i]));
  }
  const double allowed = 2 * std::sqrt(profile.threshold("logits") * sum_squares / double(la.size()));
  const double margin = double(la[std::size_t(want)]) - la[std::size_t(got)];
  if (!(margin <= std::min(allowed, 2 * max_abs))) return std::nullopt;
  return fmt::format("position {}: expected token {}, actual token {}, a near-tie: the expected logits prefer {} by "
                     "{:.3g}, within the {} noise ({:.3g}); each run followed its own logits. Positions from {} on are "
                     "not compared",
                     p, want, got, want, margin, profile.name, std::min(allowed, 2 * max_abs), p);
}

}  // namespace tapdiff::diff
