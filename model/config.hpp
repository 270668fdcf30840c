// ModelConfig: the hyperparameters a forward pass needs, derived from GGUF metadata for the
// `llama`, `qwen2`, `qwen3`, `gemma2`, `gemma3`, `phi3`, `qwen3moe`, `smollm3`, `mistral3`, `granite`
// and `granitemoe` architectures, and the weight names with the shapes each must have.
#pragma once

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "model/gguf.hpp"
#include "model/rope_scaling.hpp"

namespace tapdiff {

enum class Arch { llama, qwen2, qwen3, gemma2, gemma3, phi3, qwen3moe, smollm3, mistral3, granite, granitemoe };

// The gated FFN's activation: silu(gate) * up (SwiGLU), or gelu_tanh(gate) * up (GeGLU, Gemma).
enum class Activation { silu, gelu };

// How RoPE pairs the dimensions of a head it rotates together.
//   norm: adjacent pairs (x[2i], x[2i+1])        — GGML_ROPE_TYPE_NORMAL
//   neox: half-split pairs (x[i], x[i + n_rot/2]) — GGML_ROPE_TYPE_NEOX
// llama GGUFs use norm because llama.cpp's converter permutes the HF Q/K weight rows so that
// HF's rotate_half (half-split) becomes adjacent pairs; qwen2's converter does not permute,
// so qwen2 keeps HF's half-split pairing and must be rotated with neox.
enum class RopePairing { norm, neox };

struct ModelConfig {
  Arch arch = Arch::llama;
  int n_layer = 0;
  int n_embd = 0;
  int n_head = 0;
  int n_head_kv = 0;
  int head_dim = 0;   // n_embd / n_head unless `{arch}.attention.key_length` says otherwise
  int n_ff = 0;
  int n_vocab = 0;
  int n_ctx_train = 0;
  int n_rot = 0;      // dimensions of each head that RoPE rotates
  // Scores are q·k / sqrt(attn_scale_dim): head_dim, except Gemma 2 and 3 27B's n_embd / n_head
  // (query_pre_attn_scalar 144 and 168), which no GGUF key says: llama.cpp knows them by their
  // layer counts, 46 and 62 (its models/gemma2.cpp, gemma3.cpp), and so does tapdiff.
  int attn_scale_dim = 0;
  // Granite's multipliers, as llama.cpp applies them (0: none): the embedding row times
  // embedding_multiplier, each block's output (attn_output, ffn_down) times residual_multiplier
  // before its residual add, scores times attention_multiplier in place of 1 / sqrt(attn_scale_dim),
  // the logits divided by logit_scale.
  float embedding_multiplier = 0;
  float residual_multiplier = 0;
  float attention_multiplier = 0;
  float logit_scale = 0;
  float attn_scale() const {
    return attention_multiplier > 0 ? attention_multiplier : 1.0f / std::sqrt(float(attn_scale_dim));
  }
  float embedding_factor() const {
    if (embed_scale) return std::sqrt(float(n_embd));
    return embedding_multiplier > 0 ? embedding_multiplier : 1.0f;
  }
  float residual_factor() const { return residual_multiplier > 0 ? residual_multiplier : 1.0f; }
  float logit_factor() const { return logit_scale > 0 ? 1.0f / logit_scale : 1.0f; }
  // Llama 4's attention temperature (Mistral 3): the scores of the query at position p times
  // ln(floor(p / attn_temp_floor) + 1) · attn_temp_scale + 1, as llama.cpp computes it
  // (llm_graph_input_attn_temp): 1 below the floor, YaRN's original context. 0: none.
  float attn_temp_scale = 0;
  int attn_temp_floor = 0;
  float attn_temperature(std::int64_t p) const {
    if (attn_temp_scale == 0) return 1.0f;
    return float(std::log(std::floor(float(p) / float(attn_temp_floor)) + 1.0) * attn_temp_scale + 1.0);
  }
  float rope_freq_base = 10000.0f;
  RopePairing rope_pairing = RopePairing::norm;
  float rms_eps = 1e-5f;
  bool tied_output = false;  // no output.weight: the head reuses token_embd.weight
  bool qkv_bias = false;     // blk.*.attn_{q,k,v}.bias present (qwen2)
  bool qk_norm = false;      // RMSNorm per head on q and k before RoPE, blk.*.attn_{q,k}_norm (qwen3)
  // rope_freqs.weight present (Llama 3.1+): RoPE angle i divided by factor i, n_rot / 2 factors.
  bool rope_freq_factors = false;
  Activation activation = Activation::silu;
  bool embed_scale = false;  // the embedding row times sqrt(n_embd) enters the stream (Gemma)
  bool post_norms = false;   // RMSNorm on attn_output and ffn_down before each residual add (Gemma 2)
  float attn_softcap = 0;    // scores = c · tanh(scores / c) before the softmax; 0: none (Gemma 2)
  float final_softcap = 0;   // logits = c · tanh(logits / c); 0: none (Gemma 2)
  int sliding_window = 0;    // sliding layers attend to the last `sliding_window` positions; 0: none
  int swa_period = 0;        // layer l slides when l % swa_period < swa_period - 1 (Gemma 2: 2, the even layers)
  float rope_freq_base_swa = 0;  // the sliding layers' RoPE base (Gemma 3: 10000); 0: rope_freq_base
  // Layers without positional encoding (NoPE): layer l rotates q and k unless (l + 1) % nope_period
  // == 0 (SmolLM3: 4, layers 3, 7, 11, ...; no GGUF key says so, llama.cpp fixes it per
  // architecture). 0: every layer rotates.
  int nope_period = 0;
  RopeScaling rope_scaling;      // the global (non-sliding) layers'; the sliding ones' below
  bool rope_scaling_swa = true;  // whether the sliding layers are scaled too (Gemma 3: not)
  bool fused_qkv = false;      // blk.*.attn_qkv.weight holds q, k and v rows (phi3; model/fused_weights.hpp)
  bool fused_gate_up = false;  // blk.*.ffn_up.weight holds gate, then up rows (phi3)
  // Mixture of experts (qwen3moe; llama with an expert count: Mixtral): a router ffn_gate_inp
  // scores n_expert experts, the n_expert_used best get their softmax weights renormalized to
  // sum 1, and each runs its own SwiGLU FFN of width n_ff (expert_feed_forward_length) from the
  // [n_expert] stacked ffn_{gate,up,down}_exps tensors. 0: a dense FFN.
  int n_expert = 0;
  int n_expert_used = 0;
  // The stages the file holds (model/model_part.hpp): the embedding (-1), layers 0..n_layer-1,
  // the head (n_layer). A whole model holds -1..n_layer; a part only its own.
  int first_stage = -1;
  int last_stage = 0;

