#include "engine/weights.hpp"

#include <fmt/format.h>

#include "engine/executor.hpp"
#include "engine/kernels/convert.hpp"
#include "engine/kernels/host_loop.hpp"
#include "model/fused_weights.hpp"
#include "tapdiff/weight_taps.hpp"

namespace tapdiff::engine {
namespace {

class Loader {
public:
  Loader(Executor& ex, const GgufFile& model, const ModelConfig& config, ElemType precision,
         const FaultSwitch& faults)
      : ex_(ex), model_(model), config_(config), precision_(precision), storage_(ex.weight_storage(precision)),
        faults_(faults) {}

  ElemType storage() const { return storage_; }

  // A matrix (or the embedding table) in the weight storage type, rounded to the precision.
  Buffer matrix(const std::string& name) {
    const GgufTensorInfo t = tensor(name);
    const auto n = static_cast<std::int64_t>(t.n_elements);
    Buffer values = decode(t);  // (n,) f32
    if (storage_ == ElemType::f32) {
      if (precision_ != ElemType::f32) ex_.round(RoundArgs{values.as<float>(), n, precision_});
      return values;
    }
    Buffer stored = ex_.allocate(std::size_t(n) * elem_size(storage_));
    ex_.convert(ConvertArgs{values.data(), ElemType::f32, stored.data(), storage_, n});
    ex_.synchronize();  // values is freed on return
    return stored;
  }

