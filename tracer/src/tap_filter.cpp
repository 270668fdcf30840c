#include "tapdiff/tap_filter.hpp"

#include <charconv>
#include <stdexcept>

namespace tapdiff {
namespace {

std::string_view trim(std::string_view s) {
  while (!s.empty() && s.front() == ' ') s.remove_prefix(1);
  while (!s.empty() && s.back() == ' ') s.remove_suffix(1);
  return s;
}

}  // namespace

TapFilter TapFilter::parse(std::string_view names, std::string_view layers,
                           std::string_view positions) {
  TapFilter filter;
  filter.layers_ = RangeSet::parse(layers, "layers");
  filter.positions_ = RangeSet::parse(positions, "positions");
  filter.names_spec_ = std::string(trim(names));
  std::string_view rest = filter.names_spec_;
  while (!rest.empty()) {
    const std::size_t comma = rest.find(',');
    std::string_view glob = trim(rest.substr(0, comma));
    const bool exclude = !glob.empty() && glob.front() == '!';
    if (exclude) glob = trim(glob.substr(1));
    if (glob.empty()) {
      throw std::invalid_argument("tap filter: names: empty glob in '" + filter.names_spec_ + "'");
    }
    (exclude ? filter.exclude_ : filter.include_).emplace_back(glob);
    if (comma == std::string_view::npos) break;
    rest.remove_prefix(comma + 1);
  }
  filter.all_names_ = filter.include_.empty() && filter.exclude_.empty();
  return filter;
}

bool TapFilter::match_full_name(std::string_view full_name) const {
  bool included = include_.empty();
  for (const std::string& glob : include_) {
    if (glob_match(glob, full_name)) {
      included = true;
      break;
    }
  }
  if (!included) return false;
  for (const std::string& glob : exclude_) {
    if (glob_match(glob, full_name)) return false;
  }
  return true;
}

bool TapFilter::name_enabled(std::string_view name, int layer) const {
  if (const bool* known = memo_.find(name, layer)) return *known;
  return memo_.insert(name, layer, match_full_name(full_tap_name(name, layer)));
}

std::string tap_layer_prefix(int layer) {
  return layer < 0 ? std::string() : "layer " + std::to_string(layer) + ": ";
}

std::string full_tap_name(std::string_view name, int layer) {
  if (layer < 0) return std::string(name);
  char digits[16];
  const auto [end, error] = std::to_chars(digits, digits + sizeof digits, layer);
  (void)error;
  return std::string("blk.").append(digits, end).append(".").append(name);
}

std::pair<std::string, int> split_full_tap_name(std::string_view full) {
  const std::size_t dot = full.rfind("blk.", 0) == 0 ? full.find('.', 4) : std::string_view::npos;
  int layer = -1;
  if (dot == std::string_view::npos || dot == 4) return {std::string(full), -1};
  const auto [end, error] = std::from_chars(full.data() + 4, full.data() + dot, layer);
  if (error != std::errc() || end != full.data() + dot || layer < 0) return {std::string(full), -1};
  return {std::string(full.substr(dot + 1)), layer};
}

}  // namespace tapdiff
