#include "engine/faults.hpp"

#include <algorithm>
#include <fmt/format.h>
#include <stdexcept>

namespace tapdiff::engine {
namespace {

// One fault per entry: name, description, seed bug, class, code location, what a run needs.
// clang-format off
const std::vector<FaultSpec> kFaults = {
    {Fault::kv_stuck_length, "kv-stuck-length",
     "cache length never advances: decode writes slot 0 and attends to the current token only",
     "a KV cache whose length update was lost in a refactor; prefill still looks right",
     "kv-cache", "engine/kv_cache.cpp: KvCache::advance", "n_predict >= 2 (a decode step)"},
    {Fault::kv_append_offset, "kv-append-offset",
     "append offset counts 1 element per cached row instead of one row (n_head_kv*head_dim)",
     "a cache write cursor kept in elements but advanced in rows",
     "kv-cache", "engine/kv_cache.cpp: KvCache::append_offset", "n_predict >= 2 (a decode step)"},
    {Fault::kv_unsliced, "kv-unsliced",
     "decode attention reads the whole cache capacity, not the valid length",
     "an attention call passed the cache's capacity where the sequence length belonged",
     "kv-cache", "engine/kv_cache.cpp: KvCache::visible_keys", "n_predict >= 2 (a decode step)"},
    {Fault::first_token_twice, "first-token-twice",
     "generation loop puts the first generated token into the sequence (and feeds it) twice",
     "a loop that appends the prefill's token again when entering the decode loop",
     "token-sequence", "engine/generate.cpp: the generation loop", "n_predict >= 2"},
    {Fault::prefill_rope_same_position, "prefill-rope-same-position",
     "batched prefill rotates every prompt token at the start position",
     "a RoPE call given the batch's start position instead of a per-token positions array",
     "rope", "engine/forward.cpp: the RoPE call", "a prompt of >= 2 tokens"},
    {Fault::rope_wrong_pairing, "rope-wrong-pairing",
     "RoPE pairs dimensions the other way: adjacent (NORM) for NEOX models and vice versa",
     "llama-style rotation applied to a qwen2/neox model (or the reverse) after a port",
     "rope", "engine/forward.cpp: the RoPE call", "n_rot >= 4"},
    {Fault::rope_wrong_base, "rope-wrong-base",
     "RoPE frequency base fixed at 10000 instead of the model's rope.freq_base",
     "a hard-coded llama-2 base used for a model trained with another (qwen2 1e6, llama-3 5e5)",
     "rope", "engine/forward.cpp: the RoPE call", "a model whose rope.freq_base is not 10000"},
    {Fault::weights_transposed, "weights-transposed",
     "the square attn_output projection multiplied with W transposed (CUBLAS_OP_N, same ld)",
     "a GEMM op flag flipped on a square weight, where the shapes still line up",
     "matmul-layout", "engine/forward.cpp: the attn_output GEMM call",
     "a square attn_output (n_head*head_dim == n_embd)"},
    {Fault::lm_head_op_n, "lm-head-op-n",
     "output projection with CUBLAS_OP_N and lda = n_vocab instead of OP_T with lda = n_embd",
     "the output head's GEMM written for a column-major weight the GGUF does not have",
     "matmul-layout", "engine/forward.cpp: the output head GEMM call", ""},
    {Fault::bias_dropped, "bias-dropped", "q/k/v projection biases not added",
     "a llama code path reused for qwen2, which has q/k/v biases", "bias",
     "engine/forward.cpp: after the q/k/v GEMMs", "a model with q/k/v biases (qwen2)"},
    {Fault::bias_misread, "bias-misread",
     "q/k/v bias staged as bf16 and decoded as f16 (the bytes read as the wrong type)",
     "a bf16/fp16 mix-up in the loader's 16-bit staging of 1-D tensors", "bias",
     "engine/weights.cpp: Loader::bias", "a model with q/k/v biases (qwen2)"},
    {Fault::dequant_q8_scale, "dequant-q8-scale",
     "Q8_0 block scale (fp16) decoded as bf16",
     "a dequantization kernel reading the block scale through the wrong 16-bit float type",
     "dequantization", "engine/kernels/dequant.hpp: q8_0", "a Q8_0 weight"},
    {Fault::attn_scale, "attn-scale",
     "attention scores scaled by 1/head_dim instead of 1/sqrt(head_dim)",
     "a softmax scale computed as 1/d", "attention-scale",
     "engine/forward.cpp: the attention call", "head_dim > 1"},
    {Fault::causal_mask_off, "causal-mask-off",
     "batched prefill attends to later prompt positions (no causal mask)",
     "a prefill attention call with the causal flag off", "attention-mask",
     "engine/forward.cpp: the attention call", "a prompt of >= 2 tokens"},
    {Fault::gqa_head_map, "gqa-head-map",
     "query head h reads kv head h % n_head_kv instead of h / (n_head / n_head_kv)",
     "a GQA head mapping written for interleaved heads", "gqa-mapping",
     "engine/kernels/attention.hpp: kv head of a query head", "1 < n_head_kv < n_head"},
    {Fault::norm_weight_dropped, "norm-weight-dropped", "RMSNorm weight not applied (all norms)",
     "a norm kernel called with a null weight after a loader change", "normalization",
     "engine/forward.cpp: Forward::norm", ""},
    {Fault::dequant_missing, "dequant-missing",
     "quantized weight bytes used as if they were f16: the dequantization kernel is skipped",
     "a loader that copied every tensor's bytes into a 16-bit weight buffer, quantized or not",
     "dequantization", "engine/weights.cpp: Loader::decode", "a block-quantized weight"},
    {Fault::tensor_bytes_truncated, "tensor-bytes-truncated",
     "quantized tensors read with a placeholder byte size (elements / 2); the tail stays zero",
     "a loader computing a tensor's byte size as n/2 (a Q4 guess) for every quantized type",
     "weight-loading", "engine/weights.cpp: Loader::decode", "a block-quantized weight"},
    {Fault::weight_not_wired, "weight-not-wired",
     "the attn_v weight buffer is allocated but never filled (all zeros)",
     "a loader refactor that dropped one tensor's upload; its buffer stays zero-initialized",
     "weight-loading", "engine/weights.cpp: load_engine_weights", ""},
    {Fault::rope_position_ignored, "rope-position-ignored",
     "every step rotates at position 0, prefill and decode alike",
     "a RoPE call given a zero-initialized positions array that is never filled",
     "rope", "engine/forward.cpp: Forward::step, the RoPE positions",
     "a position > 0 (prompt >= 2 tokens or n_predict >= 2)"},
    {Fault::kv_not_written_decode, "kv-not-written-decode",
     "decode steps attend over the cache but never append their own K/V",
     "a decode path that lost its cache write when prefill and decode were split",
     "kv-cache", "engine/forward.cpp: the K/V append", "n_predict >= 2 (a decode step)"},
    {Fault::ffn_dim_wrong, "ffn-dim-wrong",
     "the FFN width taken from n_embd instead of n_ff (gate, up and down all use it)",
     "a config field mix-up: feed_forward_length read from the embedding length",
     "shape", "engine/forward.cpp: Forward::ffn_block", "n_ff > n_embd"},
    {Fault::token_id_bookkeeping, "token-id-bookkeeping",
     "the generation loop records (and feeds) the step index instead of the chosen token id",
     "a loop variable pushed where the sampled token belonged",
     "token-sequence", "engine/generate.cpp: the generation loop", "n_predict >= 1"},
    {Fault::ffn_norm_loads_attn_norm, "ffn-norm-loads-attn-norm",
     "each layer's ffn_norm weight is loaded from the attn_norm tensor",
     "a copy-pasted loader line whose tensor name was not edited",
     "weight-loading", "engine/weights.cpp: load_engine_weights", ""},
    {Fault::kv_layer_shared, "kv-layer-shared",
     "every layer reads and writes layer 0's K/V cache buffers",
     "a per-layer cache accessor that lost its layer index; each layer overwrites the others",
     "kv-cache", "engine/kv_cache.cpp: KvCache::k / KvCache::v",
     "n_layer >= 2 and n_predict >= 2 (a decode step)"},
    {Fault::attn_keys_off_by_one, "attn-keys-off-by-one",
     "attention reads one key fewer than valid: the step's last position misses its own key",
     "a key count computed as the last position's index instead of the number of keys",
     "attention-mask", "engine/forward.cpp: the attention call's n_keys",
     "a prompt of >= 2 tokens"},
    {Fault::softmax_sum_all_keys, "softmax-sum-all-keys",
     "softmax over all n_keys cache rows, the causal mask applied after it (no renormalization)",
     "a softmax bounded by the key count instead of the masked length; masking done afterwards",
     "softmax", "engine/kernels/attention.hpp: the softmax sum", "a prompt of >= 2 tokens"},
    {Fault::norm_weight_plus_one, "norm-weight-plus-one",
     "RMSNorm multiplies by (1 + w) instead of w (all norms)",
     "Gemma's (1 + weight) norm convention applied to a model that stores the weight itself",
     "normalization", "engine/kernels/rmsnorm.hpp: the weight multiply", ""},
    {Fault::final_norm_skipped, "final-norm-skipped",
     "the output head reads the residual stream: the final RMSNorm is skipped",
     "a model port that dropped output_norm before the lm head",
     "normalization", "engine/forward.cpp: Forward::output_head", ""},
    {Fault::resid_attn_dropped, "resid-attn-dropped",
     "the attention block's residual add overwrites the stream with attn_output (x = y)",
     "an add kernel called in its copy mode (x = y instead of x += y) at one call site",
     "residual", "engine/forward.cpp: the attention residual add", ""},
    {Fault::ffn_gelu_for_silu, "ffn-gelu-for-silu",
     "the FFN activation is gelu(gate) * up (tanh approximation) instead of silu(gate) * up",
     "a GeGLU activation kernel reused for a SwiGLU model", "activation",
     "engine/kernels/silu_mul.hpp: the activation", ""},
    {Fault::ffn_gate_up_swapped, "ffn-gate-up-swapped",
     "the FFN activation computes silu(up) * gate instead of silu(gate) * up",
     "gate and up operands passed in the wrong order to the fused SwiGLU kernel", "activation",
     "engine/forward.cpp: the silu_mul call", ""},
    {Fault::attn_v_aliases_k, "attn-v-aliases-k",
     "the V projection writes into the K activation buffer (same shape): K is overwritten by V",
     "an activation pointer copy-pasted from the line above (v = act.k)", "buffer",
     "engine/forward.cpp: Forward::attention_block, the v buffer", ""},
    {Fault::lm_head_stale_row, "lm-head-stale-row",
     "the head reads the norm row of the prefill's last position at every decode step",
     "a head input offset computed for the prefill batch and reused by decode steps "
     "(like a graph captured once): decode reads a stale row",
     "buffer", "engine/forward.cpp: Forward::output_head, the head's input row",
     "a prompt of >= 2 tokens and n_predict >= 2 (a decode step)"},
    {Fault::embed_scaled, "embed-scaled",
     "the embedding rows are multiplied by sqrt(n_embd)",
     "Gemma's embedding scale applied to a model that has none", "embedding",
     "engine/kernels/embed.hpp: the embedding gather", ""},
    {Fault::dequant_q8_unsigned, "dequant-q8-unsigned",
     "Q8_0 quants read as uint8 instead of int8: negative quants become q + 256",
     "a dequantization kernel that loads the signed quant bytes through an unsigned type",
     "dequantization", "engine/kernels/dequant.hpp: q8_0", "a Q8_0 weight"},
    {Fault::rope_q_not_rotated, "rope-q-not-rotated",
     "RoPE rotates K only; Q is left unrotated",
     "the Q half of a RoPE call pair lost when the two calls were merged", "rope",
     "engine/forward.cpp: the RoPE call", "a position > 0 (prompt >= 2 tokens or n_predict >= 2)"},
    {Fault::rope_freq_n_embd, "rope-freq-n-embd",
     "RoPE frequencies base^(-2i/n_embd) instead of base^(-2i/n_rot): the exponent divided by the "
     "model width",
     "a RoPE helper given the model's hidden size where the rotary (head) dimension belonged",
     "rope", "engine/forward.cpp: the RoPE call (engine/kernels/rope.hpp: the frequency)",
     "n_embd != n_rot and a position > 0"},
    {Fault::norm_mean_centered, "norm-mean-centered",
     "every RMSNorm subtracts the row mean first (a LayerNorm without bias): (x - mean) / std * w",
     "a LayerNorm kernel reused for an RMSNorm model when norms were unified",
     "normalization", "engine/kernels/rmsnorm.hpp: the row statistics", ""},
    {Fault::attn_out_heads_reversed, "attn-out-heads-reversed",
     "the attention kernel stores head h's output in slot n_head-1-h of attn.out",
     "an output index computed from a head loop that was flipped to count down",
     "buffer", "engine/kernels/attention.hpp: the output row of a head", "n_head >= 2"},
    {Fault::kv_decode_write_late, "kv-decode-write-late",
     "decode appends each K/V row one slot late (slot p+1); slot p keeps what was there",
     "a decode write cursor pre-incremented where it should be post-incremented",
     "kv-cache", "engine/kv_cache.cpp: KvCache::append_offset", "n_predict >= 2 (a decode step)"},
    {Fault::resid_attn_doubled, "resid-attn-doubled",
     "in every layer after the first the attention output is added to the stream twice",
     "a fused add enabled for layers > 0 while the explicit residual add stayed in place",
     "residual", "engine/forward.cpp: the attention residual add", "n_layer >= 2"},
    {Fault::embed_position_for_token, "embed-position-for-token",
     "the embedding gather indexes the table with the position ids instead of the token ids",
     "the positions buffer (same type, same length) passed where the token ids belonged",
     "embedding", "engine/forward.cpp: the embedding gather's ids",
     "prompt + n_predict <= n_vocab"},
    {Fault::dequant_q8_block_stride, "dequant-q8-block-stride",
     "Q8_0 blocks addressed with a stride of 32 bytes (the quants) instead of 34 (scale + quants)",
     "a block size computed from the quant count, forgetting the 2-byte fp16 scale",
     "dequantization", "engine/kernels/dequant.hpp: q8_0 block address", "a Q8_0 weight"},
    {Fault::ffn_up_op_n, "ffn-up-op-n",
     "ffn_up GEMM with CUBLAS_OP_N and lda = n_ff: W read as a column-major [n_ff, n_embd] matrix",
     "an FFN GEMM written for a column-major weight the GGUF does not have",
     "matmul-layout", "engine/forward.cpp: the ffn_up GEMM call", ""},
    {Fault::ffn_down_race, "ffn-down-race",
     "ffn_down's reduction over n_ff keeps a timing-dependent prefix of its terms: two runs differ",
     "a split-K GEMM whose second partial sum is stored without an atomic add, so the last writer wins",
     "nondeterministic", "engine/forward.cpp: the ffn_down GEMM call", "n_ff >= 2"},
    {Fault::qk_norm_dropped, "qk-norm-dropped",
     "the per-head RMSNorm on q and k (attn_q_norm, attn_k_norm) skipped before RoPE",
     "a qwen2 code path reused for qwen3, whose only attention change is that norm", "normalization",
     "engine/forward.cpp: after the q/k/v GEMMs", "a model with q/k norm (qwen3)"},
    {Fault::rope_freq_factors_ignored, "rope-freq-factors-ignored",
     "RoPE run without the model's frequency factors (rope_freqs.weight)",
     "a Llama 2 code path running Llama 3.1, whose long-context scaling lives in those factors", "rope",
     "engine/forward.cpp: the RoPE call", "a model with rope_freqs.weight (Llama 3.1+)"},
    {Fault::attn_softcap_missing, "attn-softcap-missing",
     "attention scores not soft-capped (c * tanh(s / c)) before the softmax",
     "Gemma 2 on an attention kernel without soft-capping, as in the first ports of it", "softcap",
     "engine/forward.cpp: the attention call", "a model with attn_logit_softcapping (gemma2)"},
    {Fault::rope_local_base_ignored, "rope-local-base-ignored",
     "sliding-window layers rotated at the global layers' RoPE base instead of their own (10000)",
     "Gemma 3 run with one RoPE base for every layer, the GGUF's rope.freq_base", "rope",
     "engine/forward.cpp: the RoPE call", "sliding layers with their own RoPE base (gemma3)"},
    {Fault::fused_qkv_kv_swapped, "fused-qkv-kv-swapped",
     "the fused attn_qkv tensor split as [q | v | k]: k takes v's rows and v takes k's",
     "a loader splitting Phi-3's fused QKV in the wrong order", "weight-loading",
     "engine/weights.cpp: the split of attn_qkv", "a fused attn_qkv tensor (phi3)"},
    {Fault::kv_chunk_offset, "kv-chunk-offset",
     "a batched step writes its K/V rows at the cache's start: every prefill chunk after the first overwrites the first",
     "a prefill written for one-batch prompts, run with chunked prefill", "kv-cache",
     "engine/kv_cache.cpp: KvCache::append_offset",
     "a prompt prefilled in chunks of >= 2 tokens (--prefill-chunk, check --invariance)"},
    {Fault::moe_weights_unnormalized, "moe-weights-unnormalized",
     "the used experts weighted by their softmax probabilities as they are, not renormalized to sum 1",
     "a Qwen2-MoE routing path (norm_topk_prob false) run for Qwen3-MoE or Mixtral, which renormalize",
     "moe-routing", "engine/forward_experts.cpp: the routing call", "a mixture of experts (qwen3moe)"},
    {Fault::rope_scaling_ignored, "rope-scaling-ignored",
     "RoPE run without the model's scaling (linear, YaRN, or LongRoPE's factors and magnitude): the angles of the "
     "short context",
     "a loader reading rope.freq_base but not rope.scaling.*, running Gemma 3 4B+, a 128k Qwen3 GGUF or Phi-3.5", "rope",
     "engine/forward.cpp: the RoPE call", "a model with RoPE scaling (linear, YaRN, LongRoPE)"},
    {Fault::rope_yarn_as_linear, "rope-yarn-as-linear",
     "YaRN scaling run as linear interpolation: every angle divided by the factor, no ramp, no magnitude factor",
     "an engine that implements linear RoPE scaling only and maps every scaling type onto it", "rope",
     "engine/forward.cpp: the RoPE call", "a model with YaRN RoPE scaling"},
    {Fault::rope_nope_rotated, "rope-nope-rotated",
     "q and k rotated in the layers without positional encoding (NoPE) too",
     "SmolLM3 run on a llama code path, which rotates every layer: its every fourth layer has no RoPE", "rope",
     "engine/forward.cpp: the RoPE call", "layers without RoPE (smollm3)"},
    {Fault::attn_temperature_ignored, "attn-temperature-ignored",
     "attention scores not multiplied by Llama 4's temperature ln(floor(p / floor) + 1) * beta + 1",
     "Ministral 3 run on a llama code path: right below YaRN's original context, wrong from there on", "attention-scale",
     "engine/forward.cpp: the attention call", "an attention temperature (mistral3) and a position past its floor"},
    {Fault::resid_multiplier_ignored, "resid-multiplier-ignored",
     "each block's output added to the stream without the residual multiplier",
     "Granite run on a llama code path: its residual_multiplier read but never applied", "residual",
     "engine/forward.cpp: the residual adds", "a residual multiplier (granite)"},
    {Fault::logit_scale_ignored, "logit-scale-ignored",
     "the logits not divided by the logit scale",
     "Granite's logits_scaling left out of the head: greedy choices unchanged, sampling and probabilities wrong",
     "logit-scale", "engine/forward.cpp: Forward::logits_out", "a logit scale (granite)"},
};
// clang-format on

bool has_q8_0_weight(const GgufFile& model) {
  for (const GgufTensorInfo& t : model.tensors())
    if (t.type == GgmlType::Q8_0 && t.ne.size() == 2) return true;
  return false;
}

bool has_quantized_weight(const GgufFile& model) {
  for (const GgufTensorInfo& t : model.tensors())
    if (is_block_quantized(t.type) && t.ne.size() == 2) return true;
  return false;
}

}  // namespace

bool is_block_quantized(GgmlType type) {
  return type != GgmlType::F32 && type != GgmlType::F16 && type != GgmlType::BF16;
}

std::uint64_t truncated_tensor_bytes(const GgufTensorInfo& t) {
  return std::min<std::uint64_t>(t.n_elements / 2, t.n_bytes);
}

const std::vector<FaultSpec>& fault_catalogue() { return kFaults; }

const FaultSpec* find_fault(std::string_view name) {
  for (const FaultSpec& spec : kFaults)
    if (spec.name == name) return &spec;
  return nullptr;
}

const FaultSpec& fault_spec(Fault fault) {
  for (const FaultSpec& spec : kFaults)
    if (spec.fault == fault) return spec;
  throw std::invalid_argument("fault_spec: Fault::none has no catalogue entry");
}

Fault parse_fault(std::string_view name) {
  if (name.empty() || name == "none") return Fault::none;
  if (const FaultSpec* spec = find_fault(name)) return spec->fault;
  std::string names;
  for (const FaultSpec& spec : kFaults)
    names += fmt::format("{}{}", names.empty() ? "" : ", ", spec.name);
  throw std::invalid_argument(
      fmt::format("inject: unknown fault \"{}\"; expected one of: {}", name, names));
}

std::optional<std::string> fault_not_applicable(Fault fault, const GgufFile& model,
                                                const ModelConfig& c, int n_prompt, int n_predict) {
  auto no = [&](std::string why) -> std::optional<std::string> {
    return fmt::format("fault {} does not apply: {}", fault_spec(fault).name, why);
  };
  switch (fault) {
    case Fault::none:
    case Fault::count:
      break;
    case Fault::kv_stuck_length:
    case Fault::kv_append_offset:
    case Fault::kv_unsliced:
      if (n_predict < 2)
        return no(fmt::format("n-predict {} leaves no decode step (needs >= 2)", n_predict));
      break;
    case Fault::first_token_twice:
      if (n_predict < 2)
        return no(fmt::format("n-predict {}: needs >= 2 generated tokens", n_predict));
      break;
    case Fault::prefill_rope_same_position:
    case Fault::causal_mask_off:
      if (n_prompt < 2) return no(fmt::format("the prompt has {} token (needs >= 2)", n_prompt));
      break;
    case Fault::rope_wrong_pairing:
      if (c.n_rot < 4) return no(fmt::format("n_rot {}: both pairings coincide below 4", c.n_rot));
      break;
    case Fault::rope_wrong_base:
      if (c.rope_freq_base == 10000.0f) return no("the model's rope.freq_base is already 10000");
      if (c.rope_freq_base_swa == 10000.0f && c.sliding(0))
        return no("its sliding layers rotate at 10000 already: the fault would first show at a global layer");
      break;
    case Fault::weights_transposed:
      if (c.q_dim() != c.n_embd)
        return no(fmt::format("attn_output is {} x {}, not square", c.n_embd, c.q_dim()));
      break;
    case Fault::lm_head_op_n:
      break;
    case Fault::bias_dropped:
    case Fault::bias_misread:
      if (!c.qkv_bias)
        return no(fmt::format("the {} model has no q/k/v biases", arch_name(c.arch)));
      break;
    case Fault::dequant_q8_scale:
      if (!has_q8_0_weight(model)) return no("the model has no Q8_0 weight");
      break;
    case Fault::attn_scale:
      if (c.head_dim <= 1) return no("head_dim 1: 1/d equals 1/sqrt(d)");
      if (c.attention_multiplier * float(c.head_dim) == 1.0f)
        return no(fmt::format("the model's attention multiplier is 1/d (1/{}) already", c.head_dim));
      break;
    case Fault::gqa_head_map:
      if (c.n_head_kv <= 1 || c.n_head_kv >= c.n_head)
        return no(
            fmt::format("n_head {} n_head_kv {}: both mappings coincide", c.n_head, c.n_head_kv));
      break;
    case Fault::norm_weight_dropped:
    case Fault::weight_not_wired:
      break;
    case Fault::dequant_missing:
    case Fault::tensor_bytes_truncated:
      if (!has_quantized_weight(model)) return no("the model has no block-quantized weight");
      break;
    case Fault::rope_position_ignored:
      if (n_prompt < 2 && n_predict < 2)
        return no("every position run is 0 (needs a prompt of >= 2 tokens or n-predict >= 2)");
      break;
    case Fault::kv_not_written_decode:
      if (n_predict < 2)
        return no(fmt::format("n-predict {} leaves no decode step (needs >= 2)", n_predict));
      break;
    case Fault::ffn_dim_wrong:
      if (c.moe()) return no("the model's FFN is a mixture of experts");
      // Narrower than n_embd the wrong width would read past the FFN weights; equal, it is right.
      if (c.n_ff <= c.n_embd)
        return no(fmt::format("n_ff {} is not larger than n_embd {}", c.n_ff, c.n_embd));
      break;
    case Fault::token_id_bookkeeping:
      if (n_predict < 1) return no("n-predict 0 generates no token");
      break;
    case Fault::ffn_norm_loads_attn_norm:
    case Fault::norm_weight_plus_one:
    case Fault::final_norm_skipped:
    case Fault::resid_attn_dropped:
    case Fault::attn_v_aliases_k:
      break;
    case Fault::ffn_gate_up_swapped:
      if (c.moe()) return no("the model's FFN is a mixture of experts");
      break;
    case Fault::ffn_gelu_for_silu:
      if (c.moe()) return no("the model's FFN is a mixture of experts");
      if (c.activation == Activation::gelu) return no(fmt::format("the {} model's activation is gelu", arch_name(c.arch)));
      break;
    case Fault::embed_scaled:
      if (c.embedding_factor() != 1.0f)
        return no(fmt::format("the {} model scales its embeddings already", arch_name(c.arch)));
      break;
    case Fault::kv_layer_shared:
      // One layer alone owns the shared buffer; the prefill reads only what it just wrote.
      if (c.n_layer < 2)
        return no(fmt::format("n_layer {}: one layer has nobody to share with", c.n_layer));
      if (n_predict < 2)
        return no(fmt::format("n-predict {} leaves no decode step (needs >= 2)", n_predict));
      break;
    case Fault::attn_keys_off_by_one:
    case Fault::softmax_sum_all_keys:
      // A one-token prompt would leave attention no key; a softmax over one row length masks none.
      if (n_prompt < 2) return no(fmt::format("the prompt has {} token (needs >= 2)", n_prompt));
      break;
    case Fault::lm_head_stale_row:
      if (n_prompt < 2)
        return no(fmt::format("the prompt has {} token: row 0 is the right row", n_prompt));
      if (n_predict < 2)
        return no(fmt::format("n-predict {} leaves no decode step (needs >= 2)", n_predict));
      break;
    case Fault::dequant_q8_unsigned:
      if (!has_q8_0_weight(model)) return no("the model has no Q8_0 weight");
      break;
    case Fault::rope_q_not_rotated:
      if (n_prompt < 2 && n_predict < 2)
        return no("every position run is 0 (needs a prompt of >= 2 tokens or n-predict >= 2)");
      break;
    case Fault::rope_freq_n_embd:
      if (c.n_embd == c.n_rot)
        return no(fmt::format("n_embd {} equals n_rot: both exponents coincide", c.n_embd));
      if (n_prompt < 2 && n_predict < 2)
        return no("every position run is 0 (needs a prompt of >= 2 tokens or n-predict >= 2)");
      break;
    case Fault::norm_mean_centered:
      break;
    case Fault::ffn_up_op_n:
      if (c.moe()) return no("the model's FFN is a mixture of experts");
      break;
    case Fault::ffn_down_race:
      if (c.moe()) return no("the model's FFN is a mixture of experts");
      if (c.n_ff < 2) return no(fmt::format("n_ff {}: nothing to split", c.n_ff));
      break;
    case Fault::qk_norm_dropped:
      if (!c.qk_norm) return no(fmt::format("the {} model has no q/k norm", arch_name(c.arch)));
      break;
    case Fault::fused_qkv_kv_swapped:
      if (!c.fused_qkv) return no("the model stores q, k and v apart (no attn_qkv tensor)");
      break;
    case Fault::rope_local_base_ignored:
      if (c.rope_freq_base_swa <= 0 || c.sliding_window <= 0)
        return no("the model has no sliding layers with a RoPE base of their own");
      if (c.rope_freq_base_swa == c.rope_freq_base) return no("its sliding and global layers share one RoPE base");
      if (n_prompt < 2 && n_predict < 2)
        return no("every position run is 0 (needs a prompt of >= 2 tokens or n-predict >= 2)");
      break;
    case Fault::attn_softcap_missing:
      if (c.attn_softcap <= 0) return no("the model has no attention soft-cap");
      if (n_prompt < 2 && n_predict < 2) return no("every position attends to one key: its weight is 1 either way");
      break;
    case Fault::rope_freq_factors_ignored:
      if (!c.rope_freq_factors) return no("the model has no rope_freqs.weight");
      if (n_prompt < 2 && n_predict < 2)
        return no("every position run is 0 (needs a prompt of >= 2 tokens or n-predict >= 2)");
      break;
    case Fault::attn_out_heads_reversed:
      if (c.n_head < 2) return no("one head: its slot is the same either way");
      break;
    case Fault::kv_decode_write_late:
      if (n_predict < 2)
        return no(fmt::format("n-predict {} leaves no decode step (needs >= 2)", n_predict));
      break;
    case Fault::resid_attn_doubled:
      if (c.n_layer < 2) return no(fmt::format("n_layer {}: no layer after the first", c.n_layer));
      break;
    case Fault::embed_position_for_token:
      // The positions must be valid ids for the gather to stay inside the table.
      if (n_prompt + n_predict > c.n_vocab)
        return no(fmt::format("{} positions exceed the vocabulary of {}", n_prompt + n_predict,
                              c.n_vocab));
      break;
    case Fault::dequant_q8_block_stride:
      if (!has_q8_0_weight(model)) return no("the model has no Q8_0 weight");
      break;
    case Fault::moe_weights_unnormalized:
      if (!c.moe()) return no(fmt::format("the {} model has no mixture of experts", arch_name(c.arch)));
      break;
    case Fault::rope_scaling_ignored: {
      if (!c.rope_scaling.scales()) return no("the model declares no RoPE scaling");
      bool scaled = false;
      for (int l = 0; l < c.n_layer; ++l) scaled = scaled || c.rope_scaling_of(l).scales();
      if (!scaled) return no(fmt::format("its {} layers all slide, and only the global layers are scaled", c.n_layer));
      // Linear scaling rotates position 0 by 0 either way; YaRN's magnitude factor shows there.
      if (!c.rope_scaling.scales_magnitude() && n_prompt < 2 && n_predict < 2)
        return no("every position run is 0 (needs a prompt of >= 2 tokens or n-predict >= 2)");
      break;
    }
    case Fault::resid_multiplier_ignored:
      if (c.residual_multiplier == 0) return no("the model has no residual multiplier");
      break;
    case Fault::logit_scale_ignored:
      if (c.logit_scale == 0) return no("the model has no logit scale");
      break;
    case Fault::attn_temperature_ignored:
      if (c.attn_temp_scale == 0) return no("the model has no attention temperature");
      // The last token generated is not run: the last position is n_prompt + n_predict - 2.
      if (n_prompt + n_predict - 2 < c.attn_temp_floor)
        return no(fmt::format("its temperature is 1 below position {}, and the run's last position is {}",
                              c.attn_temp_floor, n_prompt + n_predict - 2));
      break;
    case Fault::rope_nope_rotated:
      if (c.nope_period == 0 || c.n_layer < c.nope_period)
        return no(fmt::format("the model's {} layers all rotate (no NoPE layer)", c.n_layer));
      if (n_prompt < 2 && n_predict < 2)
        return no("every position run is 0 (needs a prompt of >= 2 tokens or n-predict >= 2)");
      break;
    case Fault::rope_yarn_as_linear:
      if (c.rope_scaling.type != RopeScalingType::yarn)
        return no(fmt::format("the model's RoPE scaling is {}, not yarn", rope_scaling_name(c.rope_scaling.type)));
      break;
    case Fault::kv_chunk_offset:
      // Invisible to a one-batch or token-by-token prefill; --prefill-chunk or check --invariance shows it.
      if (n_prompt < 3) return no(fmt::format("the prompt has {} tokens: no chunk of >= 2 follows another", n_prompt));
      break;
  }
  return std::nullopt;
}

}  // namespace tapdiff::engine
