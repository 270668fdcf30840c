#include "diff/result.hpp"

#include "tapdiff/trace_reader.hpp"

#include <algorithm>

#include <fmt/format.h>

namespace tapdiff::diff {

std::string position_pattern_text(PositionPattern pattern, std::int64_t first) {
  switch (pattern) {
    case PositionPattern::none: return "no position";
    case PositionPattern::all: return "every position";
    case PositionPattern::from: return fmt::format("every position from {} on", first);
    case PositionPattern::some: return "some positions only";
  }
  return "";
}

std::string runs_text(const std::vector<std::int64_t>& values) {
  std::string out;
  for (std::size_t i = 0; i < values.size();) {
    std::size_t j = i;
    while (j + 1 < values.size() && values[j + 1] == values[j] + 1) ++j;
    out += (out.empty() ? "" : ", ") + (i == j ? std::to_string(values[i]) : fmt::format("{}..{}", values[i], values[j]));
    i = j + 1;
  }
  return out;
}

std::string diff_mode_text(DiffMode mode) {
  switch (mode) {
    case DiffMode::first: return "first";
    case DiffMode::all: return "all";
    case DiffMode::lockstep: return "lockstep";
  }
  return "";
}

std::string evidence_text(Evidence evidence) {
  switch (evidence) {
    case Evidence::reproduced: return "reproduced";
    case Evidence::tied: return "tied";
    case Evidence::indicated: return "indicated";
    case Evidence::unexplained: return "unexplained";
  }
  return "";
}

std::string verdict_text(Verdict verdict) {
  switch (verdict) {
    case Verdict::pass: return "PASS";
    case Verdict::diverged: return "DIVERGED";
    case Verdict::incompatible: return "INCOMPATIBLE";
  }
  return "";
}

const TapComparison* find_tap(const DiffResult& result, std::string_view full_name) {
  for (const auto& t : result.taps)
    if (t.full_name == full_name) return &t;
  return nullptr;
}

int layer_count(const DiffResult& result) {
  int n = 0;
  for (const auto& t : result.taps) n = std::max(n, t.layer + 1);
  return n;
}

int layer_count(const TraceReader& trace) {
  int n = 0;
  for (const TapInfo& t : trace.taps()) n = std::max(n, t.layer + 1);
  return n;
}

bool TapComparison::diverged() const { return first_diverged() != nullptr; }

const RowMetrics* TapComparison::first_diverged() const {
  for (const auto& r : rows)
    if (r.diverged) return &r;
  return nullptr;
}

const RowMetrics* TapComparison::worst() const {
  const RowMetrics* w = nullptr;
  for (const auto& r : rows)
    if (!w || r.nmse > w->nmse || (r.nonfinite > 0 && w->nonfinite == 0)) w = &r;
  return w;
}

LeadingFinding leading_finding(const DiffResult& r) {
  if (!r.roots.empty()) return {&r.roots.front().at, r.roots.front().diagnosis ? &*r.roots.front().diagnosis : nullptr};
  return {r.first ? &*r.first : nullptr, r.diagnosis ? &*r.diagnosis : nullptr};
}

}  // namespace tapdiff::diff
