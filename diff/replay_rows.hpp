// Rows of the trace a hypothesis replays from (the actual run's own inputs, or in lockstep
// the expected run's), read one position or a prefix of positions at a time.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "tapdiff/trace_reader.hpp"

namespace tapdiff::diff {

using Row = std::vector<float>;
using Rows = std::vector<Row>;  // by position 0..p; empty rows where the trace has none

// Where a replay reads an op's input rows: a trace, plus taps the trace does not record, their
// rows computed in memory on first read and then kept (the ops between a sparse trace's taps,
// replayed from the taps it does record).
class RowSource {
public:
  RowSource(const TraceReader& trace) : trace_(&trace) {}  // NOLINT: a trace is a source of its rows

  const TraceReader& trace() const { return *trace_; }
  const TraceMetadata& metadata() const { return trace_->metadata(); }
  const std::vector<TapInfo>& taps() const { return trace_->taps(); }  // the trace's own
  const TapInfo* find(std::string_view name, int layer) const;
  // Whether tap (name, layer)'s rows are computed here rather than read from the trace.
  bool computes(std::string_view name, int layer) const { return computed(name, layer) != nullptr; }

  // Tap `info`'s rows are compute(p) from now on, whether or not the trace records it, each kept
  // once computed. A copy of this source shares the rows of the taps it does not compute anew.
  void compute(const TapInfo& info, std::function<Row(std::int64_t)> compute);
  // Drops the rows this source computed for taps `base` does not share with it: a replay through
  // one variant of many holds its rows while it is judged, not the run's for every variant.
  void forget_rows_not_in(const RowSource& base);

  Row row(const std::string& name, int layer, std::int64_t p) const;
  Rows rows_upto(const std::string& name, int layer, std::int64_t p) const;

private:
  struct Computed {
    TapInfo info;
    std::function<Row(std::int64_t)> compute;
    std::map<std::int64_t, Row> rows;
  };
  Computed* computed(std::string_view name, int layer) const;

  const TraceReader* trace_;
  std::map<std::string, std::shared_ptr<Computed>, std::less<>> computed_;  // by full name
};

// One row of tap (name, layer) at position p, or empty (also where the trace holds a shard).
Row trace_row(const RowSource& r, const std::string& name, int layer, std::int64_t p);

// Rows 0..p of a tap (empty rows for positions it lacks).
Rows trace_rows_upto(const RowSource& r, const std::string& name, int layer, std::int64_t p);

}  // namespace tapdiff::diff