  // A matrix buffer of the right size that is never filled (fault weight-not-wired).
  Buffer unfilled_matrix(const std::string& name) {
    return ex_.allocate(std::size_t(tensor(name).n_elements) * elem_size(storage_));
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

  // The tensor's GGUF bytes, dequantized to float32 by the engine's kernel.
  Buffer decode(const GgufTensorInfo& t) {
    const auto n = static_cast<std::int64_t>(t.n_elements);
    Buffer values = ex_.allocate(std::size_t(n) * sizeof(float));
    DequantArgs args{t.data, t.type, values.as<float>(), n};
    args.q8_scale_as_bf16 = faults_.is(Fault::dequant_q8_scale);
    args.q8_quant_unsigned = faults_.is(Fault::dequant_q8_unsigned);
    args.q8_block_stride_quants = faults_.is(Fault::dequant_q8_block_stride);
    const bool quantized = is_block_quantized(t.type);
    // Fault dequant-missing: the quantized bytes go into a buffer of n 16-bit values (zero past
    // the tensor's n_bytes < 2n) that is decoded as F16.
    if (quantized && faults_.is(Fault::dequant_missing)) {
      Buffer as_f16 = ex_.allocate(std::size_t(n) * 2);
      ex_.upload(as_f16.data(), t.data, t.n_bytes);
      ex_.dequantize(DequantArgs{as_f16.as<std::uint8_t>(), GgmlType::F16, values.as<float>(), n});
      ex_.synchronize();  // as_f16 is freed on return
      return values;
    }
    // Fault tensor-bytes-truncated: only a placeholder byte size (elements / 2) is uploaded;
    // the rest of the zero-filled staging buffer is dequantized as it is.
    const std::uint64_t bytes = quantized && faults_.is(Fault::tensor_bytes_truncated)
                                    ? truncated_tensor_bytes(t)
                                    : t.n_bytes;
    Buffer raw;
    if (!ex_.host_visible() || bytes != t.n_bytes) {
      raw = ex_.allocate(t.n_bytes);
      ex_.upload(raw.data(), t.data, bytes);
      args.src = raw.as<std::uint8_t>();
    }
    ex_.dequantize(args);
    ex_.synchronize();  // raw is freed on return
    return values;
  }

  Executor& ex_;
  const GgufFile& model_;
  const ModelConfig& config_;
  ElemType precision_;
  ElemType storage_;
  FaultSwitch faults_;
};

}  // namespace

EngineWeights load_engine_weights(Executor& ex, const GgufFile& model, const ModelConfig& c,
                                  ElemType precision, const FaultSwitch& faults) {
  Loader load(ex, model, c, precision, faults);
  EngineWeights w;
  w.matrix_type = load.storage();
  w.token_embd = load.matrix("token_embd.weight");
  if (c.rope_freq_factors) w.rope_freqs = load.vector("rope_freqs.weight");
  for (int l = 0; l < c.n_layer; ++l) {
    const std::string b = fmt::format("blk.{}.", l);
    LayerWeights L;
    L.attn_norm = load.vector(b + "attn_norm.weight");
    L.wq = load.matrix(b + "attn_q.weight");
    // Fault fused-qkv-kv-swapped: the fused tensor split as [q | v | k].
    const bool swapped = c.fused_qkv && faults.is(Fault::fused_qkv_kv_swapped);
    L.wk = load.matrix(b + (swapped ? "attn_v.weight" : "attn_k.weight"));
    // Fault weight-not-wired: attn_v's buffer is allocated but its upload is missing.
    L.wv = faults.is(Fault::weight_not_wired) ? load.unfilled_matrix(b + "attn_v.weight")
                                              : load.matrix(b + (swapped ? "attn_k.weight" : "attn_v.weight"));
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
    L.w_gate = load.matrix(b + "ffn_gate.weight");
    L.w_up = load.matrix(b + "ffn_up.weight");
    L.w_down = load.matrix(b + "ffn_down.weight");
    if (c.post_norms) L.ffn_post_norm = load.vector(b + "post_ffw_norm.weight");
    w.layers.push_back(std::move(L));
  }
  w.output_norm = load.vector("output_norm.weight");
  if (!c.tied_output) w.output = load.matrix("output.weight");
  return w;
}

namespace {

// One weight buffer read back from executor memory and widened to float32.
std::vector<float> read_back(Executor& ex, const Buffer& buffer, std::int64_t n, ElemType type) {
  std::vector<float> out(static_cast<std::size_t>(n));
  if (type == ElemType::f32) {
    ex.download(out.data(), buffer.data(), out.size() * sizeof(float));
    return out;
  }
  std::vector<std::uint16_t> raw(out.size());
  ex.download(raw.data(), buffer.data(), raw.size() * sizeof(std::uint16_t));
  const ConvertArgs widen{raw.data(), type, out.data(), ElemType::f32, n};
  host_for(n, 4, [&](std::int64_t i) { convert_body(widen, i); });
  return out;
}

}  // namespace

void record_weight_taps(Executor& ex, const EngineWeights& w, const GgufFile& model,
                        const ModelConfig& c, TraceWriter& trace, const WeightTapOptions& options) {
  // A fused tensor (phi3) is recorded whole, under its GGUF name, once its last part is read.
  std::vector<float> fused;
  auto put = [&](const std::string& name, const Buffer& buffer, ElemType type) {
    const auto part = fused_part(c, name);
    const GgufTensorInfo& t = *model.find_tensor(part ? part->fused : name);
    const std::int64_t n = part ? part->n_rows * t.ne[0] : static_cast<std::int64_t>(t.n_elements);
    const std::vector<float> values = read_back(ex, buffer, n, type);
    fused.insert(fused.end(), values.begin(), values.end());
    if (fused.size() < t.n_elements) return;
    const auto total = static_cast<std::int64_t>(fused.size());
    const std::int64_t cols = t.ne.empty() ? total : static_cast<std::int64_t>(t.ne[0]);
    record_weight(trace, t.name, total / cols, cols, fused.data(), options);
    fused.clear();
  };
  const ElemType m = w.matrix_type, f32 = ElemType::f32;
  put("token_embd.weight", w.token_embd, m);
  if (c.rope_freq_factors) put("rope_freqs.weight", w.rope_freqs, f32);
  for (int l = 0; l < c.n_layer; ++l) {
    const std::string b = fmt::format("blk.{}.", l);
    const LayerWeights& L = w.layers[std::size_t(l)];
    put(b + "attn_norm.weight", L.attn_norm, f32);
    put(b + "attn_q.weight", L.wq, m);
    put(b + "attn_k.weight", L.wk, m);
    put(b + "attn_v.weight", L.wv, m);
    if (c.qkv_bias) {
      put(b + "attn_q.bias", L.bq, f32);
      put(b + "attn_k.bias", L.bk, f32);
      put(b + "attn_v.bias", L.bv, f32);
    }
    if (c.qk_norm) {
      put(b + "attn_q_norm.weight", L.q_norm, f32);
      put(b + "attn_k_norm.weight", L.k_norm, f32);
    }
    put(b + "attn_output.weight", L.wo, m);
    if (c.post_norms) put(b + "post_attention_norm.weight", L.attn_post_norm, f32);
    put(b + "ffn_norm.weight", L.ffn_norm, f32);
    put(b + "ffn_gate.weight", L.w_gate, m);
    put(b + "ffn_up.weight", L.w_up, m);
    put(b + "ffn_down.weight", L.w_down, m);
    if (c.post_norms) put(b + "post_ffw_norm.weight", L.ffn_post_norm, f32);
  }
  put("output_norm.weight", w.output_norm, f32);
  if (!c.tied_output) put("output.weight", w.output, m);
}

}  // namespace tapdiff::engine