  bool whole() const { return first_stage == -1 && last_stage == n_layer; }
  bool holds(int stage) const { return stage >= first_stage && stage <= last_stage; }

  bool sliding(int layer) const { return sliding_window > 0 && layer % swa_period < swa_period - 1; }
  bool rotates(int layer) const { return nope_period == 0 || (layer + 1) % nope_period != 0; }
  float rope_base(int layer) const {
    return sliding(layer) && rope_freq_base_swa > 0 ? rope_freq_base_swa : rope_freq_base;
  }
  // The tensor of frequency factors a run of n_ctx positions divides its RoPE angles by: Llama
  // 3.1's rope_freqs, LongRoPE's long or short factors; nullptr without factors.
  const char* rope_factors_tensor(int n_ctx) const {
    if (rope_freq_factors) return "rope_freqs.weight";
    if (rope_scaling.type != RopeScalingType::longrope) return nullptr;
    return n_ctx > rope_scaling.n_ctx_orig ? "rope_factors_long.weight" : "rope_factors_short.weight";
  }
  // Every tensor of frequency factors the model has (the candidates of rope_factors_tensor).
  std::vector<const char*> rope_factors_tensors() const {
    if (rope_freq_factors) return {"rope_freqs.weight"};
    if (rope_scaling.type == RopeScalingType::longrope) return {"rope_factors_long.weight", "rope_factors_short.weight"};
    return {};
  }
  RopeScaling rope_scaling_of(int layer) const {
    return sliding(layer) && !rope_scaling_swa ? RopeScaling{} : rope_scaling;
  }
  int q_dim() const { return n_head * head_dim; }
  int kv_dim() const { return n_head_kv * head_dim; }
  int gqa_group() const { return n_head / n_head_kv; }  // query heads per kv head
  bool moe() const { return n_expert > 0; }
};

// What sets an architecture apart, as a description the forward passes read (no per-arch copies).
struct ArchTraits {
  Arch arch;
  const char* name;           // general.architecture
  RopePairing rope_pairing;
  bool qk_norm;
  Activation activation;
  bool embed_scale;
  bool post_norms;
  int swa_period;  // 0: no sliding-window layers
  float rope_freq_base_swa;  // the sliding layers' own RoPE base; 0: none
  bool rope_scaling_swa;     // whether a declared RoPE scaling applies to the sliding layers too
  bool fused_gate_up;        // ffn_up.weight is [gate; up], 2 * n_ff rows
  int nope_period = 0;       // ModelConfig::nope_period
  // llama.cpp refuses a partial rotation ("invalid n_rot"; the graphs built on llama's assert against one).
  bool whole_heads = false;
  bool experts = false;      // every layer a mixture of experts: the file must count them
  bool multipliers = false;  // Granite's four (ModelConfig::embedding_multiplier and after)
};
const ArchTraits& arch_traits(Arch arch);
const ArchTraits* find_arch(const std::string& name);  // nullptr for an architecture not supported
std::string supported_arch_names();                     // "llama, qwen2, qwen3"

std::string arch_name(Arch arch);
std::string rope_pairing_name(RopePairing pairing);
std::string rope_scaling_name(RopeScalingType type);  // "none", "linear", "yarn", "longrope": llama.cpp's words

// Reads and validates the config. Missing keys, wrong types and inconsistent values
// (n_head not divisible by n_head_kv, ...) throw InputError naming the file and the key.
ModelConfig load_model_config(const GgufFile& file);

struct WeightSpec {
  std::string name;                // GGUF tensor name, e.g. "blk.3.attn_q.weight"
  std::vector<std::int64_t> ne;    // expected dims, ggml order
};

// Every tensor the forward pass reads, with the shape it must have.
std::vector<WeightSpec> expected_weights(const ModelConfig& config);
// Checks every expected weight of the stages the file holds (all of them for a whole model;
// model/model_part.hpp) exists with its shape (InputError naming the tensor otherwise).
void validate_weights(const GgufFile& file, const ModelConfig& config);

}  // namespace tapdiff
