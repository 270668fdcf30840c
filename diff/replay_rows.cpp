#include "diff/replay_rows.hpp"

#include "tapdiff/tap_filter.hpp"

namespace tapdiff::diff {

RowSource::Computed* RowSource::computed(std::string_view name, int layer) const {
  if (computed_.empty()) return nullptr;
  const auto it = computed_.find(full_tap_name(name, layer));
  return it == computed_.end() ? nullptr : it->second.get();
}

const TapInfo* RowSource::find(std::string_view name, int layer) const {
  if (const Computed* c = computed(name, layer)) return &c->info;
  return trace_->find(name, layer);
}

void RowSource::compute(const TapInfo& info, std::function<Row(std::int64_t)> compute) {
  computed_[info.full_name] = std::make_shared<Computed>(Computed{info, std::move(compute), {}});
}

void RowSource::forget_rows_not_in(const RowSource& base) {
  for (auto& [name, c] : computed_) {
    const auto shared = base.computed_.find(name);
    if (shared == base.computed_.end() || shared->second != c) c->rows.clear();
  }
}

Row RowSource::row(const std::string& name, int layer, std::int64_t p) const {
  if (p < 0) return {};
  if (Computed* c = computed(name, layer)) {
    auto& rows = c->rows;
    if (const auto it = rows.find(p); it != rows.end()) return it->second;
    Row r = c->compute(p);
    return rows.emplace(p, std::move(r)).first->second;
  }
  const TapInfo* t = trace_->find(name, layer);
  // A shard is part of a row: replaying an op needs the whole one.
  if (!t || t->sharded()) return {};
  const TapRows rows = trace_->read(*t, p, p);
  if (rows.size() != 1) return {};
  return Row(rows.row(0), rows.row(0) + rows.row_size);
}

Rows RowSource::rows_upto(const std::string& name, int layer, std::int64_t p) const {
  Rows out(static_cast<std::size_t>(p + 1));
  if (computed(name, layer)) {
    for (std::int64_t q = 0; q <= p; ++q) out[std::size_t(q)] = row(name, layer, q);
    return out;
  }
  const TapInfo* t = trace_->find(name, layer);
  if (!t || t->sharded()) return out;
  const TapRows rows = trace_->read(*t, 0, p);
  for (std::size_t i = 0; i < rows.size(); ++i)
    out[std::size_t(rows.positions[i])] = Row(rows.row(i), rows.row(i) + rows.row_size);
  return out;
}

Row trace_row(const RowSource& r, const std::string& name, int layer, std::int64_t p) { return r.row(name, layer, p); }

Rows trace_rows_upto(const RowSource& r, const std::string& name, int layer, std::int64_t p) {
  return r.rows_upto(name, layer, p);
}

}  // namespace tapdiff::diff
