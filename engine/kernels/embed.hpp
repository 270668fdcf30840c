// Embedding gather: out[r] = table[tokens[r]] (the table in the weight storage type).
#pragma once

#include <cstdint>

#include "engine/device/stream.hpp"
#include "engine/kernels/element.hpp"

namespace tapdiff::engine {

struct EmbedArgs {
  const void* table = nullptr;  // (n_vocab, n_embd) table_type
  ElemType table_type = ElemType::f32;
  const std::int32_t* tokens = nullptr;  // (n_rows,) ids in [0, n_vocab), checked by the caller
  float* out = nullptr;                  // (n_rows, n_embd)
  std::int64_t n_rows = 0;
  std::int64_t n_embd = 0;
  std::int64_t n_vocab = 0;
  // Fault embed-scaled: Gemma's sqrt(n_embd) embedding scale, for a model that has none.
  bool scale_sqrt_n_embd = false;
};

TD_HD inline void embed_body(const EmbedArgs& a, std::int64_t i) {
  const std::int64_t r = i / a.n_embd, c = i % a.n_embd;
  const float e = load_element(a.table, a.table_type, std::int64_t(a.tokens[r]) * a.n_embd + c);
  a.out[i] = a.scale_sqrt_n_embd ? e * sqrtf(float(a.n_embd)) : e;
}

void validate(const EmbedArgs& a);
void embed_host(const EmbedArgs& a);
void embed_cuda(const EmbedArgs& a, CudaStream stream);

}  // namespace tapdiff::engine
