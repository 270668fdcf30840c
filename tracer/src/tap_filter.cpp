#include "tapdiff/tap_filter.hpp"

#include <charconv>
#include <cstring>
#include <stdexcept>

namespace tapdiff {
namespace {

constexpr std::size_t kMemoSlots = 1024;  // a 30-layer model with 21 taps needs ~600

// Cheap hash of (name, layer): its length, first and last 8 bytes and the layer.
std::uint64_t name_hash(std::string_view name, int layer) {
  std::uint64_t head = 0;
  std::uint64_t tail = 0;
  if (!name.empty()) std::memcpy(&head, name.data(), name.size() < 8 ? name.size() : 8);
  if (name.size() > 8) std::memcpy(&tail, name.data() + name.size() - 8, 8);
  std::uint64_t h = head * 0x9E3779B97F4A7C15ull;
  h ^= (tail + name.size()) * 0xC2B2AE3D27D4EB4Full;
  h ^= static_cast<std::uint64_t>(static_cast<std::uint32_t>(layer)) * 0x165667B19E3779F9ull;
  return h ^ (h >> 29);
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && s.front() == ' ') s.remove_prefix(1);
  while (!s.empty() && s.back() == ' ') s.remove_suffix(1);
  return s;
}

}  // namespace

namespace detail {

void NameMemo::reserve(std::size_t slots) {
  slots_.assign(slots, Slot{});
  used_ = 0;
}

int NameMemo::find(std::string_view name, int layer, std::uint64_t hash) const {
  if (slots_.empty()) return -1;
  const std::size_t mask = slots_.size() - 1;
  for (std::size_t i = hash & mask;; i = (i + 1) & mask) {
    const Slot& s = slots_[i];
    if (s.verdict < 0) return -1;
    if (s.hash == hash && s.layer == layer && s.length == name.size() &&
        std::memcmp(s.name.data(), name.data(), name.size()) == 0) {
      return s.verdict;
    }
  }
}

void NameMemo::insert(std::string_view name, int layer, std::uint64_t hash, bool verdict) {
  // Keep a quarter free so that probes stay short and always end on an empty slot.
  if (name.size() > kMaxName || (used_ + 1) * 4 > slots_.size() * 3) return;
  const std::size_t mask = slots_.size() - 1;
  std::size_t i = hash & mask;
  while (slots_[i].verdict >= 0) i = (i + 1) & mask;
  Slot& s = slots_[i];
  s.hash = hash;
  s.layer = layer;
  s.length = static_cast<std::uint8_t>(name.size());
  s.verdict = verdict ? 1 : 0;
  std::memcpy(s.name.data(), name.data(), name.size());
  ++used_;
}

}  // namespace detail

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
  if (!filter.all_names_) filter.memo_.reserve(kMemoSlots);
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
  const std::uint64_t hash = name_hash(name, layer);
  const int known = memo_.find(name, layer, hash);
  if (known >= 0) return known == 1;
  const bool verdict = match_full_name(full_tap_name(name, layer));
  memo_.insert(name, layer, hash, verdict);
  return verdict;
}

std::string tap_layer_prefix(int layer) {
  return layer < 0 ? std::string() : "layer " + std::to_string(layer) + ": ";
}

void full_tap_name(std::string_view name, int layer, std::string& out) {
  out.clear();
  if (layer < 0) {
    out.append(name);
    return;
  }
  char digits[16];
  const auto [end, error] = std::to_chars(digits, digits + sizeof digits, layer);
  (void)error;
  out.append("blk.").append(digits, end).append(".").append(name);
}

std::string full_tap_name(std::string_view name, int layer) {
  std::string full;
  full_tap_name(name, layer, full);
  return full;
}

}  // namespace tapdiff
