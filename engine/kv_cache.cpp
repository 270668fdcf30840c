#include "engine/kv_cache.hpp"

#include <fmt/format.h>

#include "engine/device/error.hpp"
#include "engine/executor.hpp"

namespace tapdiff::engine {

KvCache::KvCache(Executor& ex, int n_layer, int capacity, int kv_dim, ElemType type,
                 FaultSwitch faults)
    : capacity_(capacity), kv_dim_(kv_dim), type_(type), faults_(faults) {
  const std::size_t layer_bytes = std::size_t(capacity) * std::size_t(kv_dim) * elem_size(type);
  for (int l = 0; l < n_layer; ++l) {
    k_.push_back(ex.allocate(layer_bytes));
    v_.push_back(ex.allocate(layer_bytes));
  }
}

std::uint64_t KvCache::bytes(int n_layer, int capacity, int kv_dim, ElemType type) {
  return 2 * std::uint64_t(n_layer) * std::uint64_t(capacity) * std::uint64_t(kv_dim) * elem_size(type);
}

std::int64_t KvCache::append_offset(std::int64_t n_new) const {
  // Fault kv-append-offset: the cursor moves one element per cached row, not one row.
  if (faults_.is(Fault::kv_append_offset)) return length_;
  // Fault kv-decode-write-late: the decode cursor is incremented before the write, so a decode
  // step's row lands in the slot after its own.
  if (faults_.is(Fault::kv_decode_write_late) && length_ > 0) return (length_ + 1) * kv_dim_;
  // Fault kv-chunk-offset: a batch writes at the cache's start, as a prefill written for
  // one-batch prompts assumes; right for the whole prompt, wrong for every chunk after the first.
  if (faults_.is(Fault::kv_chunk_offset) && n_new > 1) return 0;
  return length_ * kv_dim_;
}

std::int64_t KvCache::visible_keys(std::int64_t n_new) const {
  // Fault kv-unsliced: attention gets the capacity instead of the valid length.
  if (faults_.is(Fault::kv_unsliced)) return capacity_;
  return length_ + n_new;
}

void KvCache::check_room(std::int64_t n_new) const {
  if (length_ + n_new > capacity_)
    throw EngineError(fmt::format("KV cache full: {} rows valid + {} new > capacity {}", length_,
                                  n_new, capacity_));
}

void KvCache::advance(std::int64_t n_new) {
  // Fault kv-stuck-length: the length update is lost.
  if (faults_.is(Fault::kv_stuck_length)) return;
  length_ += n_new;
}

}  // namespace tapdiff::engine
