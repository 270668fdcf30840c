#include "tapdiff/tap_layout.hpp"

#include <algorithm>
#include <stdexcept>
#include <utility>

#include "trim.hpp"

namespace tapdiff {
namespace {

std::vector<std::string_view> split(std::string_view s, char sep) {
  std::vector<std::string_view> parts;
  for (std::size_t at = 0;;) {
    const std::size_t next = s.find(sep, at);
    parts.push_back(trim_spaces(s.substr(at, next == std::string_view::npos ? std::string_view::npos : next - at)));
    if (next == std::string_view::npos) return parts;
    at = next + 1;
  }
}

DimSymbol symbol(std::string_view name, std::string_view clause) {
  if (const auto s = parse_dim_symbol(name)) return *s;
  throw std::invalid_argument(std::string(clause) + ": expected an axis of the catalogue (n_embd, n_head, n_head_kv, "
                              "head_dim, n_ff, n_vocab, n_ctx), got \"" + std::string(name) + "\"");
}

std::int64_t integer(std::string_view text, std::string_view clause) {
  std::int64_t v = 0;
  if (text.empty() || text.size() > 15) throw std::invalid_argument(std::string(clause) + ": expected an integer");
  for (char c : text) {
    if (c < '0' || c > '9')
      throw std::invalid_argument(std::string(clause) + ": expected an integer, got \"" + std::string(text) + "\"");
    v = v * 10 + (c - '0');
  }
  return v;
}

std::string join_axes(const std::vector<DimSymbol>& axes) {
  std::string text;
  for (DimSymbol a : axes) text += (text.empty() ? "" : ", ") + std::string(dim_symbol_name(a));
  return text;
}

}  // namespace

std::string TapLayout::to_string() const {
  std::vector<std::string> clauses;
  if (!axes.empty()) {
    std::string text = "axes=";
    for (std::size_t i = 0; i < axes.size(); ++i) text += (i ? "," : "") + std::string(dim_symbol_name(axes[i]));
    clauses.push_back(text);
  }
  if (shard)
    clauses.push_back("shard=" + std::string(dim_symbol_name(shard->axis)) + ":" + std::to_string(shard->rank) + "/" +
                      std::to_string(shard->count));
  if (!padded.empty()) {
    std::string text = "pad=";
    for (const auto& [axis, size] : padded)
      text += (text.size() > 4 ? "," : "") + std::string(dim_symbol_name(axis)) + ":" + std::to_string(size);
    clauses.push_back(text);
  }
  std::string out;
  for (const auto& c : clauses) out += (out.empty() ? "" : "; ") + c;
  return out;
}

TapLayout TapLayout::parse(std::string_view text) {
  TapLayout layout;
  bool any = false;
  for (std::string_view clause : split(text, ';')) {
    if (clause.empty()) continue;
    const std::size_t eq = clause.find('=');
    const std::string_view key = eq == std::string_view::npos ? clause : trim_spaces(clause.substr(0, eq));
    const std::string_view value = eq == std::string_view::npos ? std::string_view{} : trim_spaces(clause.substr(eq + 1));
    if (eq == std::string_view::npos || value.empty())
      throw std::invalid_argument("\"" + std::string(clause) + "\": expected KEY=VALUE with KEY axes, shard or pad");
    if (key == "axes") {
      for (std::string_view name : split(value, ',')) layout.axes.push_back(symbol(name, "axes"));
    } else if (key == "shard") {
      const std::size_t colon = value.find(':'), slash = value.find('/');
      if (colon == std::string_view::npos || slash == std::string_view::npos || slash < colon)
        throw std::invalid_argument("shard: expected AXIS:RANK/COUNT (e.g. n_head:1/4), got \"" + std::string(value) + "\"");
      TapShard s;
      s.axis = symbol(trim_spaces(value.substr(0, colon)), "shard");
      s.rank = integer(trim_spaces(value.substr(colon + 1, slash - colon - 1)), "shard rank");
      s.count = integer(trim_spaces(value.substr(slash + 1)), "shard count");
      if (s.count < 1 || s.rank >= s.count)
        throw std::invalid_argument("shard: expected 0 <= RANK < COUNT, got " + std::to_string(s.rank) + "/" +
                                    std::to_string(s.count));
      layout.shard = s;
    } else if (key == "pad") {
      for (std::string_view item : split(value, ',')) {
        const std::size_t colon = item.find(':');
        if (colon == std::string_view::npos)
          throw std::invalid_argument("pad: expected AXIS:SIZE (e.g. n_vocab:32064), got \"" + std::string(item) + "\"");
        layout.padded[symbol(trim_spaces(item.substr(0, colon)), "pad")] = integer(trim_spaces(item.substr(colon + 1)), "pad size");
      }
    } else {
      throw std::invalid_argument("\"" + std::string(key) + "\": expected axes, shard or pad");
    }
    any = true;
  }
  if (!any) throw std::invalid_argument("expected at least one of axes=..., shard=..., pad=...");
  return layout;
}

void RowAlignment::apply(const float* stored, float* aligned) const {
  for (std::size_t i = 0; i < gather.size(); ++i) aligned[i] = stored[gather[i]];
}

namespace {

// A layout's axes resolved against the dims, before any element is mapped: cheap, whatever the
// dims claim.
struct ResolvedAxes {
  std::vector<DimSymbol> factors;                       // the catalogue row's factors
  std::vector<std::int64_t> real, stored_size, offset;  // by factor
  std::vector<std::size_t> order;                       // stored axis -> factor
  std::size_t shard_factor = 0;                         // factors.size(): no shard
  std::string padding_text, shard_text;

