#include "reference/weights.hpp"

#include <algorithm>
#include <fmt/format.h>
#include <type_traits>

#include "model/dequantize.hpp"
#include "model/fused_weights.hpp"
#include "tapdiff/weight_taps.hpp"

namespace tapdiff::ref {

Matrix::Matrix(const GgufTensorInfo& tensor)
    : tensor_(tensor), rows_(std::int64_t(tensor.n_elements / tensor.ne[0])), cols_(std::int64_t(tensor.ne[0])),
      row_bytes_(tensor.n_bytes / std::uint64_t(rows_)) {}

void Matrix::keep() { values_ = dequantized(); }

void Matrix::row(std::int64_t r, float* out) const {
  if (kept()) {
    std::copy_n(values_.data() + r * cols_, cols_, out);
    return;
  }
  dequantize_row(tensor_.type, tensor_.data + std::uint64_t(r) * row_bytes_, out, cols_);
}

std::vector<float> Matrix::dequantized() const {
  if (kept()) return values_;
  std::vector<float> out(std::size_t(rows_ * cols_));
#pragma omp parallel for schedule(static)
  for (std::int64_t r = 0; r < rows_; ++r) row(r, out.data() + r * cols_);
  return out;
}

Weights load_weights(const GgufFile& file, std::uint64_t kept_bytes) {
  Weights w;
  w.config = load_model_config(file);  // also checks every tensor's shape
  const ModelConfig& c = w.config;
  // Fused tensors (phi3) are read as the separate matrices the forward pass uses.
  auto tensor = [&](const std::string& name) { return *weight_tensor(file, c, name); };
  auto get = [&](const std::string& name) { return dequantize_tensor(tensor(name)); };
  std::uint64_t kept = 0;
  // Matrices are kept in the order the forward pass uses them while they fit.
  auto kept_matrix = [&](const GgufTensorInfo& t) {
    Matrix m(t);
    if (kept + m.float_bytes() <= kept_bytes) {
      m.keep();
      kept += m.float_bytes();
    }
    return m;
  };
  auto matrix = [&](const std::string& name) { return kept_matrix(tensor(name)); };
  auto experts = [&](const std::string& name) {
    std::vector<Matrix> m;
    for (int e = 0; e < c.n_expert; ++e) m.push_back(kept_matrix(expert_matrix(tensor(name), e)));
    return m;
  };
  // The embedding table is read a row per token; kept only as the (tied) output head.
  w.token_embd = Matrix(tensor("token_embd.weight"));
  for (const char* name : c.rope_factors_tensors()) w.rope_factors[name] = get(name);
  w.layers.resize(static_cast<std::size_t>(c.n_layer));
  for (int l = 0; l < c.n_layer; ++l) {
    const std::string b = fmt::format("blk.{}.", l);
    LayerWeights& L = w.layers[static_cast<std::size_t>(l)];
    L.attn_norm = get(b + "attn_norm.weight");
    L.wq = matrix(b + "attn_q.weight");
    L.wk = matrix(b + "attn_k.weight");
    L.wv = matrix(b + "attn_v.weight");
    if (c.qkv_bias) {
      L.bq = get(b + "attn_q.bias");
      L.bk = get(b + "attn_k.bias");
      L.bv = get(b + "attn_v.bias");
    }
    if (c.qk_norm) {
      L.q_norm = get(b + "attn_q_norm.weight");
      L.k_norm = get(b + "attn_k_norm.weight");
    }
    L.wo = matrix(b + "attn_output.weight");
    if (c.post_norms) L.attn_post_norm = get(b + "post_attention_norm.weight");
    L.ffn_norm = get(b + "ffn_norm.weight");
    if (c.moe()) {
      L.w_router = matrix(b + "ffn_gate_inp.weight");
      L.gate_exps = experts(b + "ffn_gate_exps.weight");
      L.up_exps = experts(b + "ffn_up_exps.weight");
      L.down_exps = experts(b + "ffn_down_exps.weight");
    } else {
      L.w_gate = matrix(b + "ffn_gate.weight");
      L.w_up = matrix(b + "ffn_up.weight");
      L.w_down = matrix(b + "ffn_down.weight");
    }
    if (c.post_norms) L.ffn_post_norm = get(b + "post_ffw_norm.weight");
  }
  w.output_norm = get("output_norm.weight");
  if (c.tied_output)
    w.token_embd = matrix("token_embd.weight");
  else
    w.output = matrix("output.weight");
  return w;
}

void record_weight_taps(const Weights& w, const GgufFile& file, TraceWriter& trace,
                        const WeightTapOptions& options) {
  const ModelConfig& c = w.config;
  // A fused tensor (phi3) is recorded whole, under its GGUF name, once its last part comes.
  std::vector<float> fused;
  auto put = [&](const std::string& name, const auto& weight) {
    std::vector<float> values;
    using Weight = std::decay_t<decltype(weight)>;
    if constexpr (std::is_same_v<Weight, Matrix>) {
      values = weight.dequantized();
    } else if constexpr (std::is_same_v<Weight, std::vector<Matrix>>) {  // stacked experts, in order
      for (const Matrix& m : weight) {
        const std::vector<float> expert = m.dequantized();
        values.insert(values.end(), expert.begin(), expert.end());
      }
    } else {
      values = weight;
    }
    const auto part = fused_part(c, name);
    const std::string tensor = part ? part->fused : name;
    const GgufTensorInfo& t = *file.find_tensor(tensor);
    fused.insert(fused.end(), values.begin(), values.end());
    if (fused.size() < t.n_elements) return;
    const auto n = static_cast<std::int64_t>(fused.size());
    const std::int64_t cols = t.ne.empty() ? n : static_cast<std::int64_t>(t.ne[0]);
    record_weight(trace, tensor, n / cols, cols, fused.data(), options);
    fused.clear();
  };
  put("token_embd.weight", w.token_embd);
  for (const auto& [name, factors] : w.rope_factors) put(name, factors);
  for (int l = 0; l < c.n_layer; ++l) {
    const std::string b = fmt::format("blk.{}.", l);
    const LayerWeights& L = w.layers[static_cast<std::size_t>(l)];
    put(b + "attn_norm.weight", L.attn_norm);
    put(b + "attn_q.weight", L.wq);
    put(b + "attn_k.weight", L.wk);
    put(b + "attn_v.weight", L.wv);
    if (c.qkv_bias) {
      put(b + "attn_q.bias", L.bq);
      put(b + "attn_k.bias", L.bk);
      put(b + "attn_v.bias", L.bv);
    }
    if (c.qk_norm) {
      put(b + "attn_q_norm.weight", L.q_norm);
      put(b + "attn_k_norm.weight", L.k_norm);
    }
    put(b + "attn_output.weight", L.wo);
    if (c.post_norms) put(b + "post_attention_norm.weight", L.attn_post_norm);
    put(b + "ffn_norm.weight", L.ffn_norm);
    if (c.moe()) {
      put(b + "ffn_gate_inp.weight", L.w_router);
      put(b + "ffn_gate_exps.weight", L.gate_exps);
      put(b + "ffn_up_exps.weight", L.up_exps);
      put(b + "ffn_down_exps.weight", L.down_exps);
    } else {
      put(b + "ffn_gate.weight", L.w_gate);
      put(b + "ffn_up.weight", L.w_up);
      put(b + "ffn_down.weight", L.w_down);
    }
    if (c.post_norms) put(b + "post_ffw_norm.weight", L.ffn_post_norm);
  }
  put("output_norm.weight", w.output_norm);
  if (!c.tied_output) put("output.weight", w.output);
}

}  // namespace tapdiff::ref
