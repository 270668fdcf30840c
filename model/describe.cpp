#include "model/describe.hpp"

#include <algorithm>
#include <fmt/format.h>

#include "model/config.hpp"
#include "model/error.hpp"

namespace tapdiff {
namespace {

constexpr std::size_t kArrayPreview = 8;

nlohmann::json value_json(const GgufValue& v) {
  if (v.is_unsigned()) return v.as_uint();
  if (v.is_signed()) return v.as_int();
  if (v.is_float()) return v.as_float();
  switch (v.type()) {
    case GgufValueType::BOOL: return v.as_bool();
    case GgufValueType::STRING: return v.as_string();
    case GgufValueType::ARRAY: {
      const auto& items = v.as_array();
      nlohmann::json head = nlohmann::json::array();
      for (std::size_t i = 0; i < std::min(items.size(), kArrayPreview); ++i)
        head.push_back(value_json(items[i]));
      return {{"type", std::string(gguf_value_type_name(v.array_type()))},
              {"count", items.size()},
              {"head", head}};
    }
    default: return nullptr;
  }
}

std::string value_text(const GgufValue& v) {
  if (v.type() != GgufValueType::ARRAY) return v.describe();
  const auto& items = v.as_array();
  std::string s = v.describe() + " [";
  for (std::size_t i = 0; i < std::min(items.size(), kArrayPreview); ++i) {
    if (i) s += ", ";
    const GgufValue& item = items[i];
    s += item.type() == GgufValueType::STRING ? fmt::format("\"{}\"", item.as_string())
         : item.type() == GgufValueType::ARRAY ? item.describe()
                                                : item.describe().substr(item.describe().find(' ') + 1);
  }
  if (items.size() > kArrayPreview) s += ", …";
  return s + "]";
}

// The architecture's extras, one clause each; "" for a model with none.
std::string extras_text(const ModelConfig& c) {
  std::vector<std::string> parts;
  if (c.fused_qkv) parts.push_back("q, k and v fused in attn_qkv");
  if (c.fused_gate_up) parts.push_back("gate and up fused in ffn_up");
  if (c.qk_norm) parts.push_back("q/k RMSNorm per head");
  if (c.moe())
    parts.push_back(fmt::format("a mixture of {} experts, {} per token (ffn_gate_inp routes; ffn_*_exps)", c.n_expert,
                                c.n_expert_used));
  if (c.rope_freq_factors) parts.push_back("RoPE frequency factors (rope_freqs.weight)");
  if (c.activation == Activation::gelu) parts.push_back("GeGLU");
  if (c.embed_scale) parts.push_back("embeddings times sqrt(n_embd)");
  if (c.post_norms) parts.push_back("post-attention and post-FFN norms");
  if (c.attn_scale_dim != c.head_dim)
    parts.push_back(fmt::format("scores scaled by 1/sqrt(n_embd / n_head) = 1/sqrt({}) (Gemma 27B, by its {} layers)",
                                c.attn_scale_dim, c.n_layer));
  if (c.embedding_multiplier > 0) parts.push_back(fmt::format("embeddings times {:g}", c.embedding_multiplier));
  if (c.residual_multiplier > 0)
    parts.push_back(fmt::format("each block's output times {:g} before its residual add", c.residual_multiplier));
  if (c.attention_multiplier > 0)
    parts.push_back(fmt::format("scores scaled by {:g} (attention.scale, in place of 1/sqrt(head_dim))",
                                c.attention_multiplier));
  if (c.logit_scale > 0) parts.push_back(fmt::format("logits divided by {:g}", c.logit_scale));
  if (c.attn_temp_scale != 0)
    parts.push_back(fmt::format("attention temperature ln(floor(p / {}) + 1) x {:g} + 1 on the scores (Llama 4's)",
                                c.attn_temp_floor, c.attn_temp_scale));
  if (c.attn_softcap > 0) parts.push_back(fmt::format("attention soft-cap {:g}", c.attn_softcap));
  if (c.final_softcap > 0) parts.push_back(fmt::format("logit soft-cap {:g}", c.final_softcap));
  if (c.sliding_window > 0)
    parts.push_back(c.swa_period == 2 ? fmt::format("sliding window {} on the even layers", c.sliding_window)
                                      : fmt::format("sliding window {} on layers l with l % {} < {}", c.sliding_window,
                                                    c.swa_period, c.swa_period - 1));
  if (c.rope_freq_base_swa > 0 && c.sliding_window > 0)
    parts.push_back(fmt::format("sliding layers' RoPE base {:g}", c.rope_freq_base_swa));
  if (c.nope_period > 0)
    parts.push_back(fmt::format("no RoPE in every {}th layer (NoPE: layers {}, {}, ...)", c.nope_period,
                                c.nope_period - 1, 2 * c.nope_period - 1));
  if (const RopeScaling& s = c.rope_scaling; s.type == RopeScalingType::longrope) {
    parts.push_back(fmt::format("LongRoPE (rope_factors_short, rope_factors_long past an original context of {}), "
                                "attn_factor {:g}",
                                s.n_ctx_orig, s.attn_factor));
  } else if (s.scales()) {
    std::string text = fmt::format("RoPE scaling {} x{:g}", rope_scaling_name(s.type), s.factor);
    if (s.type == RopeScalingType::yarn)
      text += fmt::format(" (original context {}, beta_fast {:g}, beta_slow {:g}, attn_factor {:g})", s.n_ctx_orig,
                          s.beta_fast, s.beta_slow, s.attn_factor);
    if (c.sliding_window > 0 && !c.rope_scaling_swa) text += " on the global layers only";
    parts.push_back(text);
  }
  std::string text;
  for (const auto& p : parts) text += (text.empty() ? "" : "; ") + p;
  return text;
}

}  // namespace

nlohmann::json config_json(const ModelConfig& c) {
  return {{"arch", arch_name(c.arch)},
          {"n_layer", c.n_layer},
          {"n_embd", c.n_embd},
          {"n_head", c.n_head},
          {"n_head_kv", c.n_head_kv},
          {"head_dim", c.head_dim},
          {"n_ff", c.n_ff},
          {"n_vocab", c.n_vocab},
          {"n_ctx_train", c.n_ctx_train},
          {"n_rot", c.n_rot},
          {"attn_scale_dim", c.attn_scale_dim},
          {"attn_temp_scale", c.attn_temp_scale},
          {"attn_temp_floor", c.attn_temp_floor},
          {"embedding_multiplier", c.embedding_multiplier},
          {"residual_multiplier", c.residual_multiplier},
          {"attention_multiplier", c.attention_multiplier},
          {"logit_scale", c.logit_scale},
          {"rope_freq_base", c.rope_freq_base},
          {"rope_pairing", c.rope_pairing == RopePairing::norm ? "norm" : "neox"},
          {"rms_eps", c.rms_eps},
          {"tied_output", c.tied_output},
          {"qkv_bias", c.qkv_bias},
          {"qk_norm", c.qk_norm},
          {"rope_freq_factors", c.rope_freq_factors},
          {"activation", c.activation == Activation::gelu ? "gelu" : "silu"},
          {"embed_scale", c.embed_scale},
          {"post_norms", c.post_norms},
          {"attn_softcap", c.attn_softcap},
          {"final_softcap", c.final_softcap},
          {"sliding_window", c.sliding_window},
          {"swa_period", c.swa_period},
          {"rope_freq_base_swa", c.rope_freq_base_swa},
          {"nope_period", c.nope_period},
          {"rope_scaling",
           {{"type", rope_scaling_name(c.rope_scaling.type)},
            {"factor", c.rope_scaling.factor},
            {"n_ctx_orig", c.rope_scaling.n_ctx_orig},
            {"beta_fast", c.rope_scaling.beta_fast},
            {"beta_slow", c.rope_scaling.beta_slow},
            {"attn_factor", c.rope_scaling.attn_factor},
            {"sliding_layers", c.rope_scaling_swa}}},
          {"fused_qkv", c.fused_qkv},
          {"fused_gate_up", c.fused_gate_up},
          {"n_expert", c.n_expert},
          {"n_expert_used", c.n_expert_used}};
}

nlohmann::json describe_gguf_json(const GgufFile& file) {
  nlohmann::json j;
  j["path"] = file.path();
  j["gguf_version"] = file.version();
  j["alignment"] = file.alignment();
  j["data_offset"] = file.data_offset();
  j["file_size"] = file.file_size();
  nlohmann::json meta = nlohmann::json::object();
  for (const auto& [key, value] : file.metadata()) meta[key] = value_json(value);
  j["metadata"] = meta;
  nlohmann::json tensors = nlohmann::json::array();
  std::uint64_t n_params = 0;
  for (const auto& t : file.tensors()) {
    tensors.push_back({{"name", t.name},
                       {"type", std::string(ggml_type_name(t.type))},
                       {"ne", t.ne},
                       {"offset", t.offset},
                       {"bytes", t.n_bytes}});
    n_params += t.n_elements;
  }
  j["tensors"] = tensors;
  j["n_parameters"] = n_params;
  try {
    j["config"] = config_json(load_model_config(file));
  } catch (const InputError& e) {
    j["config"] = nullptr;
    j["config_error"] = e.what();
  }
  return j;
}

std::string describe_gguf_text(const GgufFile& file) {
  std::string out = fmt::format("{}\n  GGUF v{}, {} bytes, alignment {}, data at offset {}\n\n",
                                file.path(), file.version(), file.file_size(), file.alignment(),
                                file.data_offset());
  out += fmt::format("metadata ({} keys)\n", file.metadata().size());
  std::size_t key_width = 0;
  for (const auto& kv : file.metadata()) key_width = std::max(key_width, kv.first.size());
  for (const auto& [key, value] : file.metadata())
    out += fmt::format("  {:<{}}  {}\n", key, key_width, value_text(value));

  std::size_t name_width = 4;
  std::uint64_t n_params = 0, n_bytes = 0;
  for (const auto& t : file.tensors()) {
    name_width = std::max(name_width, t.name.size());
    n_params += t.n_elements;
    n_bytes += t.n_bytes;
  }
  out += fmt::format("\ntensors ({}, {} parameters, {} bytes)\n", file.tensors().size(), n_params,
                     n_bytes);
  out += fmt::format("  {:<{}}  {:<5}  {:<18}  {:>12}  {:>12}\n", "name", name_width, "type",
                     "shape (ne)", "offset", "bytes");
  for (const auto& t : file.tensors())
    out += fmt::format("  {:<{}}  {:<5}  {:<18}  {:>12}  {:>12}\n", t.name, name_width,
                       ggml_type_name(t.type), t.shape_string(), t.offset, t.n_bytes);

  out += "\nconfig\n";
  try {
    const ModelConfig c = load_model_config(file);
    out += fmt::format(
        "  arch {}, {} layers, n_embd {}, n_head {} (kv {}, head_dim {}), n_ff {}, n_vocab {}\n"
        "  rope: {} of {} dims per head, base {}; rms_eps {}; n_ctx_train {}\n"
        "  output head {}; q/k/v bias {}\n",
        arch_name(c.arch), c.n_layer, c.n_embd, c.n_head, c.n_head_kv, c.head_dim, c.n_ff,
        c.n_vocab, rope_pairing_name(c.rope_pairing), c.n_rot, c.rope_freq_base, c.rms_eps,
        c.n_ctx_train, c.tied_output ? "tied to token_embd.weight" : "output.weight",
        c.qkv_bias ? "yes" : "no");
    if (const std::string extras = extras_text(c); !extras.empty()) out += "  " + extras + "\n";
  } catch (const InputError& e) {
    out += fmt::format("  not a supported model: {}\n", e.what());
  }
  return out;
}

}  // namespace tapdiff
