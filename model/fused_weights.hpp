// Weights an architecture stores fused (phi3: attn_qkv holds the q, k and v rows, ffn_up the gate
// rows then the up rows): the separate matrices the forward passes read are row slices of them,
// views into the same mapped bytes (a row is whole blocks in every GGUF type). A mixture of
// experts stacks its experts' matrices in one tensor each: expert_matrix() views one.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "model/config.hpp"
#include "model/gguf.hpp"

namespace tapdiff {

struct FusedPart {
  std::string fused;  // the GGUF tensor, e.g. "blk.3.attn_qkv.weight"
  std::int64_t first_row = 0;
  std::int64_t n_rows = 0;
};

// Where the matrix `name` ("blk.3.attn_k.weight") lives when the model fuses it; nullopt when
// the GGUF holds it under its own name.
std::optional<FusedPart> fused_part(const ModelConfig& c, const std::string& name);

// The tensor a forward pass reads as `name`: the GGUF's own, or its rows of a fused tensor
// (named `name`, shaped [ne0, rows]); nullopt when neither exists.
std::optional<GgufTensorInfo> weight_tensor(const GgufFile& file, const ModelConfig& c, const std::string& name);

// Expert e's matrix of a stacked mixture-of-experts tensor (ffn_{gate,up,down}_exps, [ne0, ne1,
// n_expert]): its ne1 rows of ne0 columns, a view into the same bytes, named "<tensor>[e]".
GgufTensorInfo expert_matrix(const GgufTensorInfo& stacked, int expert);

}  // namespace tapdiff
