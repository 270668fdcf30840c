#include "engine/weights.hpp"

#include <fmt/format.h>
#include <type_traits>

#include "engine/executor.hpp"
#include "engine/kernels/convert.hpp"
#include "model/fused_weights.hpp"
#include "model/model_part.hpp"
#include "tapdiff/weight_taps.hpp"

namespace tapdiff::engine {
namespace {

class Loader {
public:
  Loader(Executor& ex, const GgufFile& model, const ModelConfig& config, const FaultSwitch& faults)
      : ex_(ex), model_(model), config_(config), faults_(faults) {
    quirks_.q8_scale_as_bf16 = faults.is(Fault::dequant_q8_scale);
    quirks_.q8_quant_unsigned = faults.is(Fault::dequant_q8_unsigned);
    quirks_.q8_block_stride_quants = faults.is(Fault::dequant_q8_block_stride);
  }

  // A matrix (or the embedding table) resident in its GGUF encoding. wired = false: a buffer
  // of the right size that is never filled (fault weight-not-wired).
  Matrix matrix(const std::string& name, bool wired = true) {
    const GgufTensorInfo t = tensor(name);
    Matrix m;
    m.type = t.type;
    m.cols = static_cast<std::int64_t>(t.ne[0]);
    m.rows = static_cast<std::int64_t>(t.n_elements) / m.cols;
    m.quirks = quirks_;
    const bool quantized = is_block_quantized(t.type);
    if (!wired) {
      m.bytes = ex_.allocate(t.n_bytes);
    } else if (quantized && faults_.is(Fault::dequant_missing)) {
      // Fault dequant-missing: the quantized bytes go into a buffer of n 16-bit values (zero
      // past the tensor's n_bytes < 2n) that the kernels decode as F16.
      m.bytes = ex_.allocate(std::size_t(t.n_elements) * 2);
      ex_.upload(m.bytes.data(), t.data, t.n_bytes);
      m.type = GgmlType::F16;
    } else if (quantized && faults_.is(Fault::tensor_bytes_truncated)) {
      // Fault tensor-bytes-truncated: only a placeholder byte size (elements / 2) is uploaded;
      // the rest of the zero-filled buffer is decoded as it is.
      m.bytes = ex_.allocate(t.n_bytes);
      ex_.upload(m.bytes.data(), t.data, truncated_tensor_bytes(t));
    } else if (ex_.host_visible()) {
      // The mapped file's bytes themselves, read-only: no copy.
      m.bytes = Buffer(const_cast<std::uint8_t*>(t.data), t.n_bytes, nullptr);
    } else {
      m.bytes = ex_.allocate(t.n_bytes);
      ex_.upload(m.bytes.data(), t.data, t.n_bytes);
    }
    return m;
  }

  // A norm weight: float32.
  Buffer vector(const std::string& name) { return decode(tensor(name)); }

  // A q/k/v bias: float32.
  Buffer bias(const std::string& name) {
    Buffer b = decode(tensor(name));
    if (faults_.is(Fault::bias_misread)) {
      // Fault bias-misread: the bias is staged in 16 bits as bf16, then decoded as F16.
      const auto n = static_cast<std::int64_t>(tensor(name).n_elements);
      Buffer staged = ex_.allocate(std::size_t(n) * 2);
      ex_.convert(ConvertArgs{b.data(), ElemType::f32, staged.data(), ElemType::bf16, n});
      ex_.dequantize(DequantArgs{staged.as<std::uint8_t>(), GgmlType::F16, b.as<float>(), n});
      ex_.synchronize();  // staged is freed on return
    }
    return b;
  }

private:
  // Fused tensors (phi3) are loaded as the separate matrices the forward pass uses.
  GgufTensorInfo tensor(const std::string& name) const {
    const auto t = weight_tensor(model_, config_, name);
    if (!t) throw std::invalid_argument(fmt::format("{}: tensor {} missing", model_.path(), name));
    return *t;
  }

  // The tensor's GGUF bytes, decoded to float32 by the engine's kernel.
  Buffer decode(const GgufTensorInfo& t) {
    Matrix encoded = matrix(t.name);
    const auto n = static_cast<std::int64_t>(t.n_elements);
    Buffer values = ex_.allocate(std::size_t(n) * sizeof(float));
    DequantArgs args{encoded.bytes.as<std::uint8_t>(), encoded.type, values.data(), n};
    args.quirks = quirks_;
    ex_.dequantize(args);
    ex_.synchronize();  // encoded is freed on return
    return values;
  }

