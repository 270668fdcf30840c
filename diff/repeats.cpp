#include "diff/repeats.hpp"

#include <cstring>
#include <fmt/format.h>

#include "diff/metrics.hpp"
#include "tapdiff/trace_reader.hpp"

namespace tapdiff::diff {

std::optional<FirstDivergence> first_repeat_difference(const std::string& first_trace,
                                                       const std::string& repeat_trace) {
  const TraceReader a(first_trace), b(repeat_trace);
  // The earliest in time: the prompt runs as one step, each later position as its own; within
  // a step, execution order.
  const std::int64_t prompt = a.metadata().prompt_length;
  auto step = [prompt](std::int64_t p) { return p < prompt ? 0 : p - prompt + 1; };
  std::optional<FirstDivergence> first;
  std::int64_t first_step = 0;
  for (const TapInfo& ta : a.taps()) {
    const TapInfo* tb = b.find(ta.name, ta.layer);
    if (!tb || tb->row_shape != ta.row_shape || tb->layout_note != ta.layout_note) continue;
    const TapRows ra = a.read(ta), rb = b.read(*tb);
    FirstDivergence f;
    for (std::size_t i = 0, j = 0; i < ra.size() && j < rb.size();) {
      if (ra.positions[i] != rb.positions[j]) {
        ra.positions[i] < rb.positions[j] ? ++i : ++j;
        continue;
      }
      const auto bytes = std::size_t(ra.row_size) * sizeof(float);
      if (std::memcmp(ra.row(i), rb.row(j), bytes) != 0) {
        if (f.diverged_positions.empty()) {
          f.metrics = row_metrics(ra.row(i), rb.row(j), ra.row_size);
          f.metrics.position = ra.positions[i];
          f.metrics.diverged = true;
        }
        f.diverged_positions.push_back(ra.positions[i]);
      }
      ++i, ++j;
    }
    if (f.diverged_positions.empty() || (first && step(f.diverged_positions.front()) >= first_step)) continue;
    f.tap = ta.full_name;
    f.name = ta.name;
    f.layer = ta.layer;
    f.position = f.diverged_positions.front();
    f.pattern = f.diverged_positions.size() == ra.size() ? PositionPattern::all : PositionPattern::some;
    first_step = step(f.position);
    first = std::move(f);
  }
  if (first) return first;
  const auto& ka = a.metadata().tokens;
  const auto& kb = b.metadata().tokens;
  if (ka != kb) {
    FirstDivergence f;
    f.tap = f.name = "tokens";
    std::size_t p = 0;
    while (p < ka.size() && p < kb.size() && ka[p] == kb[p]) ++p;
    f.position = std::int64_t(p);
    f.diverged_positions = {f.position};
    f.pattern = PositionPattern::from;
    return f;
  }
  return std::nullopt;
}

void put_nondeterminism_first(const FirstDivergence& at, int repeat, DiffResult& r) {
  const std::string what =
      at.tap == "tokens"
          ? fmt::format("run 1 and run {} of the same engine on the same input continue with other tokens from "
                        "position {}",
                        repeat, at.position)
          : fmt::format("run 1 and run {} of the same engine on the same input differ at {} position {} (max abs {:.3g}, "
                        "{} position{})",
                        repeat, at.tap, at.position, at.metrics.max_abs, at.diverged_positions.size(),
                        at.diverged_positions.size() == 1 ? "" : "s");
  r.findings.insert(r.findings.begin(), StructuralFinding{"nondeterministic", at.tap, what});
  Diagnosis d;
  d.bug_class = "nondeterministic";
  d.evidence = Evidence::indicated;
  d.signatures.push_back(what);
  d.explanation = fmt::format(
      "{}. Until repeated runs agree, a comparison with the reference cannot separate the bug from the race: "
      "the op diagnosis that follows is for run 1 only. Look at the op producing {}: its reads of memory no one "
      "wrote, its writes racing each other, an output buffer that is also an input.",
      what, at.tap);
  RootFinding root;
  root.kind = "nondeterministic";
  root.at = at;
  root.diagnosis = d;
  // A divergence from the reference at that same tap is the race's effect, not another bug.
  std::vector<RootFinding> others;
  for (RootFinding& other : r.roots) {
    if (other.at.tap == at.tap) {
      root.explained.insert(root.explained.end(), other.explained.begin(), other.explained.end());
    } else {
      others.push_back(std::move(other));
    }
  }
  others.insert(others.begin(), std::move(root));
  r.roots = std::move(others);
  r.first = at;
  r.diagnosis = std::move(d);
  r.verdict = Verdict::diverged;
}

}  // namespace tapdiff::diff
