#include <algorithm>
#include <charconv>
#include <limits>
#include <stdexcept>

#include "tapdiff/tap_filter.hpp"
#include "trim.hpp"

namespace tapdiff {
namespace {

bool parse_int(std::string_view s, std::int64_t& out) {
  if (s.empty()) return false;
  auto [end, error] = std::from_chars(s.data(), s.data() + s.size(), out);
  return error == std::errc() && end == s.data() + s.size() && out >= 0;
}

[[noreturn]] void bad_item(std::string_view what, std::string_view item) {
  throw std::invalid_argument("tap filter: " + std::string(what) +
                              ": expected N, A-B or A-, got '" + std::string(item) + "'");
}

}  // namespace

RangeSet RangeSet::parse(std::string_view spec, std::string_view what) {
  RangeSet set;
  set.spec_ = std::string(trim_spaces(spec));
  if (set.spec_.empty()) return set;
  set.all_ = false;
  std::string_view rest = set.spec_;
  while (true) {
    const std::size_t comma = rest.find(',');
    const std::string_view item = trim_spaces(rest.substr(0, comma));
    Interval iv{0, 0};
    const std::size_t dash = item.find('-');
    if (dash == std::string_view::npos) {
      if (!parse_int(item, iv.lo)) bad_item(what, item);
      iv.hi = iv.lo;
    } else {
      const std::string_view hi = trim_spaces(item.substr(dash + 1));
      if (!parse_int(trim_spaces(item.substr(0, dash)), iv.lo)) bad_item(what, item);
      if (hi.empty()) {
        iv.hi = std::numeric_limits<std::int64_t>::max();
      } else if (!parse_int(hi, iv.hi) || iv.hi < iv.lo) {
        bad_item(what, item);
      }
    }
    set.intervals_.push_back(iv);
    if (comma == std::string_view::npos) break;
    rest.remove_prefix(comma + 1);
  }
  std::sort(set.intervals_.begin(), set.intervals_.end(),
            [](const Interval& a, const Interval& b) { return a.lo < b.lo; });
  std::vector<Interval> merged;
  for (const Interval& iv : set.intervals_) {
    if (!merged.empty() && (merged.back().hi == std::numeric_limits<std::int64_t>::max() ||
                            iv.lo <= merged.back().hi + 1)) {
      merged.back().hi = std::max(merged.back().hi, iv.hi);
    } else {
      merged.push_back(iv);
    }
  }
  set.intervals_ = std::move(merged);
  return set;
}

bool RangeSet::contains_slow(std::int64_t value) const {
  for (const Interval& iv : intervals_) {
    if (value < iv.lo) return false;
    if (value <= iv.hi) return true;
  }
  return false;
}

bool RangeSet::intersects(std::int64_t first, std::int64_t last) const {
  if (all_) return first <= last;
  for (const Interval& iv : intervals_) {
    if (iv.lo > last) return false;
    if (iv.hi >= first) return true;
  }
  return false;
}

}  // namespace tapdiff
