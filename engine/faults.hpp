// Fault injection: each fault reproduces a real engine bug from the field as a small named
// branch at the place that bug lives (KV cache bookkeeping, the RoPE call, a GEMM call site,
// the loader or a dequantization kernel, the generation loop). It never perturbs outputs
// after the fact, and without a fault no fault branch is taken. docs/faults.md gives each
// fault's expected first divergence and the reasoning.
//
// Adding a fault: a Fault value, a row in the table (faults.cpp), an applicability rule if
// it needs one, and its branch guarded by FaultSwitch::is().
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "model/config.hpp"
#include "model/gguf.hpp"

namespace tapdiff::engine {

enum class Fault : std::uint8_t {
  none,
  kv_stuck_length,
  kv_append_offset,
  kv_unsliced,
  first_token_twice,
  prefill_rope_same_position,
  rope_wrong_pairing,
  rope_wrong_base,
  weights_transposed,
  lm_head_op_n,
  bias_dropped,
  bias_misread,
  dequant_q8_scale,
  attn_scale,
  causal_mask_off,
  gqa_head_map,
  norm_weight_dropped,
  dequant_missing,
  tensor_bytes_truncated,
  weight_not_wired,
  rope_position_ignored,
  kv_not_written_decode,
  ffn_dim_wrong,
  token_id_bookkeeping,
  ffn_norm_loads_attn_norm,
  kv_layer_shared,
  attn_keys_off_by_one,
  softmax_sum_all_keys,
  norm_weight_plus_one,
  final_norm_skipped,
  resid_attn_dropped,
  ffn_gelu_for_silu,
  ffn_gate_up_swapped,
  attn_v_aliases_k,
  lm_head_stale_row,
  embed_scaled,
  dequant_q8_unsigned,
  rope_q_not_rotated,
  rope_freq_n_embd,
  norm_mean_centered,
  attn_out_heads_reversed,
  kv_decode_write_late,
  resid_attn_doubled,
  embed_position_for_token,
  dequant_q8_block_stride,
  ffn_up_op_n,
  ffn_down_race,
  qk_norm_dropped,
  rope_freq_factors_ignored,
  attn_softcap_missing,
  rope_local_base_ignored,
  fused_qkv_kv_swapped,
  kv_chunk_offset,
  moe_weights_unnormalized,
  rope_scaling_ignored,
  rope_yarn_as_linear,
  rope_nope_rotated,
  attn_temperature_ignored,
  resid_multiplier_ignored,
  logit_scale_ignored,
  count,  // not a fault: the number of enumerators, which FaultSwitch's mask must hold
};

struct FaultSpec {
  Fault fault;
  std::string_view name;         // --inject NAME
  std::string_view description;  // one line: what the engine does wrong
  std::string_view seed_bug;     // the real bug it reproduces
  std::string_view fault_class;  // the diagnosis class the diff must report
  std::string_view where;        // the code the branch sits in
  std::string_view needs;        // what a run needs for the fault to show ("" = any run)
};

// The catalogue, in DESIGN.md's order.
const std::vector<FaultSpec>& fault_catalogue();
const FaultSpec* find_fault(std::string_view name);  // nullptr when unknown
const FaultSpec& fault_spec(Fault fault);

// "" or "none" is Fault::none; an unknown name throws std::invalid_argument listing the names.
Fault parse_fault(std::string_view name);

// True for the block-quantized types (everything but F32, F16 and BF16).
bool is_block_quantized(GgmlType type);

// The bytes of `t` the loader reads under fault tensor-bytes-truncated: a placeholder size of
// elements / 2 (never more than the tensor holds).
std::uint64_t truncated_tensor_bytes(const GgufTensorInfo& t);

// Why `fault` cannot show on this run (the model lacks what it breaks, or the run is too
// short), or nullopt when it applies. Fault::none always applies.
std::optional<std::string> fault_not_applicable(Fault fault, const GgufFile& model,
                                                const ModelConfig& config, int n_prompt,
                                                int n_predict);

// The active faults (usually one; `--inject a,b,c` sets several), passed to every place that
// has a fault branch.
class FaultSwitch {
  static_assert(unsigned(Fault::count) <= 64, "FaultSwitch keeps one bit per fault in 64");

public:
  FaultSwitch() = default;
  explicit FaultSwitch(Fault active) { add(active); }
  void add(Fault fault) {
    if (fault != Fault::none) mask_ |= bit(fault);
  }
  bool is(Fault fault) const { return fault == Fault::none ? mask_ == 0 : (mask_ & bit(fault)) != 0; }
  std::vector<Fault> active() const {  // in enum order; empty for a clean run
    std::vector<Fault> out;
    for (unsigned i = 1; i < 64; ++i)
      if (mask_ & (std::uint64_t(1) << i)) out.push_back(static_cast<Fault>(i));
    return out;
  }

private:
  static std::uint64_t bit(Fault fault) { return std::uint64_t(1) << unsigned(fault); }
  std::uint64_t mask_ = 0;
};

}  // namespace tapdiff::engine