  Executor& ex_;
  const GgufFile& model_;
  const ModelConfig& config_;
  FaultSwitch faults_;
  DequantQuirks quirks_;
};

}  // namespace

EngineWeights load_engine_weights(Executor& ex, const GgufFile& model, const ModelConfig& c,
                                  const FaultSwitch& faults) {
  Loader load(ex, model, c, faults);
  EngineWeights w;
  if (stages_read(c, "token_embd.weight")) w.token_embd = load.matrix("token_embd.weight");
  for (const char* name : c.rope_factors_tensors())
    if (stages_read(c, name)) w.rope_factors.emplace(name, load.vector(name));
  w.layers.resize(std::size_t(c.n_layer));
  for (int l = 0; l < c.n_layer; ++l) {
    if (!c.holds(l)) continue;
    const std::string b = fmt::format("blk.{}.", l);
    LayerWeights& L = w.layers[std::size_t(l)];
    L.attn_norm = load.vector(b + "attn_norm.weight");
    L.wq = load.matrix(b + "attn_q.weight");
    // Fault fused-qkv-kv-swapped: the fused tensor split as [q | v | k].
    const bool swapped = c.fused_qkv && faults.is(Fault::fused_qkv_kv_swapped);
    L.wk = load.matrix(b + (swapped ? "attn_v.weight" : "attn_k.weight"));
    // Fault weight-not-wired: attn_v's buffer is allocated but its upload is missing.
    L.wv = load.matrix(b + (swapped ? "attn_k.weight" : "attn_v.weight"), !faults.is(Fault::weight_not_wired));
    if (c.qkv_bias) {
      L.bq = load.bias(b + "attn_q.bias");
      L.bk = load.bias(b + "attn_k.bias");
      L.bv = load.bias(b + "attn_v.bias");
    }
    if (c.qk_norm) {
      L.q_norm = load.vector(b + "attn_q_norm.weight");
      L.k_norm = load.vector(b + "attn_k_norm.weight");
    }
    L.wo = load.matrix(b + "attn_output.weight");
    if (c.post_norms) L.attn_post_norm = load.vector(b + "post_attention_norm.weight");
    // Fault ffn-norm-loads-attn-norm: the copy-pasted line kept attn_norm's tensor name.
    L.ffn_norm = faults.is(Fault::ffn_norm_loads_attn_norm) ? load.vector(b + "attn_norm.weight")
                                                           : load.vector(b + "ffn_norm.weight");
    if (c.moe()) {
      L.w_router = load.matrix(b + "ffn_gate_inp.weight");
      L.gate_exps = load.matrix(b + "ffn_gate_exps.weight");
      L.up_exps = load.matrix(b + "ffn_up_exps.weight");
      L.down_exps = load.matrix(b + "ffn_down_exps.weight");
    } else {
      L.w_gate = load.matrix(b + "ffn_gate.weight");
      L.w_up = load.matrix(b + "ffn_up.weight");
      L.w_down = load.matrix(b + "ffn_down.weight");
    }
    if (c.post_norms) L.ffn_post_norm = load.vector(b + "post_ffw_norm.weight");
  }
  if (c.holds(c.n_layer)) {
    w.output_norm = load.vector("output_norm.weight");
    if (!c.tied_output) w.output = load.matrix("output.weight");
  }
  ex.synchronize();  // the uploads' sources are the caller's
  return w;
}

Matrix expert_matrix(const Matrix& stacked, int expert, int n_expert) {
  Matrix m;
  const std::size_t bytes = stacked.bytes.bytes() / std::size_t(n_expert);
  m.bytes = Buffer(stacked.bytes.as<std::uint8_t>() + std::size_t(expert) * bytes, bytes, nullptr);
  m.type = stacked.type;
  m.rows = stacked.rows / n_expert;
  m.cols = stacked.cols;
  m.quirks = stacked.quirks;
  return m;
}

namespace {

// A float32 weight buffer read back from executor memory.
std::vector<float> read_back(Executor& ex, const Buffer& buffer, std::int64_t n) {
  std::vector<float> out(static_cast<std::size_t>(n));
  ex.download(out.data(), buffer.data(), out.size() * sizeof(float));
  return out;
}

// A matrix decoded and rounded by the engine's dequantize kernel, read back.
std::vector<float> read_back(Executor& ex, const Matrix& m, ElemType precision) {
  Buffer values = ex.allocate(std::size_t(m.elements()) * sizeof(float));
  DequantArgs args{m.bytes.as<std::uint8_t>(), m.type, values.data(), m.elements()};
  args.quirks = m.quirks;
  args.round = precision;
  ex.dequantize(args);
  return read_back(ex, values, m.elements());
}

}  // namespace

void record_weight_taps(Executor& ex, const EngineWeights& w, ElemType precision, const GgufFile& model,
                        const ModelConfig& c, TraceWriter& trace, const WeightTapOptions& options) {
  // A fused tensor (phi3) is recorded whole, under its GGUF name, once its last part is read.
  std::vector<float> fused;
  auto put = [&](const std::string& name, const auto& weight) {
    if (!stages_read(c, name)) return;
    const auto part = fused_part(c, name);
    const GgufTensorInfo& t = *model.find_tensor(part ? part->fused : name);
    std::vector<float> values;
    if constexpr (std::is_same_v<std::decay_t<decltype(weight)>, Matrix>)
      values = read_back(ex, weight, precision);
    else
      values = read_back(ex, weight, part ? part->n_rows * t.ne[0] : static_cast<std::int64_t>(t.n_elements));
    fused.insert(fused.end(), values.begin(), values.end());
    if (fused.size() < t.n_elements) return;
    const auto total = static_cast<std::int64_t>(fused.size());
    const std::int64_t cols = t.ne.empty() ? total : static_cast<std::int64_t>(t.ne[0]);
    record_weight(trace, t.name, total / cols, cols, fused.data(), options);
    fused.clear();
  };
  put("token_embd.weight", w.token_embd);
  for (const auto& [name, factors] : w.rope_factors) put(name, factors);
  for (int l = 0; l < c.n_layer; ++l) {
    if (!c.holds(l)) continue;
    const std::string b = fmt::format("blk.{}.", l);
    const LayerWeights& L = w.layers[std::size_t(l)];
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

}  // namespace tapdiff::engine
