#include "diff/routing_ties.hpp"

#include <algorithm>
#include <cmath>
#include <fmt/format.h>
#include <map>
#include <numeric>

#include "diff/replay_rows.hpp"

namespace tapdiff::diff {
namespace {

constexpr const char* kExpertsTaps[] = {"ffn.routing", "ffn_gate_exps", "ffn_up_exps", "ffn.act_exps", "ffn_down"};

// The n experts a router's logits pick (softmax keeps their order), ascending; the lower index
// of equal logits, as the engine and the reference choose.
std::vector<int> chosen(const Row& logits, int n) {
  std::vector<int> order(logits.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int i, int j) { return logits[std::size_t(i)] > logits[std::size_t(j)]; });
  order.resize(std::size_t(std::min<std::size_t>(std::size_t(n), order.size())));
  std::sort(order.begin(), order.end());
  return order;
}

std::string experts_text(const std::vector<int>& experts) { return fmt::format("{{{}}}", fmt::join(experts, ", ")); }

struct Tie {
  std::int64_t position;
  std::vector<int> expected, actual;
  double margin, noise;
};

// The tie at position p of a layer, if the experts differ there only within the noise and the
// actual run used the experts its own router chose (where it records its routing weights).
std::optional<Tie> tie_at(const Row& want, const Row& got, const Row& got_routing, int n_used, std::int64_t p,
                          double threshold) {
  if (want.empty() || want.size() != got.size()) return std::nullopt;
  Tie t{p, chosen(want, n_used), chosen(got, n_used), 0, 0};
  if (t.expected == t.actual) return std::nullopt;
  if (got_routing.size() == got.size() && chosen(got_routing, n_used) != t.actual) return std::nullopt;
  // The noise, as for a greedy token's near tie: what the profile lets two logits of this row
  // differ by, and no more than the row's own error.
  double sum_squares = 0, max_abs = 0;
  for (std::size_t i = 0; i < want.size(); ++i) {
    sum_squares += double(want[i]) * want[i];
    max_abs = std::max(max_abs, std::abs(double(got[i]) - want[i]));
  }
  t.noise = std::min(2 * std::sqrt(threshold * sum_squares / double(want.size())), 2 * max_abs);
  // Every expert one run keeps and the other drops against every one the other keeps instead.
  for (int dropped : t.expected)
    if (!std::binary_search(t.actual.begin(), t.actual.end(), dropped))
      for (int taken : t.actual)
        if (!std::binary_search(t.expected.begin(), t.expected.end(), taken))
          t.margin = std::max(t.margin, double(want[std::size_t(dropped)]) - want[std::size_t(taken)]);
  if (!(t.margin <= t.noise)) return std::nullopt;
  return t;
}

}  // namespace

void clear_routing_ties(DiffResult& r, const TraceReader& a, const TraceReader& b, const ToleranceProfile& profile) {
  const auto& dims = a.metadata().dims ? a.metadata().dims : b.metadata().dims;
  if (!dims || dims->n_expert_used <= 0) return;
  std::map<std::pair<std::string, int>, TapComparison*> by_name;
  for (auto& t : r.taps) by_name[{t.name, t.layer}] = &t;
  for (auto& router : r.taps) {
    if (router.name != "ffn_gate_inp") continue;
    std::vector<Tie> ties;
    for (const RowMetrics& row : router.rows) {
      if (row.diverged) continue;  // a router off its inputs is the bug, not a tie
      const Row routing = b.find("ffn.routing", router.layer) ? trace_row(b, "ffn.routing", router.layer, row.position)
                                                              : Row{};
      const auto tie = tie_at(trace_row(a, router.name, router.layer, row.position),
                              trace_row(b, router.name, router.layer, row.position), routing,
                              int(dims->n_expert_used), row.position, router.threshold_nmse);
      if (tie) ties.push_back(*tie);
    }
    if (ties.empty()) continue;
    for (const char* name : kExpertsTaps) {
      const auto it = by_name.find({name, router.layer});
      if (it == by_name.end()) continue;
      for (RowMetrics& row : it->second->rows)
        for (const Tie& t : ties)
          if (row.position == t.position) row.diverged = row.suspect = false;
    }
    const Tie& first = ties.front();
    std::vector<std::int64_t> positions;
    for (const Tie& t : ties) positions.push_back(t.position);
    r.findings.push_back(
        {"routing-tie", fmt::format("blk.{}.ffn_gate_inp", router.layer),
         fmt::format("experts chosen at a near tie of the router at {} position{} ({}): at position {} the expected "
                     "run chose experts {}, the actual {}; the expected logits of the experts exchanged differ by "
                     "{:.3g}, within the {} noise ({:.3g}). Each run followed its own router: the experts' taps at "
                     "those positions are not compared as divergences, and the taps after them carry the difference",
                     ties.size(), ties.size() == 1 ? "" : "s", fmt::join(positions, ", "),
                     first.position, experts_text(first.expected), experts_text(first.actual), first.margin,
                     profile.name, first.noise)});
  }
}

}  // namespace tapdiff::diff
