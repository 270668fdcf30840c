#include "model/config.hpp"
#include "model/model_part.hpp"

#include <cmath>
#include <fmt/format.h>
#include <limits>
#include <unordered_set>
#include <utility>

#include "model/dequantize.hpp"
#include "model/error.hpp"

namespace tapdiff {
namespace {

int positive_int(const GgufFile& f, const std::string& key, std::uint64_t v) {
  if (v < 1 || v > static_cast<std::uint64_t>(std::numeric_limits<int>::max()))
    throw InputError(f.path(), key, fmt::format("expected a positive 32-bit count, got {}", v));
  return static_cast<int>(v);
}

int required_int(const GgufFile& f, const std::string& key) {
  return positive_int(f, key, f.get_uint(key));
}

int optional_int(const GgufFile& f, const std::string& key, int fallback) {
  const auto v = f.get_uint_opt(key);
  return v ? positive_int(f, key, *v) : fallback;
}

// The fewest tensors a block of any supported architecture has: phi3's attn_norm, attn_qkv,
// attn_output, ffn_norm, ffn_up (gate and up) and ffn_down.
constexpr std::uint64_t kWeightsPerBlock = 6;

void require(bool ok, const GgufFile& f, const std::string& key, const std::string& problem) {
  if (!ok) throw InputError(f.path(), key, problem);
}

// `attention.sliding_window_pattern` as llama.cpp reads it: a period n (layer l slides when
// l % n < n - 1; 1: no layer does), or one bool per layer, taken where it is such a period.
int load_swa_period(const GgufFile& f, const std::string& p, int period, int n_layer) {
  const std::string key = p + "attention.sliding_window_pattern";
  const GgufValue* v = f.find(key);
  if (!v) return period;
  if (v->type() != GgufValueType::ARRAY) return optional_int(f, key, period);
  const auto& layers = v->as_array();
  require(v->array_type() == GgufValueType::BOOL && layers.size() == std::size_t(n_layer), f, key,
          fmt::format("expected {} bools, one per layer, got {}", n_layer, v->describe()));
  for (int n = 1; n <= n_layer; ++n) {
    bool periodic = true;
    for (int l = 0; l < n_layer && periodic; ++l) periodic = layers[l].as_bool() == (l % n < n - 1);
    if (periodic) return n;
  }
  throw InputError(f.path(), key,
                   "expected a periodic pattern (layer l sliding when l % n < n - 1 for some n); tapdiff runs no "
                   "other, got one that is not");
}

// `{arch}.rope.scaling.*` (and LongRoPE's factor tensors) as llama.cpp reads them: the type
// defaults to linear and the factor to 1 (no scaling), the older `rope.scale_linear` stands for the
// factor, "none" never scales. A setting tapdiff would have to guess at (YaRN's own magnitude rules,
// an attention factor without YaRN or LongRoPE) is refused rather than run as if it were absent.
RopeScaling load_rope_scaling(const GgufFile& f, const std::string& p, int n_ctx_train, Arch arch) {
  RopeScaling s;
  // LongRoPE (Phi-3.5, Phi-4-mini): llama.cpp goes by the factor tensors, whatever the type key says;
  // the converter writes the attention factor and the original context, no type.
  if (f.find_tensor("rope_factors_long.weight") || f.find_tensor("rope_factors_short.weight")) {
    require(arch == Arch::phi3, f, "tensor \"rope_factors_long.weight\"",
            fmt::format("expected LongRoPE factors in a phi3 model only (llama.cpp reads them for phi3), got {}",
                        arch_name(arch)));
    s.type = RopeScalingType::longrope;
    s.n_ctx_orig = optional_int(f, p + "rope.scaling.original_context_length", n_ctx_train);
    const std::string key = p + "rope.scaling.attn_factor";
    s.attn_factor = float(f.get_float_opt(key).value_or(1.0));
    require(std::isfinite(s.attn_factor) && s.attn_factor > 0, f, key,
            fmt::format("expected a finite value > 0, got {}", s.attn_factor));
    return s;
  }
  const std::string type_key = p + "rope.scaling.type";
  const std::string type = f.get_string_opt(type_key).value_or("linear");
  require(type == "none" || type == "linear" || type == "yarn", f, type_key,
          fmt::format("expected \"none\", \"linear\" or \"yarn\" (the RoPE scalings tapdiff implements), got \"{}\"",
                      type));
  std::string factor_key = p + "rope.scaling.factor";
  auto factor = f.get_float_opt(factor_key);
  if (!factor) {
    factor_key = p + "rope.scale_linear";
    factor = f.get_float_opt(factor_key);
  }
  const bool scaled = type != "none" && factor && *factor != 0.0 && *factor != 1.0;  // llama.cpp: 0 means 1
  // llama.cpp multiplies every rotation by attn_factor; transformers knows one under YaRN only.
  const std::string attn_key = p + "rope.scaling.attn_factor";
  const auto attn_factor = f.get_float_opt(attn_key);
  require(!attn_factor || *attn_factor == 1.0 || (scaled && type == "yarn"), f, attn_key,
          fmt::format("expected 1 without YaRN scaling (llama.cpp and transformers disagree on any other), got {}",
                      attn_factor.value_or(1.0)));
  if (!scaled) return s;
  require(std::isfinite(*factor) && *factor > 1.0, f, factor_key,
          fmt::format("expected a finite factor > 1 (the context's extension), got {}", *factor));
  s.type = type == "yarn" ? RopeScalingType::yarn : RopeScalingType::linear;
  s.factor = float(*factor);
  if (s.type != RopeScalingType::yarn) return s;
  s.n_ctx_orig = optional_int(f, p + "rope.scaling.original_context_length", n_ctx_train);
  for (const auto& [key, value] : {std::pair{p + "rope.scaling.yarn_beta_fast", &s.beta_fast},
                                   std::pair{p + "rope.scaling.yarn_beta_slow", &s.beta_slow},
                                   std::pair{p + "rope.scaling.attn_factor", &s.attn_factor}})
    if (const auto v = f.get_float_opt(key)) {
      require(std::isfinite(*v) && *v > 0, f, key, fmt::format("expected a finite value > 0, got {}", *v));
      *value = float(*v);
    }
  require(s.beta_fast > s.beta_slow, f, p + "rope.scaling.yarn_beta_fast",
          fmt::format("expected beta_fast > beta_slow {}, got {}", s.beta_slow, s.beta_fast));
  // Mistral 3's magnitude (HF's mscale_all_dim, written as yarn_log_multiplier), as llama.cpp
  // computes it (llama-context.cpp): cos and sin times get_mscale(factor, 1) / get_mscale(factor, m)
  // · attn_factor, get_mscale(f, m) = 1 + 0.1 m ln f; held as the attn_factor that the usual
  // (1 + 0.1 ln factor) multiplies into that.
  const std::string log_key = p + "rope.scaling.yarn_log_multiplier";
  if (const auto m = f.get_float_opt(log_key)) {
    require(std::isfinite(*m) && *m >= 0, f, log_key, fmt::format("expected a finite value >= 0, got {}", *m));
    if (*m != 0) s.attn_factor = float(s.attn_factor / (1 + 0.1 * *m * std::log(double(s.factor))));
  }
  // DeepSeek's and gpt-oss's own YaRN rules: refused rather than guessed.
  for (const char* key : {"rope.scaling.yarn_ext_factor", "rope.scaling.yarn_attn_factor"})
    require(f.find(p + key) == nullptr, f, p + key,
            "expected no such key (tapdiff implements YaRN with an extrapolation factor of 1 and attn_factor only)");
  return s;
}

// Granite's multipliers, read for granite and granitemoe only, as llama.cpp reads them: logit_scale
// is required, the others default to 0, which means none.
void load_granite_multipliers(const GgufFile& f, const std::string& p, ModelConfig& c) {
  const std::string logit_key = p + "logit_scale";
  const double logit = f.get_float(logit_key);
  require(std::isfinite(logit) && logit > 0, f, logit_key,
          fmt::format("expected a finite divisor > 0 of the logits, got {}", logit));
  c.logit_scale = float(logit);
  for (const auto& [key, value] : {std::pair{p + "embedding_scale", &c.embedding_multiplier},
                                   std::pair{p + "residual_scale", &c.residual_multiplier},
                                   std::pair{p + "attention.scale", &c.attention_multiplier}})
    if (const auto v = f.get_float_opt(key)) {
      require(std::isfinite(*v) && *v >= 0, f, key, fmt::format("expected a finite multiplier >= 0 (0: none), got {}", *v));
      *value = float(*v);
    }
}

}  // namespace

std::string rope_scaling_name(RopeScalingType type) {
  switch (type) {
    case RopeScalingType::linear: return "linear";
    case RopeScalingType::yarn: return "yarn";
    case RopeScalingType::longrope: return "longrope";
    case RopeScalingType::none: break;
  }
  return "none";
}

// qwen2 and qwen3 keep HF's half-split RoPE pairing (see RopePairing).
constexpr ArchTraits kArchs[] = {
    {Arch::llama, "llama", RopePairing::norm, false, Activation::silu, false, false, 0, 0, true, false, 0, true},
    {Arch::qwen2, "qwen2", RopePairing::neox, false, Activation::silu, false, false, 0, 0, true, false},
    {Arch::qwen3, "qwen3", RopePairing::neox, true, Activation::silu, false, false, 0, 0, true, false},
    // Gemma 2: GeGLU, embeddings scaled, post-norms, soft-capping, every other layer sliding. Its
    // converter stores the norm weights as 1 + w, so every norm is a plain RMSNorm here.
    {Arch::gemma2, "gemma2", RopePairing::neox, false, Activation::gelu, true, true, 2, 0, true, false},
    // Gemma 3: Gemma 2 with q/k norm, five sliding layers to one global, the sliding ones rotated
    // at base 10000 and never scaled (llama.cpp and HF fix both; the GGUF's freq_base and RoPE
    // scaling, linear 8 from Gemma 3 4B on, are the global layers').
    {Arch::gemma3, "gemma3", RopePairing::neox, true, Activation::gelu, true, true, 6, 10000.0f, false, false},
    // Phi-3: q, k, v in one attn_qkv tensor (or separate), gate and up in one ffn_up. llama.cpp
    // ignores its sliding_window ("Phi SWA is currently disabled"); so does tapdiff.
    {Arch::phi3, "phi3", RopePairing::neox, false, Activation::silu, false, false, 0, 0, true, true},
    // Qwen3-MoE: qwen3's attention, a mixture of experts in every layer (its expert count says so).
    {Arch::qwen3moe, "qwen3moe", RopePairing::neox, true, Activation::silu, false, false, 0, 0, true, false, 0, false, true},
    // SmolLM3: llama without RoPE in every fourth layer (llama.cpp's n_no_rope_layer_step).
    {Arch::smollm3, "smollm3", RopePairing::norm, false, Activation::silu, false, false, 0, 0, true, false, 4, true},
    // Mistral 3 (Ministral 3): llama with YaRN and Llama 4's attention temperature.
    {Arch::mistral3, "mistral3", RopePairing::norm, false, Activation::silu, false, false, 0, 0, true, false, 0, true},
    // Granite (3.x): llama with four multipliers (ModelConfig::embedding_multiplier and after); Granite
    // MoE: the same with a mixture of experts in every layer.
    {Arch::granite, "granite", RopePairing::norm, false, Activation::silu, false, false, 0, 0, true, false, 0, true, false,
     true},
    {Arch::granitemoe, "granitemoe", RopePairing::norm, false, Activation::silu, false, false, 0, 0, true, false, 0, true,
     true, true},
};

const ArchTraits& arch_traits(Arch arch) {
  for (const ArchTraits& t : kArchs)
    if (t.arch == arch) return t;
  return kArchs[0];
}

const ArchTraits* find_arch(const std::string& name) {
  for (const ArchTraits& t : kArchs)
    if (name == t.name) return &t;
  return nullptr;
}

std::string supported_arch_names() {
  std::string names;
  for (const ArchTraits& t : kArchs) names += (names.empty() ? "" : ", ") + std::string(t.name);
  return names;
}

std::string arch_name(Arch arch) { return arch_traits(arch).name; }

std::string rope_pairing_name(RopePairing pairing) {
  return pairing == RopePairing::norm ? "norm (adjacent pairs)" : "neox (half-split pairs)";
}

ModelConfig load_model_config(const GgufFile& f) {
  ModelConfig c;
  const std::string arch = f.get_string("general.architecture");
  const ArchTraits* traits = find_arch(arch);
  if (!traits)
    throw InputError(f.path(), "general.architecture",
                     fmt::format("expected one of {}, got \"{}\"", supported_arch_names(), arch));
  c.arch = traits->arch;
  c.rope_pairing = traits->rope_pairing;
  c.qk_norm = traits->qk_norm;
  c.activation = traits->activation;
  c.embed_scale = traits->embed_scale;
  c.post_norms = traits->post_norms;
  c.fused_gate_up = traits->fused_gate_up;
  c.nope_period = traits->nope_period;
  const std::string p = arch + ".";

  c.n_layer = required_int(f, p + "block_count");
  c.last_stage = c.n_layer;
  const std::optional<ModelPart> part = read_model_part(f, c.n_layer);
  // Checked before anything is built per block: a corrupt count must not cost 2^31 entries.
  const std::uint64_t n_tensors = f.tensors().size();
  require(part || std::uint64_t(c.n_layer) * kWeightsPerBlock + 2 <= n_tensors, f, p + "block_count",
          fmt::format("expected at most {} blocks (the file holds {} tensors; each block has at "
                      "least {} and the embedding and output norm 2 more), got {}",
                      n_tensors < 2 ? 0 : (n_tensors - 2) / kWeightsPerBlock, n_tensors,
                      kWeightsPerBlock, c.n_layer));
  c.n_embd = required_int(f, p + "embedding_length");
  c.n_head = required_int(f, p + "attention.head_count");
  c.n_head_kv = optional_int(f, p + "attention.head_count_kv", c.n_head);
  // A mixture of experts: any architecture whose file counts experts (llama's Mixtral too).
  c.n_expert = optional_int(f, p + "expert_count", 0);
  if (c.moe()) {
    c.n_expert_used = required_int(f, p + "expert_used_count");
    require(c.n_expert_used <= c.n_expert, f, p + "expert_used_count",
            fmt::format("expected at most expert_count {}, got {}", c.n_expert, c.n_expert_used));
    require(!traits->fused_gate_up && traits->activation == Activation::silu, f, p + "expert_count",
            fmt::format("expected no experts in a {} model (tapdiff runs experts with SwiGLU and separate "
                        "gate and up tensors)", arch));
    const std::string shared_key = p + "expert_shared_feed_forward_length";
    require(f.get_uint_opt(shared_key).value_or(0) == 0, f, shared_key,
            "expected none: tapdiff runs routed experts only, without a shared expert (Granite MoE shared, "
            "Qwen2-MoE and DeepSeek's are not supported)");
    // Each expert's width; feed_forward_length, where present, is a dense layer's.
    const auto expert_width = f.get_uint_opt(p + "expert_feed_forward_length");
    c.n_ff = expert_width ? positive_int(f, p + "expert_feed_forward_length", *expert_width)
                          : required_int(f, p + "feed_forward_length");
  } else {
    require(!traits->experts, f, p + "expert_count",
            fmt::format("expected a positive expert count (a {} model routes every layer to experts)", arch));
    c.n_ff = required_int(f, p + "feed_forward_length");
  }
  c.n_ctx_train = required_int(f, p + "context_length");
  require(c.n_head % c.n_head_kv == 0, f, p + "attention.head_count_kv",
          fmt::format("expected a divisor of head_count {}, got {}", c.n_head, c.n_head_kv));

  const bool has_key_length = f.find(p + "attention.key_length") != nullptr;
  if (!has_key_length)
    require(c.n_embd % c.n_head == 0, f, p + "attention.head_count",
            fmt::format("expected a divisor of embedding_length {}, got {}", c.n_embd, c.n_head));
  c.head_dim = optional_int(f, p + "attention.key_length", c.n_embd / c.n_head);
  require(std::int64_t(c.n_head) * c.head_dim <= std::numeric_limits<int>::max(), f,
          p + (has_key_length ? "attention.key_length" : "attention.head_count"),
          fmt::format("expected head_count × key_length to fit in 32 bits, got {} × {}", c.n_head,
                      c.head_dim));
  const bool gemma_27b = (c.arch == Arch::gemma2 && c.n_layer == 46) || (c.arch == Arch::gemma3 && c.n_layer == 62);
  c.attn_scale_dim = gemma_27b ? c.n_embd / c.n_head : c.head_dim;
  const int value_length = optional_int(f, p + "attention.value_length", c.head_dim);
  require(value_length == c.head_dim, f, p + "attention.value_length",
          fmt::format("expected key_length {} (separate value widths are not supported), got {}",
                      c.head_dim, value_length));

  c.n_rot = optional_int(f, p + "rope.dimension_count", c.head_dim);
  require(c.n_rot <= c.head_dim && c.n_rot % 2 == 0, f, p + "rope.dimension_count",
          fmt::format("expected an even count <= head_dim {}, got {}", c.head_dim, c.n_rot));
  require(c.n_rot == c.head_dim || !traits->whole_heads, f, p + "rope.dimension_count",
          fmt::format("expected head_dim {} ({} rotates whole heads; llama.cpp refuses any other count), got {}",
                      c.head_dim, arch, c.n_rot));
  // llama.cpp's default when the key is absent (stories260K has none).
  const double base = f.get_float_opt(p + "rope.freq_base").value_or(10000.0);
  require(std::isfinite(base) && base > 1.0, f, p + "rope.freq_base",
          fmt::format("expected a finite base > 1, got {}", base));
  c.rope_freq_base = static_cast<float>(base);
  c.rope_scaling = load_rope_scaling(f, p, c.n_ctx_train, c.arch);
  // Llama 4's temperature, as llama.cpp reads it for mistral3: its floor is YaRN's original context.
  const std::string temp_key = p + "attention.temperature_scale";
  if (const auto t = f.get_float_opt(temp_key)) {
    require(c.arch == Arch::mistral3, f, temp_key,
            fmt::format("expected no attention temperature in a {} model (llama.cpp reads it for mistral3)", arch));
    require(std::isfinite(*t), f, temp_key, fmt::format("expected a finite value, got {}", *t));
    c.attn_temp_scale = float(*t);
    c.attn_temp_floor = optional_int(f, p + "rope.scaling.original_context_length", c.n_ctx_train);
  }

  if (traits->multipliers) load_granite_multipliers(f, p, c);

  for (const auto& [key, cap] : {std::pair{p + "attn_logit_softcapping", &c.attn_softcap},
                                 std::pair{p + "final_logit_softcapping", &c.final_softcap}})
    if (const auto v = f.get_float_opt(key)) {
      require(std::isfinite(*v) && *v >= 0, f, key, fmt::format("expected a finite cap >= 0 (0: none), got {}", *v));
      *cap = float(*v);
    }
  if (traits->swa_period > 0) {
    c.sliding_window = optional_int(f, p + "attention.sliding_window", 0);
    c.swa_period = load_swa_period(f, p, traits->swa_period, c.n_layer);
    // The converter writes the sliding layers' base from HF's rope_parameters["sliding_attention"];
    // llama.cpp reads it for both Gemmas.
    const std::string swa_base = p + "rope.freq_base_swa";
    c.rope_freq_base_swa = traits->rope_freq_base_swa;
    if (const auto v = f.get_float_opt(swa_base)) {
      require(std::isfinite(*v) && *v > 1.0, f, swa_base, fmt::format("expected a finite base > 1, got {}", *v));
      c.rope_freq_base_swa = float(*v);
    }
    c.rope_scaling_swa = traits->rope_scaling_swa;
    require(c.sliding_window <= c.n_ctx_train, f, p + "attention.sliding_window",
            fmt::format("expected a window within the context length {}, got {}", c.n_ctx_train, c.sliding_window));
  }

  const double eps = f.get_float(p + "attention.layer_norm_rms_epsilon");
  require(std::isfinite(eps) && eps > 0 && eps < 1, f, p + "attention.layer_norm_rms_epsilon",
          fmt::format("expected a small positive epsilon, got {}", eps));
  c.rms_eps = static_cast<float>(eps);

  const GgufTensorInfo* embd = f.find_tensor("token_embd.weight");
  if (part) {
    c.n_vocab = part->n_vocab;
  } else {
    if (!embd)
      throw InputError(f.path(), "tensor \"token_embd.weight\"", "required tensor is missing");
    require(embd->ne.size() == 2 && embd->ne[0] == c.n_embd, f, "tensor \"token_embd.weight\"",
            fmt::format("expected shape [{}, n_vocab], got {}", c.n_embd, embd->shape_string()));
    c.n_vocab = static_cast<int>(embd->ne[1]);
  }
  if (const GgufValue* tokens = f.find("tokenizer.ggml.tokens")) {
    require(tokens->type() == GgufValueType::ARRAY && tokens->array_type() == GgufValueType::STRING,
            f, "tokenizer.ggml.tokens", "expected an array of strings");
    require(tokens->as_array().size() == static_cast<std::size_t>(c.n_vocab), f,
            "tokenizer.ggml.tokens",
            fmt::format("expected {} tokens (token_embd.weight rows), got {}", c.n_vocab,
                        tokens->as_array().size()));
  }

  if (part) {
    c.first_stage = part->first_stage;
    c.last_stage = part->last_stage;
    c.tied_output = part->tied_output;
    c.qkv_bias = part->qkv_bias;
    c.rope_freq_factors = part->rope_freq_factors;
    c.fused_qkv = part->fused_qkv;
  } else {
    c.tied_output = f.find_tensor("output.weight") == nullptr;
    c.qkv_bias = f.find_tensor("blk.0.attn_q.bias") != nullptr;
    c.rope_freq_factors = f.find_tensor("rope_freqs.weight") != nullptr;
    c.fused_qkv = f.find_tensor("blk.0.attn_qkv.weight") != nullptr;
  }
  validate_weights(f, c);
  for (const char* name : c.rope_factors_tensors()) {
    const GgufTensorInfo* t = f.find_tensor(name);
    if (t == nullptr) continue;
    const std::vector<float> factors = dequantize_tensor(*t);
    for (std::size_t i = 0; i < factors.size(); ++i)
      require(std::isfinite(factors[i]) && factors[i] > 0, f, fmt::format("tensor \"{}\"", name),
              fmt::format("expected finite frequency factors > 0 (each divides a RoPE angle), got {} at index {}",
                          factors[i], i));
  }
  return c;
}

std::vector<WeightSpec> expected_weights(const ModelConfig& c) {
  const std::int64_t embd = c.n_embd, q = c.q_dim(), kv = c.kv_dim(), ff = c.n_ff;
  std::vector<WeightSpec> w;
  w.push_back({"token_embd.weight", {embd, c.n_vocab}});
  for (const char* name : c.rope_factors_tensors()) w.push_back({name, {c.n_rot / 2}});
  for (int l = 0; l < c.n_layer; ++l) {
    const std::string b = fmt::format("blk.{}.", l);
    // ne = {in, out}: GGUF's [out, in] row-major matrices, ne[0] fastest.
    w.push_back({b + "attn_norm.weight", {embd}});
    if (c.fused_qkv) {
      w.push_back({b + "attn_qkv.weight", {embd, q + 2 * kv}});
    } else {
      w.push_back({b + "attn_q.weight", {embd, q}});
      w.push_back({b + "attn_k.weight", {embd, kv}});
      w.push_back({b + "attn_v.weight", {embd, kv}});
    }
    if (c.qkv_bias) {
      w.push_back({b + "attn_q.bias", {q}});
      w.push_back({b + "attn_k.bias", {kv}});
      w.push_back({b + "attn_v.bias", {kv}});
    }
    if (c.qk_norm) {
      w.push_back({b + "attn_q_norm.weight", {c.head_dim}});
      w.push_back({b + "attn_k_norm.weight", {c.head_dim}});
    }
    w.push_back({b + "attn_output.weight", {q, embd}});
    if (c.post_norms) w.push_back({b + "post_attention_norm.weight", {embd}});
    w.push_back({b + "ffn_norm.weight", {embd}});
    if (c.moe()) {
      const std::int64_t experts = c.n_expert;
      w.push_back({b + "ffn_gate_inp.weight", {embd, experts}});
      w.push_back({b + "ffn_gate_exps.weight", {embd, ff, experts}});
      w.push_back({b + "ffn_up_exps.weight", {embd, ff, experts}});
      w.push_back({b + "ffn_down_exps.weight", {ff, embd, experts}});
    } else if (c.fused_gate_up) {
      w.push_back({b + "ffn_up.weight", {embd, 2 * ff}});
    } else {
      w.push_back({b + "ffn_gate.weight", {embd, ff}});
      w.push_back({b + "ffn_up.weight", {embd, ff}});
    }
    if (!c.moe()) w.push_back({b + "ffn_down.weight", {ff, embd}});
    if (c.post_norms) w.push_back({b + "post_ffw_norm.weight", {embd}});
  }
  w.push_back({"output_norm.weight", {embd}});
  if (!c.tied_output) w.push_back({"output.weight", {embd, c.n_vocab}});
  return w;
}

void validate_weights(const GgufFile& file, const ModelConfig& config) {
  const std::vector<WeightSpec> expected = expected_weights(config);
  for (const auto& spec : expected)
    if (stages_read(config, spec.name)) file.tensor(spec.name, spec.ne);
  // A tensor no forward pass here reads (a bias llama.cpp would add, a norm of another
  // architecture) would make every run silently another model's.
  std::unordered_set<std::string> names;
  for (const auto& spec : expected) names.insert(spec.name);
  for (const GgufTensorInfo& t : file.tensors())
    if (names.count(t.name) == 0)
      throw InputError(file.path(), fmt::format("tensor \"{}\"", t.name),
                       fmt::format("expected no such tensor (tapdiff's {} forward pass would not read it, and a "
                                   "run would silently compute another model)",
                                   arch_name(config.arch)));
}

}  // namespace tapdiff
