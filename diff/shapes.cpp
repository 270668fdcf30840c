#include "diff/shapes.hpp"

#include <fmt/format.h>

#include "tapdiff/row_shape.hpp"
#include "tapdiff/tap_catalogue.hpp"

namespace tapdiff::diff {

std::vector<std::string> dimension_names(std::int64_t value, const TapDims& d) {
  const std::pair<const char*, std::int64_t> symbols[] = {
      {"n_embd", d.n_embd},
      {"n_ff", d.n_ff},
      {"n_vocab", d.n_vocab},
      {"n_head·head_dim", d.n_head * d.head_dim},
      {"n_head_kv·head_dim", d.n_head_kv * d.head_dim},
      {"n_head", d.n_head},
      {"n_head_kv", d.n_head_kv},
      {"head_dim", d.head_dim},
      {"n_ctx", d.n_ctx},
      {"n_expert", d.n_expert},
      {"n_expert_used", d.n_expert_used},
  };
  std::vector<std::string> out;
  for (const auto& [name, v] : symbols)
    if (v > 0 && v == value) out.emplace_back(name);
  return out;
}

std::string shape_explanation(std::string_view name, const std::vector<std::int64_t>& expected,
                              const std::vector<std::int64_t>& actual, const std::optional<TapDims>& dims) {
  const TapSpec* spec = find_tap_spec(name);
  if (expected.size() != actual.size())
    return fmt::format("rank {} in the expected trace, {} in the actual", expected.size(), actual.size());
  std::string out;
  for (std::size_t i = 0; i < expected.size(); ++i) {
    if (expected[i] == actual[i]) continue;
    const std::string what = expected.size() == 1 ? "width" : fmt::format("dimension {}", i);
    std::string sentence = fmt::format("{} {} expected, {} actual", what, expected[i], actual[i]);
    if (dims) {
      auto want = dimension_names(expected[i], *dims);
      // The catalogue's own symbol for the axis first: n_expert_used may equal n_head_kv by chance.
      if (spec && int(i) < spec->row_rank) {
        const DimExpr& axis = spec->row[i];
        const std::int64_t value = dim_value(axis.first, *dims) * (axis.second ? dim_value(*axis.second, *dims) : 1);
        std::string symbol(dim_symbol_name(axis.first));
        if (axis.second) symbol += "·" + std::string(dim_symbol_name(*axis.second));
        if (value == expected[i]) want.insert(want.begin(), symbol);
      }
      const auto got = dimension_names(actual[i], *dims);
      const bool context_axis = spec && int(i) < spec->row_rank && spec->row[i].first == DimSymbol::n_ctx &&
                                !spec->row[i].second;
      if (context_axis && actual[i] > expected[i])  // checked first: a padded width can equal any dimension
        sentence += fmt::format(": wider than the run's context (n_ctx {}), as a KV cache allocated for {} positions "
                                "would leave it; if the producer pads its rows, declare it in the trace's layout "
                                "(pad=, docs/trace-schema.md)",
                                expected[i], actual[i]);
      else if (!want.empty() && !got.empty())
        sentence += fmt::format(": {} used where {} belongs", got.front(), want.front());
      else if (!want.empty())
        sentence += fmt::format(": the expected {} is {}; {} is no model dimension", expected[i],
                                want.front(), actual[i]);
    }
    out += (out.empty() ? "" : "; ") + sentence;
  }
  return out;
}

}  // namespace tapdiff::diff
