#include "diff/replay_rows.hpp"

namespace tapdiff::diff {

Row trace_row(const TraceReader& r, const std::string& name, int layer, std::int64_t p) {
  const TapInfo* t = r.find(name, layer);
  // A shard is part of a row: replaying an op needs the whole one.
  if (!t || t->sharded() || p < 0) return {};
  const TapRows rows = r.read(*t, p, p);
  if (rows.size() != 1) return {};
  return Row(rows.row(0), rows.row(0) + rows.row_size);
}

Rows trace_rows_upto(const TraceReader& r, const std::string& name, int layer, std::int64_t p) {
  Rows out(static_cast<std::size_t>(p + 1));
  const TapInfo* t = r.find(name, layer);
  if (!t || t->sharded()) return out;
  const TapRows rows = r.read(*t, 0, p);
  for (std::size_t i = 0; i < rows.size(); ++i)
    out[std::size_t(rows.positions[i])] = Row(rows.row(i), rows.row(i) + rows.row_size);
  return out;
}

}  // namespace tapdiff::diff
