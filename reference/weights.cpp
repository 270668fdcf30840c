#include "reference/weights.hpp"

#include <fmt/format.h>

#include "model/dequantize.hpp"

namespace tapdiff::ref {

Weights load_weights(const GgufFile& file) {
  Weights w;
  w.config = load_model_config(file);  // also checks every tensor's shape
  const ModelConfig& c = w.config;
  auto get = [&](const std::string& name) { return dequantize_tensor(*file.find_tensor(name)); };
  w.token_embd = get("token_embd.weight");
  w.layers.resize(static_cast<std::size_t>(c.n_layer));
  for (int l = 0; l < c.n_layer; ++l) {
    const std::string b = fmt::format("blk.{}.", l);
    LayerWeights& L = w.layers[static_cast<std::size_t>(l)];
    L.attn_norm = get(b + "attn_norm.weight");
    L.wq = get(b + "attn_q.weight");
    L.wk = get(b + "attn_k.weight");
    L.wv = get(b + "attn_v.weight");
    if (c.qkv_bias) {
      L.bq = get(b + "attn_q.bias");
      L.bk = get(b + "attn_k.bias");
      L.bv = get(b + "attn_v.bias");
    }
    L.wo = get(b + "attn_output.weight");
    L.ffn_norm = get(b + "ffn_norm.weight");
    L.w_gate = get(b + "ffn_gate.weight");
    L.w_up = get(b + "ffn_up.weight");
    L.w_down = get(b + "ffn_down.weight");
  }
  w.output_norm = get("output_norm.weight");
  if (!c.tied_output) w.output = get("output.weight");
  return w;
}

}  // namespace tapdiff::ref
