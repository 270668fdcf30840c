#include "tapdiff/tap_catalogue.hpp"

namespace tapdiff {
namespace {

std::string stored_name(const TapSpec& spec) {
  return spec.scope == TapScope::layer ? "`blk.{l}." + std::string(spec.name) + "`"
                                       : "`" + std::string(spec.name) + "`";
}

std::string prefill_text(PrefillRows rows) {
  return rows == PrefillRows::every_position ? "every prompt position"
                                             : "the last prompt position (more allowed)";
}

}  // namespace

std::string catalogue_markdown() {
  std::string md;
  md += std::string(kCatalogueBeginMarker) + "\n";
  md += "| # | tap | layer | row shape | prefill rows | decode rows | what |\n";
  md += "|---|---|---|---|---|---|---|\n";
  int index = 0;
  for (const TapSpec& spec : tap_catalogue()) {
    md += "| " + std::to_string(index++) + " | " + stored_name(spec) + " | " +
          (spec.scope == TapScope::layer ? "0 .. n_layer-1" : "-1 (global)") + " | `" +
          catalogue_row_shape_symbols(spec) + "` | " + prefill_text(spec.prefill) +
          " | the new position | " + std::string(spec.what) + " |\n";
  }
  md += std::string(kCatalogueEndMarker) + "\n";
  return md;
}

}  // namespace tapdiff
