// KV cache append: n_rows rows of K (or V) stored, in the cache's type, at an element offset
// of one layer's cache. Where the rows go is the KV cache bookkeeping's decision (kv_cache.hpp).
#pragma once

#include <cstdint>

#include "engine/device/stream.hpp"
#include "engine/kernels/element.hpp"

namespace tapdiff::engine {

struct KvAppendArgs {
  const float* src = nullptr;  // (n_rows, row) new K or V rows, after RoPE for K
  void* cache = nullptr;       // (capacity, row) one layer's cache, cache_type
  ElemType cache_type = ElemType::f32;
  std::int64_t offset = 0;  // element offset of the first written element
  std::int64_t n_rows = 0;
  std::int64_t row = 0;       // n_head_kv * head_dim
  std::int64_t capacity = 0;  // rows the cache holds
};

TD_HD inline void kv_append_body(const KvAppendArgs& a, std::int64_t i) {
  store_element(a.cache, a.cache_type, a.offset + i, a.src[i]);
}

void validate(const KvAppendArgs& a);
void kv_append_host(const KvAppendArgs& a);
void kv_append_cuda(const KvAppendArgs& a, CudaStream stream);

}  // namespace tapdiff::engine
