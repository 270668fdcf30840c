// Which taps a producer records: globs on full tap names, layer ranges, position ranges.
//
//   names      comma-separated globs matched against the full name ("blk.3.attn_q", "output");
//              '*' matches any run of characters (dots included), '?' one character; a glob
//              prefixed with '!' excludes. Empty: every name.
//   layers     "0-3,7,10-": inclusive ranges; applies to per-layer taps only. Empty: all.
//   positions  same syntax, absolute positions; applies to every tap. Empty: all.
//
// enabled() is what producers call before doing any work for a tap, so it must cost a few
// nanoseconds: ranges are pre-parsed, and the glob verdict for each (name, layer) is
// memoised (tap_key_table.hpp). Not thread-safe (the memo is written on a miss).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "tapdiff/tap_key_table.hpp"

namespace tapdiff {

class RangeSet {
public:
  RangeSet() = default;  // admits everything
  // Throws std::invalid_argument naming `what` ("layers") and the offending item.
  static RangeSet parse(std::string_view spec, std::string_view what);

  bool all() const { return all_; }
  bool contains(std::int64_t value) const { return all_ || contains_slow(value); }
  bool intersects(std::int64_t first, std::int64_t last) const;  // [first, last] inclusive
  // fn(first, count) for every maximal run of admitted values in [first, first + count).
  template <class Fn>
  void for_each_run(std::int64_t first, std::int64_t count, Fn&& fn) const;
  const std::string& spec() const { return spec_; }

private:
  struct Interval {
    std::int64_t lo;
    std::int64_t hi;  // inclusive
  };
  bool contains_slow(std::int64_t value) const;

  std::vector<Interval> intervals_;  // sorted, disjoint, non-adjacent
  bool all_ = true;
  std::string spec_;
};

template <class Fn>
void RangeSet::for_each_run(std::int64_t first, std::int64_t count, Fn&& fn) const {
  if (count <= 0) return;
  if (all_) {
    fn(first, count);
    return;
  }
  const std::int64_t last = first + count - 1;
  for (const Interval& iv : intervals_) {
    if (iv.hi < first) continue;
    if (iv.lo > last) break;
    const std::int64_t lo = iv.lo > first ? iv.lo : first;
    const std::int64_t hi = iv.hi < last ? iv.hi : last;
    fn(lo, hi - lo + 1);
  }
}

// The filter as the user wrote it; stored in the trace so readers know what was left out.
struct TapFilterSpec {
  std::string names;
  std::string layers;
  std::string positions;
};

class TapFilter {
public:
  TapFilter() = default;  // every tap, layer and position
  // Throws std::invalid_argument with a message naming the bad part.
  static TapFilter parse(std::string_view names, std::string_view layers = {},
                         std::string_view positions = {});
  static TapFilter parse(const TapFilterSpec& spec) {
    return parse(spec.names, spec.layers, spec.positions);
  }

  // layer is -1 for global taps. name is the short name ("attn_q").
  bool enabled(std::string_view name, int layer, std::int64_t position) const {
    return positions_.contains(position) && tap_enabled(name, layer);
  }
  // True when any position in [first_position, first_position + n_positions) is enabled:
  // what a batched prefill asks before computing a tap for all its positions.
  bool enabled(std::string_view name, int layer, std::int64_t first_position,
               std::int64_t n_positions) const {
    return n_positions > 0 &&
           positions_.intersects(first_position, first_position + n_positions - 1) &&
           tap_enabled(name, layer);
  }
  // Names and layers only, whatever the position.
  bool tap_enabled(std::string_view name, int layer) const {
    if (layer >= 0 && !layers_.contains(layer)) return false;
    return all_names_ || name_enabled(name, layer);
  }

  const RangeSet& layers() const { return layers_; }
  const RangeSet& positions() const { return positions_; }
  TapFilterSpec spec() const { return {names_spec_, layers_.spec(), positions_.spec()}; }
  bool everything() const { return all_names_ && layers_.all() && positions_.all(); }

private:
  bool name_enabled(std::string_view name, int layer) const;
  bool match_full_name(std::string_view full_name) const;

  std::vector<std::string> include_;  // globs; empty: every name
  std::vector<std::string> exclude_;
  RangeSet layers_;
  RangeSet positions_;
  std::string names_spec_;
  bool all_names_ = true;
  mutable detail::TapKeyTable<bool> memo_;  // glob verdicts
};

// "blk.3.attn_q" for layer 3, "output" for a global tap (layer -1).
std::string full_tap_name(std::string_view name, int layer);
// Its inverse: "blk.3.attn_q" -> ("attn_q", 3); any other name -> (name, -1).
std::pair<std::string, int> split_full_tap_name(std::string_view full);
// "layer 3: " for a per-layer tap, "" for a global one: how messages about a slot of a stack
// (/taps/<name>) say which tap they mean.
std::string tap_layer_prefix(int layer);

// Glob match with '*' and '?' (no escapes), as used by TapFilter.
bool glob_match(std::string_view pattern, std::string_view text);

}  // namespace tapdiff
