#include "model/fused_weights.hpp"

#include <cstdio>

#include "model/ggml_type.hpp"

namespace tapdiff {

std::optional<FusedPart> fused_part(const ModelConfig& c, const std::string& name) {
  int layer = 0, consumed = 0;
  char base[32] = {};
  if (std::sscanf(name.c_str(), "blk.%d.%31[a-z_].weight%n", &layer, base, &consumed) != 2 ||
      consumed != int(name.size()))
    return std::nullopt;
  const std::string b = base, prefix = "blk." + std::to_string(layer) + ".";
  const std::int64_t q = c.q_dim(), kv = c.kv_dim(), ff = c.n_ff;
  if (c.fused_qkv && (b == "attn_q" || b == "attn_k" || b == "attn_v"))
    return FusedPart{prefix + "attn_qkv.weight", b == "attn_q" ? 0 : b == "attn_k" ? q : q + kv, b == "attn_q" ? q : kv};
  if (c.fused_gate_up && (b == "ffn_gate" || b == "ffn_up"))
    return FusedPart{prefix + "ffn_up.weight", b == "ffn_gate" ? 0 : ff, ff};
  return std::nullopt;
}

std::optional<GgufTensorInfo> weight_tensor(const GgufFile& file, const ModelConfig& c, const std::string& name) {
  const auto part = fused_part(c, name);
  const GgufTensorInfo* t = file.find_tensor(part ? part->fused : name);
  if (!t) return std::nullopt;
  if (!part) return *t;
  GgufTensorInfo slice = *t;
  const std::uint64_t row_bytes = t->n_bytes / std::uint64_t(t->ne[1]);
  slice.name = name;
  slice.ne = {t->ne[0], part->n_rows};
  slice.offset += std::uint64_t(part->first_row) * row_bytes;
  slice.data += std::uint64_t(part->first_row) * row_bytes;
  slice.n_elements = std::uint64_t(t->ne[0]) * std::uint64_t(part->n_rows);
  slice.n_bytes = std::uint64_t(part->n_rows) * row_bytes;
  return slice;
}

GgufTensorInfo expert_matrix(const GgufTensorInfo& stacked, int expert) {
  GgufTensorInfo m = stacked;
  const std::uint64_t bytes = stacked.n_bytes / std::uint64_t(stacked.ne[2]);
  m.name = stacked.name + "[" + std::to_string(expert) + "]";
  m.ne = {stacked.ne[0], stacked.ne[1]};
  m.offset += std::uint64_t(expert) * bytes;
  m.data += std::uint64_t(expert) * bytes;
  m.n_elements = std::uint64_t(stacked.ne[0]) * std::uint64_t(stacked.ne[1]);
  m.n_bytes = bytes;
  return m;
}

}  // namespace tapdiff
