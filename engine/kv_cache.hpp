// The KV cache: one preallocated buffer per layer for K and for V, each (capacity, kv_dim) in
// the cache's storage type, and explicit bookkeeping of how many rows hold valid entries.
// A step appends its rows at append_offset(n), attention reads visible_keys() rows, and
// advance() makes the appended rows valid once every layer has written them.
// The kv-* faults live in this bookkeeping.
#pragma once

#include <cstdint>
#include <vector>

#include "engine/device/buffer.hpp"
#include "engine/device/elem_type.hpp"
#include "engine/faults.hpp"

namespace tapdiff::engine {

class Executor;

class KvCache {
public:
  KvCache(Executor& ex, int n_layer, int capacity, int kv_dim, ElemType type, FaultSwitch faults);
  // What the constructor allocates: K and V of every layer.
  static std::uint64_t bytes(int n_layer, int capacity, int kv_dim, ElemType type);

  ElemType type() const { return type_; }
  int capacity() const { return capacity_; }
  int row() const { return kv_dim_; }  // elements per cached position
  std::int64_t length() const { return length_; }

  // Element offset, within a layer's cache, where the next step's n_new rows go.
  std::int64_t append_offset(std::int64_t n_new) const;
  // Cache rows attention reads once n_new rows have been appended.
  std::int64_t visible_keys(std::int64_t n_new) const;
  // Throws EngineError when n_new more rows do not fit.
  void check_room(std::int64_t n_new) const;
  // After a step: its n_new appended rows become valid.
  void advance(std::int64_t n_new);

  // Fault kv-layer-shared: the layer index is lost and every layer gets layer 0's buffers.
  void* k(int layer) const {
    return k_[faults_.is(Fault::kv_layer_shared) ? 0 : static_cast<std::size_t>(layer)].data();
  }  // (capacity, kv_dim)
  void* v(int layer) const {
    return v_[faults_.is(Fault::kv_layer_shared) ? 0 : static_cast<std::size_t>(layer)].data();
  }  // (capacity, kv_dim)

private:
  std::vector<Buffer> k_, v_;  // (n_layer,) buffers of (capacity, kv_dim), zero-filled
  int capacity_;
  int kv_dim_;
  ElemType type_;
  FaultSwitch faults_;
  std::int64_t length_ = 0;  // rows holding valid K/V
};

}  // namespace tapdiff::engine
