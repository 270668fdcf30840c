#include "diff/coverage.hpp"

#include <algorithm>
#include <fmt/format.h>
#include <limits>
#include <map>
#include <string>

#include "diff/metrics.hpp"
#include "diff/replay_rows.hpp"
#include "tapdiff/tap_filter.hpp"
#include "tapdiff/weight_taps.hpp"

namespace tapdiff::diff {
namespace {

// The positions a trace's own --positions filter admits: all when it has none (or an
// unreadable one, from another producer).
RangeSet admitted(const TraceReader& t) {
  try {
    return RangeSet::parse(t.filter().positions, "positions");
  } catch (const std::exception&) {
    return RangeSet();
  }
}

// The last position any tap of t holds: the last its run fed (a shorter run, or one that never
// feeds its last generated token, holds none after it).
std::int64_t last_fed(const TraceReader& t) {
  std::int64_t last = -1;
  for (const TapInfo& info : t.taps())
    if (!is_weight_tap(info.name) && info.n_rows > 0) last = std::max(last, info.last_position());
  return last;
}

// Positions up to `until` that `has` holds, `lacks` does not, and lacks' filter admits.
std::vector<std::int64_t> missing(const TapInfo& has, const TapInfo& lacks, const RangeSet& lacks_admits,
                                  std::int64_t until) {
  const std::vector<std::int64_t> held = lacks.positions();
  std::vector<std::int64_t> out;
  for (std::int64_t p : has.positions()) {
    if (p > until) break;
    if (lacks_admits.contains(p) && !std::binary_search(held.begin(), held.end(), p)) out.push_back(p);
  }
  return out;
}

// Whether b's row at (layer + dl, p + dp) is a's at (layer, p), p each tap's last position, for
// the first kSampled taps: the evidence that a numbering is off, not that windows differ.
// Attention's probabilities are left out: at a lone position they are 1 in every layer.
bool rows_match_shifted(const TraceReader& a, const TraceReader& b, std::vector<const TapInfo*> taps, int dl,
                        std::int64_t dp) {
  taps.erase(std::remove_if(taps.begin(), taps.end(),
                            [](const TapInfo* t) { return t->name.rfind("attn.probs", 0) == 0; }),
             taps.end());
  constexpr std::size_t kSampled = 8;
  for (std::size_t i = 0; i < std::min(taps.size(), kSampled); ++i) {
    const TapInfo& ta = *taps[i];
    const std::int64_t p = ta.last_position();
    const Row ra = trace_row(a, ta.name, ta.layer, p), rb = trace_row(b, ta.name, ta.layer + dl, p + dp);
    if (ra.empty() || ra.size() != rb.size() ||
        !(row_metrics(ra.data(), rb.data(), std::int64_t(ra.size())).nmse < 1e-4))
      return false;
  }
  return !taps.empty();
}

// The shift k when every tap of b holds exactly a's positions plus k (k != 0).
std::optional<std::int64_t> common_shift(const std::vector<TapPair>& pairs) {
  std::optional<std::int64_t> shift;
  for (const auto& [ta, tb] : pairs) {
    const std::vector<std::int64_t> pa = ta->positions(), pb = tb->positions();
    if (pa.empty() || pa.size() != pb.size()) return std::nullopt;
    const std::int64_t k = pb.front() - pa.front();
    if (k == 0 || (shift && *shift != k)) return std::nullopt;
    for (std::size_t i = 0; i < pa.size(); ++i)
      if (pb[i] - pa[i] != k) return std::nullopt;
    shift = k;
  }
  return shift;
}

}  // namespace

void note_missing_positions(const std::vector<TapPair>& pairs, std::int64_t compared, const TraceReader& a,
                            const TraceReader& b, DiffResult& r) {
  const RangeSet a_admits = admitted(a), b_admits = admitted(b);
  const std::int64_t a_until = std::min(compared - 1, last_fed(a)), b_until = std::min(compared - 1, last_fed(b));
  // (the trace that lacks them, the positions) -> the taps, in execution order
  std::map<std::pair<std::string, std::string>, std::vector<std::string>> groups;
  std::vector<std::pair<std::string, std::string>> order;
  for (const auto& [ta, tb] : pairs) {
    if (ta->name == "output") continue;  // its positions follow --logits and the prefill's chunks
    for (const auto& [lacking, gap] : {std::pair{"actual", missing(*ta, *tb, b_admits, b_until)},
                                       std::pair{"expected", missing(*tb, *ta, a_admits, a_until)}}) {
      if (gap.empty()) continue;
      const std::pair<std::string, std::string> key{lacking, runs_text(gap)};
      if (groups[key].empty()) order.push_back(key);
      groups[key].push_back(ta->full_name);
    }
  }
  for (const auto& key : order) {
    const std::vector<std::string>& taps = groups[key];
    const auto shown = taps.begin() + std::ptrdiff_t(std::min<std::size_t>(taps.size(), 4));
    std::string named = fmt::format("{}", fmt::join(taps.begin(), shown, ", "));
    if (taps.size() > 4) named += fmt::format(" and {} more", taps.size() - 4);
    r.findings.push_back({"missing-positions", taps.size() == 1 ? taps.front() : "",
                          fmt::format("position{} {} not in the {} trace at {} tap{} ({}), which the other trace "
                                      "holds: not compared there",
                                      key.second.find_first_of(",.") == std::string::npos ? "" : "s", key.second,
                                      key.first, taps.size(), taps.size() == 1 ? "" : "s", named)});
  }
}

std::optional<StructuralFinding> position_shift(const std::vector<TapPair>& pairs, const TraceReader& a,
                                                const TraceReader& b) {
  // Windows of --positions that differ are no numbering: their rows do not meet. A numbering
  // off by k holds, at position p + k, the row the other trace holds at p.
  if (!a.filter().positions.empty() || !b.filter().positions.empty()) return std::nullopt;
  const auto k = common_shift(pairs);
  if (!k) return std::nullopt;
  std::vector<const TapInfo*> taps;
  for (const auto& pair : pairs) taps.push_back(pair.first);
  if (!rows_match_shifted(a, b, taps, 0, *k)) return std::nullopt;
  return StructuralFinding{"position-shift", "",
                           fmt::format("every tap of the actual trace holds the expected trace's positions {:+}: its "
                                       "producer numbers positions from {}, not 0. Rows are compared by position, so "
                                       "nothing is compared: renumber the positions (position 0 is the first prompt "
                                       "token)",
                                       *k, *k)};
}

std::optional<StructuralFinding> layer_shift(const TraceReader& a, const TraceReader& b) {
  const auto layers = [](const TraceReader& t, std::vector<const TapInfo*>* taps) {
    std::pair<int, int> range{std::numeric_limits<int>::max(), -1};
    for (const TapInfo& info : t.taps())
      if (info.layer >= 0 && !is_weight_tap(info.name)) {
        range = {std::min(range.first, info.layer), std::max(range.second, info.layer)};
        if (taps) taps->push_back(&info);
      }
    return range;
  };
  std::vector<const TapInfo*> taps;
  const auto [a_first, a_last] = layers(a, &taps);
  const auto [b_first, b_last] = layers(b, nullptr);
  const int k = b_first - a_first;
  if (a_last < 0 || b_last < 0 || k == 0 || b_last - a_last != k || !rows_match_shifted(a, b, taps, k, 0))
    return std::nullopt;
  return StructuralFinding{"layer-shift", "",
                           fmt::format("every layer tap of the actual trace holds, at layer L{:+}, what the expected "
                                       "trace holds at layer L: its producer numbers layers from {}, not 0 (blk.0 is "
                                       "the first layer). Nothing is compared: renumber the layers",
                                       k, a_first + k)};
}

std::optional<StructuralFinding> incomplete_trace(const TraceReader& a, const TraceReader& b) {
  std::string detail;
  for (const auto& [t, label] : {std::pair{&a, "expected"}, std::pair{&b, "actual"}})
    if (!t->complete())
      detail += fmt::format("{}the {} trace ({}) is incomplete: its run stopped after {} committed step{} and never "
                            "closed it (killed, crashed, or still running)",
                            detail.empty() ? "" : "; ", label, t->path(), t->committed_steps(),
                            t->committed_steps() == 1 ? "" : "s");
  if (detail.empty()) return std::nullopt;
  return StructuralFinding{"incomplete", "",
                           detail + ". What both traces hold agrees, but a run that did not finish is not a pass"};
}

}  // namespace tapdiff::diff
