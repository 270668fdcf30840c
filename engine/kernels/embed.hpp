// Embedding gather: out[r] = round(table[tokens[r]]), the table in its GGUF encoding.
#pragma once

#include <cstdint>

#include "engine/device/stream.hpp"
#include "engine/kernels/dequant.hpp"

namespace tapdiff::engine {

struct EmbedArgs {
  Encoded table = {};                    // (n_vocab, n_embd)
  const std::int32_t* tokens = nullptr;  // (n_rows,) ids in [0, n_vocab), checked by the caller
  float* out = nullptr;                  // (n_rows, n_embd)
  std::int64_t n_rows = 0;
  std::int64_t n_embd = 0;               // a multiple of the table's block size
  std::int64_t n_vocab = 0;
  ElemType round = ElemType::f32;        // the precision the table's values are rounded to
  // The row's multiplier: Gemma's sqrt(n_embd), Granite's embedding multiplier, 1 elsewhere.
  float scale = 1.0f;
};

inline std::int64_t embed_runs_per_row(const EmbedArgs& a) { return decode_runs(a.n_embd); }

// Run i: kDecodeRun elements of one output row.
TD_HD inline void embed_body(const EmbedArgs& a, std::int64_t i, std::int64_t runs_per_row) {
  const std::int64_t r = i / runs_per_row, c0 = (i % runs_per_row) * kDecodeRun;
  const int len = run_length(a.n_embd - c0);
  float v[kDecodeRun];
  decode_run(a.table, std::int64_t(a.tokens[r]) * a.n_embd + c0, len, v);
  float* out = a.out + r * a.n_embd + c0;
  round_run(a.round, v, len);
  for (int j = 0; j < len; ++j) out[j] = v[j] * a.scale;  // exact at 1
}

void validate(const EmbedArgs& a);
void embed_host(const EmbedArgs& a);
void embed_cuda(const EmbedArgs& a, CudaStream stream);

}  // namespace tapdiff::engine