  std::vector<std::int64_t> stored_shape() const {
    std::vector<std::int64_t> shape;
    for (std::size_t f : order) shape.push_back(stored_size[f]);
    return shape;
  }
};

ResolvedAxes resolve_axes(const TapSpec& spec, const TapLayout& layout, const TapDims& dims) {
  ResolvedAxes r;
  auto& factors = r.factors;
  for (int d = 0; d < spec.row_rank; ++d) {
    factors.push_back(spec.row[std::size_t(d)].first);
    if (spec.row[std::size_t(d)].second) factors.push_back(*spec.row[std::size_t(d)].second);
  }
  const auto factor_index = [&](DimSymbol a, const char* what) {
    const auto it = std::find(factors.begin(), factors.end(), a);
    if (it == factors.end())
      throw std::invalid_argument(std::string(what) + " " + std::string(dim_symbol_name(a)) + ": the row of " +
                                  std::string(spec.name) + " has the axes (" + join_axes(factors) + ")");
    return std::size_t(it - factors.begin());
  };
  const std::size_t n_factors = factors.size();
  r.real.assign(n_factors, 0);
  r.stored_size.assign(n_factors, 0);
  r.offset.assign(n_factors, 0);
  auto& real = r.real;
  auto& stored_size = r.stored_size;
  auto& offset = r.offset;
  for (std::size_t f = 0; f < n_factors; ++f) {
    real[f] = dim_value(factors[f], dims);
    if (real[f] <= 0)
      throw std::invalid_argument("the trace's /dims lack " + std::string(dim_symbol_name(factors[f])));
    stored_size[f] = real[f];
  }
  const std::vector<DimSymbol> axes = layout.axes.empty() ? factors : layout.axes;
  auto& order = r.order;
  for (DimSymbol a : axes) order.push_back(factor_index(a, "axes: axis"));
  std::vector<std::size_t> sorted = order;
  std::sort(sorted.begin(), sorted.end());
  if (axes.size() != n_factors || std::adjacent_find(sorted.begin(), sorted.end()) != sorted.end())
    throw std::invalid_argument("axes (" + join_axes(axes) + "): expected each of (" + join_axes(factors) +
                                ") once, in the order the producer stores them");
  for (const auto& [axis, size] : layout.padded) {
    const std::size_t f = factor_index(axis, "pad: axis");
    if (size < real[f])
      throw std::invalid_argument("pad " + std::string(dim_symbol_name(axis)) + ":" + std::to_string(size) +
                                  ": smaller than the model's " + std::to_string(real[f]));
    stored_size[f] = size;
    r.padding_text += "; " + std::string(dim_symbol_name(axis)) + " padded to " + std::to_string(size) + " (" +
                    std::to_string(size - real[f]) + " padding entries dropped)";
  }
  auto& shard_factor = r.shard_factor;
  shard_factor = n_factors;
  if (layout.shard) {
    const TapShard& s = *layout.shard;
    shard_factor = factor_index(s.axis, "shard: axis");
    if (stored_size[shard_factor] % s.count != 0)
      throw std::invalid_argument("shard " + std::string(dim_symbol_name(s.axis)) + ":" + std::to_string(s.rank) + "/" +
                                  std::to_string(s.count) + ": " + std::to_string(stored_size[shard_factor]) +
                                  " does not split into " + std::to_string(s.count) + " equal parts");
    stored_size[shard_factor] /= s.count;
    offset[shard_factor] = s.rank * stored_size[shard_factor];
    const std::int64_t first = offset[shard_factor];
    const std::int64_t last = std::min(real[shard_factor], first + stored_size[shard_factor]) - 1;
    if (last < first)
      throw std::invalid_argument("shard " + std::string(dim_symbol_name(s.axis)) + ":" + std::to_string(s.rank) + "/" +
                                  std::to_string(s.count) + " holds only padding");
    r.shard_text = "; shard " + std::to_string(s.rank) + " of " + std::to_string(s.count) + " along " +
                 std::string(dim_symbol_name(s.axis)) + ": compares " + std::string(dim_symbol_name(s.axis)) + " " +
                 std::to_string(first) + ".." + std::to_string(last) + " of " + std::to_string(real[shard_factor]);
  }
  return r;
}

}  // namespace

std::vector<std::int64_t> stored_row_shape(const TapSpec& spec, const TapLayout& layout, const TapDims& dims) {
  return resolve_axes(spec, layout, dims).stored_shape();
}

RowAlignment align_row(const TapSpec& spec, const TapLayout& layout, const TapDims& dims) {
  const ResolvedAxes r = resolve_axes(spec, layout, dims);
  const std::vector<DimSymbol>& factors = r.factors;
  const std::size_t n_factors = factors.size();
  const auto& real = r.real;
  const auto& stored_size = r.stored_size;
  const auto& offset = r.offset;
  const auto& order = r.order;
  const std::size_t shard_factor = r.shard_factor;
  RowAlignment a;
  a.whole_shape = catalogue_row_shape(spec, dims);
  a.stored_shape = r.stored_shape();
  std::vector<std::int64_t> whole_stride(n_factors, 1);
  for (std::size_t f = n_factors - 1; f > 0; --f) whole_stride[f - 1] = whole_stride[f] * real[f];
  std::int64_t n_stored = 1;
  for (std::int64_t s : a.stored_shape) n_stored *= s;

  std::vector<std::pair<std::int64_t, std::int64_t>> whole_from_stored;  // (whole index, stored index)
  std::vector<std::int64_t> coord(n_factors, 0);                          // by stored axis
  for (std::int64_t i = 0; i < n_stored; ++i) {
    std::int64_t whole = 0;
    bool padding = false;
    for (std::size_t k = 0; k < n_factors; ++k) {
      const std::size_t f = order[k];
      const std::int64_t w = coord[k] + offset[f];
      padding = padding || w >= real[f];
      whole += w * whole_stride[f];
    }
    if (!padding) whole_from_stored.emplace_back(whole, i);
    for (std::size_t k = n_factors; k-- > 0;) {
      if (++coord[k] < a.stored_shape[k]) break;
      coord[k] = 0;
    }
  }
  std::sort(whole_from_stored.begin(), whole_from_stored.end());
  std::int64_t n_whole = 1;
  for (std::int64_t d : a.whole_shape) n_whole *= d;
  const bool sharded = std::int64_t(whole_from_stored.size()) != n_whole;
  bool identity = n_stored == std::int64_t(whole_from_stored.size());
  for (std::size_t i = 0; i < whole_from_stored.size(); ++i) {
    a.gather.push_back(whole_from_stored[i].second);
    if (sharded) a.covers.push_back(whole_from_stored[i].first);
    identity = identity && whole_from_stored[i].second == std::int64_t(i);
  }
  if (identity) a.gather.clear();
  a.row_shape = a.whole_shape;
  if (sharded) {
    const std::int64_t kept = std::min(real[shard_factor], offset[shard_factor] + stored_size[shard_factor]) -
                              offset[shard_factor];
    a.row_shape.clear();
    std::size_t f = 0;
    for (int d = 0; d < spec.row_rank; ++d) {
      std::int64_t n = 1;
      for (int part = 0; part < (spec.row[std::size_t(d)].second ? 2 : 1); ++part, ++f)
        n *= f == shard_factor ? kept : real[f];
      a.row_shape.push_back(n);
    }
  }
  std::vector<DimSymbol> stored_axes;
  for (std::size_t f : order) stored_axes.push_back(factors[f]);
  if (stored_axes != factors)
    a.description = "; stored as (" + join_axes(stored_axes) + "), aligned to (" + join_axes(factors) + ")";
  a.description += r.padding_text + r.shard_text;
  a.description.erase(0, std::min<std::size_t>(2, a.description.size()));  // the leading "; "
  return a;
}

}  // namespace tapdiff
