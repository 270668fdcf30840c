// A map keyed by a tap's (short name, layer), for lookups on every record: the key hashes the
// name's length, its first and last 8 bytes and the layer, and a hit compares the name, so no
// full name ("blk.3.attn_q") is built. Open addressing; it allocates at its first insert and
// grows when three quarters full, so only an insert allocates.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace tapdiff::detail {

inline std::uint64_t tap_key_hash(std::string_view name, int layer) {
  std::uint64_t head = 0;
  std::uint64_t tail = 0;
  if (!name.empty()) std::memcpy(&head, name.data(), name.size() < 8 ? name.size() : 8);
  if (name.size() > 8) std::memcpy(&tail, name.data() + name.size() - 8, 8);
  std::uint64_t h = head * 0x9E3779B97F4A7C15ull;
  h ^= (tail + name.size()) * 0xC2B2AE3D27D4EB4Full;
  h ^= static_cast<std::uint64_t>(static_cast<std::uint32_t>(layer)) * 0x165667B19E3779F9ull;
  return h ^ (h >> 29);
}

template <class V>
class TapKeyTable {
public:
  V* find(std::string_view name, int layer) {
    if (slots_.empty()) return nullptr;
    Slot& s = probe(name, layer, tap_key_hash(name, layer));
    return s.used ? &s.value : nullptr;
  }
  const V* find(std::string_view name, int layer) const { return const_cast<TapKeyTable*>(this)->find(name, layer); }

  // The value of (name, layer), replaced by value if there was one.
  V& insert(std::string_view name, int layer, V value) {
    if ((used_ + 1) * 4 > slots_.size() * 3) grow();
    const std::uint64_t hash = tap_key_hash(name, layer);
    Slot& s = probe(name, layer, hash);
    if (!s.used) {
      s = Slot{hash, layer, true, std::string(name), V{}};
      ++used_;
    }
    s.value = std::move(value);
    return s.value;
  }

  std::size_t size() const { return used_; }

private:
  struct Slot {
    std::uint64_t hash = 0;
    std::int32_t layer = 0;
    bool used = false;
    std::string name;
    V value{};
  };

  // The slot holding (name, layer), or the empty one ending its probe sequence.
  Slot& probe(std::string_view name, int layer, std::uint64_t hash) {
    const std::size_t mask = slots_.size() - 1;
    for (std::size_t i = hash & mask;; i = (i + 1) & mask) {
      Slot& s = slots_[i];
      if (!s.used || (s.hash == hash && s.layer == layer && s.name == name)) return s;
    }
  }

  void grow() {
    std::vector<Slot> old(slots_.empty() ? 16 : slots_.size() * 2);
    old.swap(slots_);
    for (Slot& s : old) {
      if (!s.used) continue;
      Slot& empty = probe(s.name, s.layer, s.hash);
      empty = std::move(s);
    }
  }

  std::vector<Slot> slots_;
  std::size_t used_ = 0;
};

}  // namespace tapdiff::detail
