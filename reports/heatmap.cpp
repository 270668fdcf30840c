#include "reports/heatmap.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <map>
#include <set>

#include "reports/numbers.hpp"
#include "reports/summary.hpp"

namespace tapdiff::reports {
namespace {

// Row index of each tap: 0 for global taps before the first per-layer tap, 1 + layer for
// per-layer taps, the last row for global taps after them.
struct Rows {
  std::vector<std::string> labels;
  std::vector<std::size_t> of_tap;  // parallel to result.taps
};

Rows layout_rows(const diff::DiffResult& r) {
  int max_layer = -1;
  for (const auto& t : r.taps) max_layer = std::max(max_layer, t.layer);
  if (const auto dims = model_dims(r); dims && dims->n_layer > 0)
    max_layer = std::max(max_layer, static_cast<int>(dims->n_layer) - 1);
  Rows rows;
  rows.labels.push_back(max_layer < 0 ? "global" : "embed");
  for (int l = 0; l <= max_layer; ++l) rows.labels.push_back(std::to_string(l));
  if (max_layer >= 0) rows.labels.push_back("head");
  bool seen_layer = false;
  for (const auto& t : r.taps) {
    if (t.layer >= 0) {
      seen_layer = true;
      rows.of_tap.push_back(static_cast<std::size_t>(t.layer) + 1);
    } else {
      rows.of_tap.push_back(seen_layer ? rows.labels.size() - 1 : 0);
    }
  }
  return rows;
}

// Tap names of one row group in an order every layer agrees with: a topological order of
// "a comes right before b in some layer", ties (and any disagreement) broken by first appearance.
std::vector<std::string> order_names(const std::vector<std::vector<std::string>>& sequences) {
  std::vector<std::string> names;  // by first appearance
  std::map<std::string, std::set<std::string>> after;
  std::map<std::string, int> before_count;
  for (const auto& seq : sequences) {
    for (std::size_t i = 0; i < seq.size(); ++i) {
      if (!before_count.count(seq[i])) {
        before_count[seq[i]] = 0;
        names.push_back(seq[i]);
      }
      if (i > 0 && seq[i] != seq[i - 1] && after[seq[i - 1]].insert(seq[i]).second)
        ++before_count[seq[i]];
    }
  }
  std::vector<std::string> order;
  std::set<std::string> placed;
  while (order.size() < names.size()) {
    auto next = std::find_if(names.begin(), names.end(), [&](const std::string& n) {
      return !placed.count(n) && before_count[n] == 0;
    });
    if (next == names.end())  // the layers disagree: take the earliest remaining name
      next = std::find_if(names.begin(), names.end(),
                          [&](const std::string& n) { return !placed.count(n); });
    placed.insert(*next);
    order.push_back(*next);
    for (const auto& n : after[*next]) --before_count[n];
  }
  return order;
}

// Columns: the leading global taps, the per-layer taps, the trailing global taps.
std::vector<std::string> layout_columns(const diff::DiffResult& r, const Rows& rows) {
  std::map<std::size_t, std::vector<std::string>> by_row;
  for (std::size_t i = 0; i < r.taps.size(); ++i) by_row[rows.of_tap[i]].push_back(r.taps[i].name);
  const std::size_t last = rows.labels.size() - 1;
  std::vector<std::vector<std::string>> pre, layered, post;
  for (auto& [row, names] : by_row) {
    if (row == 0)
      pre.push_back(std::move(names));
    else if (row == last)
      post.push_back(std::move(names));
    else
      layered.push_back(std::move(names));
  }
  std::vector<std::string> columns;
  for (const auto* group : {&pre, &layered, &post})
    for (auto& name : order_names(*group))
      if (std::find(columns.begin(), columns.end(), name) == columns.end()) columns.push_back(name);
  return columns;
}

void add_row(HeatCell& cell, const diff::RowMetrics& row) {
  const bool nonfinite = row_nonfinite(row);
  if (!cell.present || row.nmse > cell.nmse) cell.nmse = row.nmse;
  cell.present = true;
  cell.nonfinite = cell.nonfinite || nonfinite;
  cell.diverged = cell.diverged || row.diverged;
}

std::string nmse_line(const HeatCell& c) {
  return c.nonfinite ? "non-finite values" : "worst NMSE " + sci(c.nmse);
}

std::string row_name(const std::string& label) {
  return std::isdigit(static_cast<unsigned char>(label.front())) ? "layer " + label : label;
}

HeatGrid base_grid(const Rows& rows, std::size_t n_columns) {
  HeatGrid grid;
  grid.rows = rows.labels;
  grid.cells.assign(rows.labels.size(), std::vector<HeatCell>(n_columns));
  grid.y_label = "layer";
  return grid;
}

}  // namespace

HeatGrid layer_tap_grid(const diff::DiffResult& r) {
  const Rows rows = layout_rows(r);
  HeatGrid grid = base_grid(rows, 0);
  grid.id = "layer-tap";
  grid.title = "layer \u00d7 tap: worst log10 NMSE over positions";
  grid.x_label = "tap (execution order)";
  grid.rotate_columns = true;
  grid.columns = layout_columns(r, rows);
  for (auto& row : grid.cells) row.resize(grid.columns.size());
  for (std::size_t i = 0; i < r.taps.size(); ++i) {
    const auto& tap = r.taps[i];
    const auto col = static_cast<std::size_t>(
        std::find(grid.columns.begin(), grid.columns.end(), tap.name) - grid.columns.begin());
    HeatCell& cell = grid.cells[rows.of_tap[i]][col];
    for (const auto& row : tap.rows) add_row(cell, row);
    cell.first = r.first && r.first->tap == tap.full_name;
    const TapStats s = tap_stats(tap);
    cell.tooltip = tap.full_name + "\n" + nmse_line(cell);
    if (s.worst) cell.tooltip += fmt::format(" at position {}", s.worst->position);
    cell.tooltip += "\nthreshold " + sci(tap.threshold_nmse);
    if (s.first_diverged)
      cell.tooltip += fmt::format("\ndiverged from position {} ({} of {} positions)",
                                  s.first_diverged->position, s.diverged_rows, tap.rows.size());
    if (cell.first) cell.tooltip += "\nfirst divergence";
  }
  return grid;
}

HeatGrid position_layer_grid(const diff::DiffResult& r) {
  const Rows rows = layout_rows(r);
  std::set<std::int64_t> positions;
  for (const auto& t : r.taps)
    for (const auto& row : t.rows) positions.insert(row.position);
  const std::vector<std::int64_t> cols(positions.begin(), positions.end());
  HeatGrid grid = base_grid(rows, cols.size());
  grid.id = "position-layer";
  grid.title = "position \u00d7 layer: worst log10 NMSE over the layer's taps";
  grid.x_label = "position";
  for (auto p : cols) grid.columns.push_back(std::to_string(p));
  const std::int64_t prompt = r.expected.metadata.prompt_length;
  const auto boundary = std::lower_bound(cols.begin(), cols.end(), prompt);
  if (prompt > 0 && boundary != cols.begin() && boundary != cols.end())
    grid.boundary = static_cast<std::size_t>(boundary - cols.begin());

  std::vector<std::vector<const diff::TapComparison*>> worst_tap(
      grid.rows.size(), std::vector<const diff::TapComparison*>(cols.size()));
  std::vector<std::vector<int>> diverged_taps(grid.rows.size(), std::vector<int>(cols.size()));
  for (std::size_t i = 0; i < r.taps.size(); ++i) {
    const std::size_t ri = rows.of_tap[i];
    for (const auto& row : r.taps[i].rows) {
      const auto ci = static_cast<std::size_t>(
          std::lower_bound(cols.begin(), cols.end(), row.position) - cols.begin());
      HeatCell& cell = grid.cells[ri][ci];
      const bool worse =
          !cell.present || row.nmse > cell.nmse || (row_nonfinite(row) && !cell.nonfinite);
      add_row(cell, row);
      if (worse) worst_tap[ri][ci] = &r.taps[i];
      if (row.diverged) ++diverged_taps[ri][ci];
      if (r.first && r.first->tap == r.taps[i].full_name && r.first->position == row.position)
        cell.first = true;
    }
  }
  for (std::size_t ri = 0; ri < grid.rows.size(); ++ri) {
    for (std::size_t ci = 0; ci < cols.size(); ++ci) {
      HeatCell& cell = grid.cells[ri][ci];
      if (!cell.present) continue;
      cell.tooltip = fmt::format("{}, position {}\n{} ({})", row_name(grid.rows[ri]), cols[ci],
                                 nmse_line(cell), worst_tap[ri][ci]->full_name);
      if (diverged_taps[ri][ci] > 0)
        cell.tooltip += fmt::format("\n{} taps diverged", diverged_taps[ri][ci]);
      if (cell.first) cell.tooltip += "\nfirst divergence";
    }
  }
  return grid;
}

}  // namespace tapdiff::reports
