#include "engine/forward.hpp"

#include <algorithm>
#include <atomic>
#include <fmt/format.h>
#include <random>
#include <math.h>
#include <optional>

#include "engine/device/error.hpp"
#include "engine/executor.hpp"

namespace tapdiff::engine {
namespace {

// What thread timing decides for fault ffn-down-race: how many of n terms a raced reduction
// keeps, from a process-wide call count that starts at a random value: consecutive calls (and
// repeated runs in one process) keep different counts, and so do separate processes.
int raced_terms(int n) {
  static std::atomic<std::uint64_t> calls{std::random_device{}()};
  const int half = std::max(n / 2, 1);
  return n - 1 - int(calls++ % std::uint64_t(half));
}

constexpr GemmOp OP_N = GemmOp::N;
constexpr GemmOp OP_T = GemmOp::T;

std::uint8_t* element_ptr(void* base, std::int64_t offset, ElemType type) {
  return static_cast<std::uint8_t*>(base) + offset * std::int64_t(elem_size(type));
}

// The GEMM operand type a weight stored as `t` already is, if any.
std::optional<ElemType> operand_as_stored(GgmlType t) {
  if (t == GgmlType::F32) return ElemType::f32;
  if (t == GgmlType::F16) return ElemType::f16;
  if (t == GgmlType::BF16) return ElemType::bf16;
  return std::nullopt;
}

}  // namespace

Forward::Forward(Executor& ex, const EngineWeights& weights, const ModelConfig& config, int n_ctx,
                 int max_rows, Precision precision, FaultSwitch faults, TraceWriter* trace,
                 const LockstepSource* lockstep, bool logits_all, std::int64_t scratch_elements)
    : ex_(ex), w_(weights), c_(config), n_ctx_(n_ctx), precision_(storage_of(precision)),
      int8_activations_(precision == Precision::q8), faults_(faults),
      cache_(ex, config.n_layer, n_ctx, config.kv_dim(), precision_, faults),
      act_(ex, config, max_rows, n_ctx), taps_(trace, lockstep, ex),
      operand_type_(ex.weight_storage(precision_)), logits_all_(logits_all),
      scratch_elements_(scratch_elements) {
  if (const char* tensor = config.rope_factors_tensor(n_ctx); tensor && weights.rope_factors.count(tensor))
    rope_factors_ = weights.rope_factors.at(tensor).as<float>();
  if (logits_all_ && max_rows > 1)
    prompt_logits_ = ex.allocate(std::size_t(max_rows - 1) * std::size_t(config.n_vocab) * sizeof(float));
}

void Forward::upload_ints(Buffer& dst, const std::vector<std::int32_t>& values) {
  ex_.upload(dst.data(), values.data(), values.size() * sizeof(std::int32_t));
}

void Forward::round(float* x, std::int64_t count) {
  if (precision_ != ElemType::f32) ex_.round(RoundArgs{x, count, precision_});
}

void Forward::norm(const Buffer& weight, int n) {
  RmsNormArgs a{act_.x.as<float>(), weight.as<float>(), act_.norm.as<float>(), n,
                c_.n_embd,          c_.rms_eps};
  // Fault norm-weight-dropped: the norm kernel gets no weight.
  if (faults_.is(Fault::norm_weight_dropped)) a.weight = nullptr;
  // Fault norm-weight-plus-one: the kernel told to use the (1 + w) convention.
  if (faults_.is(Fault::norm_weight_plus_one)) a.weight_plus_one = true;
  // Fault norm-mean-centered: the kernel run with LayerNorm statistics.
  if (faults_.is(Fault::norm_mean_centered)) a.subtract_mean = true;
  ex_.rmsnorm(a);
  round(act_.norm.as<float>(), std::int64_t(n) * c_.n_embd);  // a GEMM input
}

// Weight matrices stay in their GGUF encoding. A decode step (one column, W read row by row)
// runs the matvec kernel, which decodes as it goes, except for an F32 weight at f32 precision
// where the executor's GEMM streams float32 faster (cuBLAS; OpenBLAS on a CPU without
// AVX-512). A batch multiplies a weight the GEMM reads as it is (float32, or the CUDA
// executor's 16-bit operand type at that precision) directly; W in its encoding where the
// executor's GEMM decodes it as it goes (gemm_decodes: the host's AVX-512 tiles); and
// otherwise decodes slices of W's rows into a scratch matrix and multiplies each, as
// llama.cpp's CUDA backend does. Any other reading of W (a wrong op flag or leading dimension,
// as faults plant) decodes the whole matrix first, so it reads the same wrong numbers.
// At precision q8 a block-quantized W read by rows multiplies 8-bit activations instead, decode
// and batch alike (gemm_q8), as llama.cpp's CPU backend does.
void Forward::gemm(GemmOp op_w, int m, int n, int k, const Matrix& w, int ldw, const float* b, int ldb,
                   float* c, int ldc) {
  auto product = [&](GemmOp op, int rows, const void* a, ElemType a_type, float* out) {
    ex_.gemm(GemmArgs{op, OP_N, rows, n, k, 1.0f, a, a_type, ldw, b, ElemType::f32, ldb, 0.0f, out, ldc});
  };
  const bool by_rows = op_w == OP_T && ldw == w.cols;
  if (int8_activations_ && by_rows && q8_multipliable(w.encoded()) && k % kQ8Block == 0)
    return gemm_q8(m, n, k, w, b, ldb, c, ldc);
  const bool f32_as_is = w.type == GgmlType::F32 && precision_ == ElemType::f32 && !ex_.matvec_streams_f32();
  if (by_rows && n == 1 && !f32_as_is) return ex_.matvec(MatvecArgs{w.encoded(), w.cols, m, k, b, c, precision_});
  const auto stored = operand_as_stored(w.type);
  if (stored == operand_type_ && stored == precision_) return product(op_w, m, w.bytes.data(), *stored, c);
  if (!by_rows) return product(op_w, m, decode_to_scratch(w, 0, w.elements()), operand_type_, c);
  if (k == w.cols && ex_.gemm_decodes(w.encoded()))
    return ex_.gemm_encoded(EncodedGemmArgs{w.encoded(), m, n, k, b, ldb, c, ldc, precision_});
  const int slice = int(std::max<std::int64_t>(1, scratch_elements_ / w.cols));
  for (int r0 = 0; r0 < m; r0 += slice) {
    const int rows = std::min(slice, m - r0);
    product(OP_T, rows, decode_to_scratch(w, std::int64_t(r0) * w.cols, std::int64_t(rows) * w.cols),
            operand_type_, c + r0);
  }
}

void Forward::grow(Buffer& scratch, std::size_t bytes) {
  if (scratch.bytes() >= bytes) return;
  ex_.synchronize();  // the old buffer may still be read by a queued product
  scratch = ex_.allocate(bytes);
}

// The K-quants multiply activations in blocks of 256 (q8_K), the others in blocks of 32 (q8_0).
void Forward::gemm_q8(int m, int n, int k, const Matrix& w, const float* b, int ldb, float* c, int ldc) {
  const std::size_t values = std::size_t(n) * std::size_t(k), blocks = values / kQ8Block;
  grow(q8_scratch_, values + 2 * blocks * sizeof(float));
  // Scales and sums first: they stay aligned whatever k is.
  Q8Rows x{};
  x.block = q8_activation_block(w.encoded(), k);
  x.d = q8_scratch_.as<float>();
  float* const after_d = x.d + blocks;
  if (x.block == kQ8Block)
    x.ds = after_d;
  else
    x.sums = reinterpret_cast<std::int16_t*>(after_d);
  x.q = reinterpret_cast<std::int8_t*>(after_d + blocks);
  ex_.quantize_q8(QuantizeQ8Args{b, ldb, n, k, x});
  ex_.matmul_q8(MatmulQ8Args{w.encoded(), w.cols, m, k, x, n, c, ldc});
}

const void* Forward::decode_to_scratch(const Matrix& w, std::int64_t first, std::int64_t n) {
  grow(scratch_, std::size_t(n) * elem_size(operand_type_));
  DequantArgs a{w.bytes.as<std::uint8_t>(), w.type, scratch_.data(), n};
  a.quirks = w.quirks;
  a.dst_type = operand_type_;
  a.round = precision_;
  a.first = first;
  ex_.dequantize(a);
  return scratch_.data();
}

int Forward::step(const int* tokens, int n, int p0) {
  if (n < 1 || n > act_.max_rows || p0 < 0 || p0 + n > n_ctx_)
    throw EngineError(
        fmt::format("forward step: {} positions from {}: expected 1..{} within the {} positions", n,
                    p0, act_.max_rows, n_ctx_));
  cache_.check_room(n);
  host_ints_.assign(tokens, tokens + n);
  upload_ints(act_.tokens, host_ints_);
  for (int i = 0; i < n; ++i) host_ints_[std::size_t(i)] = p0 + i;
  upload_ints(act_.positions, host_ints_);
  // The positions RoPE rotates by. Fault prefill-rope-same-position: the batch's start
  // position for every token.
  if (faults_.is(Fault::prefill_rope_same_position)) host_ints_.assign(std::size_t(n), p0);
  // Fault rope-position-ignored: the positions array RoPE gets is never filled (all 0).
  if (faults_.is(Fault::rope_position_ignored)) host_ints_.assign(std::size_t(n), 0);
  upload_ints(act_.rope_positions, host_ints_);

  stream_in(p0, n);
  for (int l = std::max(0, c_.first_stage); l <= std::min(c_.n_layer - 1, c_.last_stage); ++l) {
    attention_block(l, p0, n);
    ffn_block(l, p0, n);
  }
  cache_.advance(n);
  return c_.holds(c_.n_layer) ? output_head(p0, n) : -1;
}

void Forward::stream_in(int p0, int n) {
  const int E = c_.n_embd;
  if (!c_.holds(-1)) {
    // A model part: what enters its first stage, from the lockstep trace.
    if (c_.first_stage == 0) taps_.continue_from("token_embd", -1, p0, n, {E}, act_.x.as<float>());
    else taps_.continue_from("resid.ffn", c_.first_stage - 1, p0, n, {E}, act_.x.as<float>());
    return;
  }
  EmbedArgs embed{w_.token_embd.encoded(), act_.tokens.as<std::int32_t>(), act_.x.as<float>(), n, E,
                  c_.n_vocab, precision_};
  embed.scale = c_.embedding_factor();
  // Fault embed-scaled: the gather scales by sqrt(n_embd), as for Gemma.
  if (faults_.is(Fault::embed_scaled)) embed.scale = sqrtf(float(E));
  // Fault embed-position-for-token: the gather reads the positions buffer as its ids.
  if (faults_.is(Fault::embed_position_for_token)) embed.tokens = act_.positions.as<std::int32_t>();
  ex_.embed(embed);
  taps_.probe("token_embd", -1, p0, n, {E}, act_.x.as<float>());
}

void Forward::attention_block(int l, int p0, int n) {
  const LayerWeights& L = w_.layers[std::size_t(l)];
  const int E = c_.n_embd, Q = c_.q_dim(), KV = c_.kv_dim();
  const int H = c_.n_head, HKV = c_.n_head_kv, D = c_.head_dim;
  float* norm_out = act_.norm.as<float>();
  float* q = act_.q.as<float>();
  float* k = act_.k.as<float>();
  // Fault attn-v-aliases-k: v points at the k buffer (same shape), so V's GEMM overwrites K.
  float* v = faults_.is(Fault::attn_v_aliases_k) ? act_.k.as<float>() : act_.v.as<float>();

  norm(L.attn_norm, n);
  taps_.probe("attn_norm", l, p0, n, {E}, norm_out);

  // q [n, Q] = norm [n, E] · Wqᵀ. Column-major: Wq is [E, Q] (ld E), norm is [E, n] (ld E),
  // q is [Q, n] (ld Q), so q = Wqᵀ · norm: op(A) = T, op(B) = N. Same for k and v.
  gemm(OP_T, Q, n, E, L.wq, E, norm_out, E, q, Q);
  gemm(OP_T, KV, n, E, L.wk, E, norm_out, E, k, KV);
  gemm(OP_T, KV, n, E, L.wv, E, norm_out, E, v, KV);
  // Fault bias-dropped: the q/k/v biases are skipped.
  if (c_.qkv_bias && !faults_.is(Fault::bias_dropped)) {
    ex_.add_bias(BiasArgs{q, L.bq.as<float>(), n, Q});
    ex_.add_bias(BiasArgs{k, L.bk.as<float>(), n, KV});
    ex_.add_bias(BiasArgs{v, L.bv.as<float>(), n, KV});
  }
  taps_.probe("attn_q", l, p0, n, {Q}, q);
  taps_.probe("attn_k", l, p0, n, {KV}, k);
  taps_.probe("attn_v", l, p0, n, {KV}, v);
  // Fault qk-norm-dropped: a qwen2 code path running qwen3 skips the per-head q/k norm.
  if (c_.qk_norm) {
    if (!faults_.is(Fault::qk_norm_dropped)) {
      ex_.rmsnorm(RmsNormArgs{q, L.q_norm.as<float>(), q, std::int64_t(n) * H, D, c_.rms_eps});
      ex_.rmsnorm(RmsNormArgs{k, L.k_norm.as<float>(), k, std::int64_t(n) * HKV, D, c_.rms_eps});
    }
    taps_.probe("attn_q_norm", l, p0, n, {Q}, q);
    taps_.probe("attn_k_norm", l, p0, n, {KV}, k);
  }

  RopeArgs rope{q,
                act_.rope_positions.as<std::int32_t>(),
                n,
                H,
                D,
                c_.n_rot,
                c_.rope_base(l),
                c_.rope_pairing};
  // Fault rope-wrong-pairing: the other pairing. Fault rope-wrong-base: llama-2's base.
  if (faults_.is(Fault::rope_wrong_pairing))
    rope.pairing = rope.pairing == RopePairing::norm ? RopePairing::neox : RopePairing::norm;
  if (faults_.is(Fault::rope_wrong_base)) rope.base = 10000.0f;
  // Fault rope-local-base-ignored: gemma3's sliding layers rotated at the global layers' base.
  if (faults_.is(Fault::rope_local_base_ignored)) rope.base = c_.rope_freq_base;
  // Fault rope-freq-n-embd: the frequency exponent divided by the model width.
  if (faults_.is(Fault::rope_freq_n_embd)) rope.freq_dim = c_.n_embd;
  // Fault rope-scaling-ignored: a loader that reads rope.freq_base and never rope.scaling.*.
  if (!faults_.is(Fault::rope_scaling_ignored)) rope_scale(rope, c_.rope_scaling_of(l));
  // Fault rope-yarn-as-linear: YaRN taken for linear scaling (no ramp, no magnitude factor).
  if (faults_.is(Fault::rope_yarn_as_linear)) {
    rope.ext_factor = 0.0f;
    rope.mscale = 1.0f;
  }
  // Fault rope-freq-factors-ignored: a Llama 2 code path never passes Llama 3.1's factors.
  // (LongRoPE's factors are its scaling: rope-scaling-ignored leaves them out too.)
  if (!faults_.is(Fault::rope_freq_factors_ignored) &&
      !(faults_.is(Fault::rope_scaling_ignored) && c_.rope_scaling.type == RopeScalingType::longrope))
    rope.freq_factors = rope_factors_;
  // Fault rope-nope-rotated: SmolLM3's NoPE layers rotated too, as a llama code path would.
  if (c_.rotates(l) || faults_.is(Fault::rope_nope_rotated)) {
    // Fault rope-q-not-rotated: the Q call is missing; only K is rotated.
    if (!faults_.is(Fault::rope_q_not_rotated)) ex_.rope(rope);
    rope.x = k;
    rope.n_heads = HKV;
    ex_.rope(rope);
  }
  round(q, std::int64_t(n) * Q);  // attention's q input
  taps_.probe("attn_q.rope", l, p0, n, {Q}, q);
  taps_.probe("attn_k.rope", l, p0, n, {KV}, k);

  const std::int64_t offset = cache_.append_offset(n);
  // Fault kv-not-written-decode: a decode step (the cache already holds rows) skips its write.
  if (!(faults_.is(Fault::kv_not_written_decode) && cache_.length() > 0)) {
    ex_.kv_append(KvAppendArgs{k, cache_.k(l), cache_.type(), offset, n, KV, cache_.capacity()});
    ex_.kv_append(KvAppendArgs{v, cache_.v(l), cache_.type(), offset, n, KV, cache_.capacity()});
  }
  // The rows just written, read back from cache memory; lockstep injects into these slots.
  taps_.probe("kv.k", l, p0, n, {KV}, element_ptr(cache_.k(l), offset, cache_.type()),
               cache_.type());
  taps_.probe("kv.v", l, p0, n, {KV}, element_ptr(cache_.v(l), offset, cache_.type()),
               cache_.type());

  AttentionArgs at;
  at.q = q;
  at.k_cache = cache_.k(l);
  at.v_cache = cache_.v(l);
  at.cache_type = cache_.type();
  at.positions = act_.positions.as<std::int32_t>();
  at.probs = act_.probs.as<float>();
  at.out = act_.attn_out.as<float>();
  at.n_rows = n;
  at.n_head = H;
  at.n_head_kv = HKV;
  at.head_dim = D;
  at.n_keys = cache_.visible_keys(n);
  // Fault attn-keys-off-by-one: the key count taken as the step's last position (p0 + n - 1),
  // an index, not a count: the step's last row misses its own key.
  if (faults_.is(Fault::attn_keys_off_by_one)) at.n_keys = cache_.visible_keys(n) - 1;
  at.probs_stride = cache_.capacity();
  at.scale = c_.attn_scale();
  // Fault attn-temperature-ignored: Mistral 3 run on a llama path, without Llama 4's temperature.
  if (!faults_.is(Fault::attn_temperature_ignored)) {
    at.temp_scale = c_.attn_temp_scale;
    at.temp_floor = float(c_.attn_temp_floor);
  }
  at.softcap = c_.attn_softcap;
  // Fault attn-softcap-missing: Gemma 2 run without its attention logit soft-cap.
  if (faults_.is(Fault::attn_softcap_missing)) at.softcap = 0.0f;
  if (c_.sliding(l)) at.window = c_.sliding_window;
  // A decode step's single query sees the whole valid length; only a batch needs the mask.
  at.causal = n > 1;
  // Fault attn-scale: 1/d. Fault causal-mask-off: no mask in prefill. Fault gqa-head-map:
  // kv head h % n_head_kv.
  if (faults_.is(Fault::attn_scale)) at.scale = 1.0f / float(D);
  if (faults_.is(Fault::causal_mask_off)) at.causal = false;
  if (faults_.is(Fault::gqa_head_map)) at.kv_head_map = KvHeadMap::modulo;
  // Fault softmax-sum-all-keys: softmax over all n_keys rows, the mask applied afterwards.
  if (faults_.is(Fault::softmax_sum_all_keys)) at.softmax_over_all_keys = true;
  // Fault attn-out-heads-reversed: the kernel writes head h's output to slot n_head - 1 - h.
  if (faults_.is(Fault::attn_out_heads_reversed)) at.out_heads_reversed = true;
  ex_.attention(at);
  round(at.out, std::int64_t(n) * Q);  // a GEMM input
  // attn.probs is record-only: the kernel computed attn.out from its own probabilities.
  taps_.record("attn.probs", l, p0, n, {H, n_ctx_}, at.probs);
  taps_.probe("attn.out", l, p0, n, {Q}, at.out);

  // attn_output [n, E] = attn.out [n, Q] · Woᵀ. Column-major: Wo is [Q, E] (ld Q), attn.out
  // is [Q, n] (ld Q), the result [E, n] (ld E): Woᵀ · attn.out, op(A) = T.
  float* proj = act_.proj.as<float>();
  if (faults_.is(Fault::weights_transposed))
    // Fault weights-transposed: op(A) = N with the same ld reads Wo as [E, Q]: Wo · attn.out
    // (in bounds only because Wo is square).
    gemm(OP_N, E, n, Q, L.wo, Q, at.out, Q, proj, E);
  else
    gemm(OP_T, E, n, Q, L.wo, Q, at.out, Q, proj, E);
  taps_.probe("attn_output", l, p0, n, {E}, proj);
  if (c_.post_norms) {
    ex_.rmsnorm(RmsNormArgs{proj, L.attn_post_norm.as<float>(), proj, n, E, c_.rms_eps});
    taps_.probe("attn_post_norm", l, p0, n, {E}, proj);
  }

  AddArgs residual{act_.x.as<float>(), proj, std::int64_t(n) * E, residual_factor()};
  // Fault resid-attn-dropped: this call site uses the add kernel's copy mode: x = attn_output.
  if (faults_.is(Fault::resid_attn_dropped)) residual.copy = true;
  ex_.add(residual);
  // Fault resid-attn-doubled: after layer 0 a fused add also adds attn_output; the explicit
  // add above stayed, so the stream gets it twice.
  if (faults_.is(Fault::resid_attn_doubled) && l > 0) ex_.add(residual);
  taps_.probe("resid.attn", l, p0, n, {E}, act_.x.as<float>());
}

void Forward::ffn_block(int l, int p0, int n) {
  const LayerWeights& L = w_.layers[std::size_t(l)];
  const int E = c_.n_embd;
  float* proj = act_.proj.as<float>();

  norm(L.ffn_norm, n);
  taps_.probe("ffn_norm", l, p0, n, {E}, act_.norm.as<float>());
  if (c_.moe())
    experts_ffn(L, l, p0, n);
  else
    dense_ffn(L, l, p0, n);
  if (c_.post_norms) {
    ex_.rmsnorm(RmsNormArgs{proj, L.ffn_post_norm.as<float>(), proj, n, E, c_.rms_eps});
    taps_.probe("ffn_post_norm", l, p0, n, {E}, proj);
  }

  ex_.add(AddArgs{act_.x.as<float>(), proj, std::int64_t(n) * E, residual_factor()});
  taps_.probe("resid.ffn", l, p0, n, {E}, act_.x.as<float>());
}

void Forward::dense_ffn(const LayerWeights& L, int l, int p0, int n) {
  const int E = c_.n_embd;
  // Fault ffn-dim-wrong: the FFN width is n_embd. Only applied when n_ff > n_embd, so every
  // GEMM reads the first E rows (gate, up) or an E x E block (down) of its weight, in bounds.
  const int F = faults_.is(Fault::ffn_dim_wrong) ? c_.n_embd : c_.n_ff;
  float* norm_out = act_.norm.as<float>();
  float* gate = act_.gate.as<float>();
  float* up = act_.up.as<float>();
  float* act = act_.act.as<float>();
  float* proj = act_.proj.as<float>();

  // gate, up [n, F] = norm [n, E] · Wᵀ. Column-major: W is [E, F] (ld E), norm [E, n] (ld E),
  // the result [F, n] (ld F): Wᵀ · norm.
  gemm(OP_T, F, n, E, L.w_gate, E, norm_out, E, gate, F);
  if (faults_.is(Fault::ffn_up_op_n))
    // Fault ffn-up-op-n: op(A) = N with lda = F reads W as a column-major [F, E] matrix (in
    // bounds: the same F x E elements).
    gemm(OP_N, F, n, E, L.w_up, F, norm_out, E, up, F);
  else
    gemm(OP_T, F, n, E, L.w_up, E, norm_out, E, up, F);
  taps_.probe("ffn_gate", l, p0, n, {F}, gate);
  taps_.probe("ffn_up", l, p0, n, {F}, up);

  SiluMulArgs swiglu{gate, up, act, std::int64_t(n) * F};
  // Fault ffn-gate-up-swapped: the operands in the wrong order: silu(up) * gate.
  if (faults_.is(Fault::ffn_gate_up_swapped)) {
    swiglu.gate = up;
    swiglu.up = gate;
  }
  swiglu.gelu = c_.activation == Activation::gelu;
  // Fault ffn-gelu-for-silu: the GeGLU activation.
  if (faults_.is(Fault::ffn_gelu_for_silu)) swiglu.gelu = true;
  ex_.silu_mul(swiglu);
  round(act, std::int64_t(n) * F);  // a GEMM input
  taps_.probe("ffn.act", l, p0, n, {F}, act);

  // ffn_down [n, E] = act [n, F] · Wdᵀ. Column-major: Wd is [F, E] (ld F), act [F, n] (ld F),
  // the result [E, n] (ld E): Wdᵀ · act.
  // Fault ffn-down-race: a split-K GEMM whose second partial sum loses a race: the reduction
  // keeps the first k of the F terms, k depending on thread timing.
  const int k = faults_.is(Fault::ffn_down_race) ? raced_terms(F) : F;
  gemm(OP_T, E, n, k, L.w_down, F, act, F, proj, E);
  taps_.probe("ffn_down", l, p0, n, {E}, proj);
}

// Fault resid-multiplier-ignored: Granite's adds on llama's path, without its multiplier.
float Forward::residual_factor() const {
  return faults_.is(Fault::resid_multiplier_ignored) ? 1.0f : c_.residual_factor();
}

// What the head does to its product: Granite's logit scale, Gemma 2's soft-cap. Fault
// logit-scale-ignored: the scale left out.
void Forward::logits_out(float* logits, std::int64_t n) {
  if (c_.logit_factor() != 1.0f && !faults_.is(Fault::logit_scale_ignored))
    ex_.scale(ScaleArgs{logits, n, c_.logit_factor()});
  if (c_.final_softcap > 0) ex_.softcap(SoftcapArgs{logits, n, c_.final_softcap});
}

int Forward::output_head(int p0, int n) {
  const int E = c_.n_embd, V = c_.n_vocab;
  // The head's input: output_norm of the residual stream. Fault final-norm-skipped: the head
  // reads the residual stream itself.
  const bool skip_norm = faults_.is(Fault::final_norm_skipped);
  if (!skip_norm) norm(w_.output_norm, n);
  float* head_in = skip_norm ? act_.x.as<float>() : act_.norm.as<float>();
  taps_.probe("output_norm", -1, p0, n, {E}, head_in);

  // logits_all: the rows before the last too, for KL divergence over the whole prompt; the
  // next token comes from the last row below either way.
  if (logits_all_ && n > 1) {
    float* rows = prompt_logits_.as<float>();
    if (faults_.is(Fault::lm_head_op_n))
      gemm(OP_N, V, n - 1, E, w_.lm_head(), V, head_in, E, rows, V);
    else
      gemm(OP_T, V, n - 1, E, w_.lm_head(), E, head_in, E, rows, V);
    logits_out(rows, std::int64_t(n - 1) * V);
    taps_.probe("output", -1, p0, n - 1, {V}, rows);
  }
  // Logits for the step's last position (prefill needs no others).
  // logits [1, V] = last [1, E] · Wᵀ. Column-major: W is [E, V] (ld E), last is [E, 1] (ld E),
  // logits [V, 1] (ld V): Wᵀ · last, op(A) = T.
  int head_row = n - 1;
  // Fault lm-head-stale-row: the row is fixed by the first step (the prefill) and reused, so a
  // decode step (one fresh row, row 0) reads the prefill's last row, left over in the buffer.
  if (faults_.is(Fault::lm_head_stale_row)) {
    if (stale_head_row_ < 0) stale_head_row_ = n - 1;
    head_row = stale_head_row_;
  }
  const float* last = head_in + std::int64_t(head_row) * E;
  float* logits = act_.logits.as<float>();
  if (faults_.is(Fault::lm_head_op_n))
    // Fault lm-head-op-n: op(A) = N with lda = V reads W as a column-major [V, E] matrix.
    gemm(OP_N, V, 1, E, w_.lm_head(), V, last, E, logits, V);
  else
    gemm(OP_T, V, 1, E, w_.lm_head(), E, last, E, logits, V);
  logits_out(logits, V);
  taps_.probe("output", -1, p0 + n - 1, 1, {V}, logits);

  ex_.argmax(ArgmaxArgs{logits, act_.next_token.as<std::int32_t>(), 1, V});
  std::int32_t next = 0;
  ex_.download(&next, act_.next_token.data(), sizeof next);
  return next;
}

std::vector<float> Forward::logits() const {
  std::vector<float> out(static_cast<std::size_t>(c_.n_vocab));
  ex_.download(out.data(), act_.logits.data(), out.size() * sizeof(float));
  return out;
}

}  // namespace tapdiff::engine
