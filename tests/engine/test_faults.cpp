// The fault catalogue: its table, and for every fault, injected on a fixture where it
// applies, the first divergence from the clean run of the same engine at the layer, tap and
// position docs/faults.md states (the rule: fault_cases.hpp).
#include <gtest/gtest.h>
#include <set>

#include "fault_cases.hpp"

namespace tapdiff::engine {
namespace {

using namespace test;

TEST(FaultCatalogue, EveryFaultInDesignOrderWithEveryField) {
  const std::vector<std::string> names = {"kv-stuck-length",
                                          "kv-append-offset",
                                          "kv-unsliced",
                                          "first-token-twice",
                                          "prefill-rope-same-position",
                                          "rope-wrong-pairing",
                                          "rope-wrong-base",
                                          "weights-transposed",
                                          "lm-head-op-n",
                                          "bias-dropped",
                                          "bias-misread",
                                          "dequant-q8-scale",
                                          "attn-scale",
                                          "causal-mask-off",
                                          "gqa-head-map",
                                          "norm-weight-dropped",
                                          "dequant-missing",
                                          "tensor-bytes-truncated",
                                          "weight-not-wired",
                                          "rope-position-ignored",
                                          "kv-not-written-decode",
                                          "ffn-dim-wrong",
                                          "token-id-bookkeeping",
                                          "ffn-norm-loads-attn-norm",
                                          "kv-layer-shared",
                                          "attn-keys-off-by-one",
                                          "softmax-sum-all-keys",
                                          "norm-weight-plus-one",
                                          "final-norm-skipped",
                                          "resid-attn-dropped",
                                          "ffn-gelu-for-silu",
                                          "ffn-gate-up-swapped",
                                          "attn-v-aliases-k",
                                          "lm-head-stale-row",
                                          "embed-scaled",
                                          "dequant-q8-unsigned",
                                          "rope-q-not-rotated",
                                          "rope-freq-n-embd",
                                          "norm-mean-centered",
                                          "attn-out-heads-reversed",
                                          "kv-decode-write-late",
                                          "resid-attn-doubled",
                                          "embed-position-for-token",
                                          "dequant-q8-block-stride",
                                          "ffn-up-op-n",
                                          "ffn-down-race",
                                          "qk-norm-dropped",
                                          "rope-freq-factors-ignored",
                                          "attn-softcap-missing",
                                          "rope-local-base-ignored",
                                          "fused-qkv-kv-swapped",
                                          "kv-chunk-offset",
                                          "moe-weights-unnormalized",
                                          "rope-scaling-ignored",
                                          "rope-yarn-as-linear",
                                          "rope-nope-rotated",
                                          "attn-temperature-ignored",
                                          "resid-multiplier-ignored",
                                          "logit-scale-ignored"};
  const auto& table = fault_catalogue();
  ASSERT_EQ(table.size(), names.size());
  std::set<Fault> ids;
  for (std::size_t i = 0; i < table.size(); ++i) {
    EXPECT_EQ(table[i].name, names[i]);
    EXPECT_FALSE(table[i].description.empty() || table[i].seed_bug.empty() ||
                 table[i].fault_class.empty() || table[i].where.empty())
        << table[i].name;
    EXPECT_EQ(parse_fault(table[i].name), table[i].fault);
    EXPECT_EQ(&fault_spec(table[i].fault), &table[i]);
    ids.insert(table[i].fault);
  }
  EXPECT_EQ(ids.size(), table.size());
  EXPECT_EQ(parse_fault(""), Fault::none);
  EXPECT_EQ(parse_fault("none"), Fault::none);
  EXPECT_THROW(parse_fault("kv-stuck"), std::invalid_argument);
}

class FaultInjection : public ::testing::TestWithParam<FaultCase> {};

TEST_P(FaultInjection, DivergesFirstWhereDocumented) {
  const FaultCase& fc = GetParam();
  const Divergence d = run_fault_case(fc, Backend::host);
  EXPECT_EQ(d.tap, fc.expected.tap) << fc.fault;
  EXPECT_EQ(d.position, fc.expected.position) << fc.fault;
}

INSTANTIATE_TEST_SUITE_P(Catalogue, FaultInjection, ::testing::ValuesIn(fault_cases()),
                         [](const auto& param_info) {
                           const FaultCase& fc = param_info.param;
                           std::string name = std::string(fc.fault) + "_" +
                                              arch_name(fc.spec.arch) + "_" +
                                              std::string(ggml_type_name(fc.spec.weight_type));
                           for (char& ch : name)
                             if (ch == '-') ch = '_';
                           return name + "_" + std::to_string(param_info.index);
                         });

TEST(FaultInjection, EveryCatalogueFaultIsCovered) {
  std::set<std::string> covered;
  for (const FaultCase& fc : fault_cases()) covered.insert(fc.fault);
  for (const FaultSpec& spec : fault_catalogue())
    EXPECT_EQ(covered.count(std::string(spec.name)), 1u) << spec.name;
}

TEST(FaultInjection, InapplicableFaultsAreNamedNotSilent) {
  const GgufFile llama = fixture_file(llama_spec());
  const ModelConfig c = load_model_config(llama);
  EXPECT_TRUE(fault_not_applicable(Fault::bias_misread, llama, c, 5, 4).has_value());
  EXPECT_TRUE(fault_not_applicable(Fault::dequant_q8_scale, llama, c, 5, 4).has_value());
  EXPECT_TRUE(fault_not_applicable(Fault::rope_wrong_base, llama, c, 5, 4).has_value());
  EXPECT_TRUE(fault_not_applicable(Fault::kv_unsliced, llama, c, 5, 1).has_value());
  EXPECT_TRUE(fault_not_applicable(Fault::causal_mask_off, llama, c, 1, 4).has_value());
  EXPECT_FALSE(fault_not_applicable(Fault::gqa_head_map, llama, c, 5, 4).has_value());
  EXPECT_FALSE(fault_not_applicable(Fault::none, llama, c, 1, 0).has_value());
  EXPECT_TRUE(fault_not_applicable(Fault::kv_chunk_offset, llama, c, 2, 4).has_value());
  EXPECT_FALSE(fault_not_applicable(Fault::kv_chunk_offset, llama, c, 3, 0).has_value());
  // The weight faults need a block-quantized weight; F16 is not one.
  EXPECT_TRUE(fault_not_applicable(Fault::dequant_missing, llama, c, 5, 4).has_value());
  EXPECT_TRUE(fault_not_applicable(Fault::tensor_bytes_truncated, llama, c, 5, 4).has_value());
  const GgufFile f16 = fixture_file(llama_spec(GgmlType::F16));
  EXPECT_TRUE(fault_not_applicable(Fault::dequant_missing, f16, c, 5, 4).has_value());
  const GgufFile q8 = fixture_file(llama_spec(GgmlType::Q8_0));
  EXPECT_FALSE(fault_not_applicable(Fault::tensor_bytes_truncated, q8, c, 5, 4).has_value());
  EXPECT_FALSE(fault_not_applicable(Fault::weight_not_wired, llama, c, 1, 0).has_value());
  EXPECT_TRUE(fault_not_applicable(Fault::rope_position_ignored, llama, c, 1, 1).has_value());
  EXPECT_FALSE(fault_not_applicable(Fault::rope_position_ignored, llama, c, 1, 2).has_value());
  EXPECT_TRUE(fault_not_applicable(Fault::kv_not_written_decode, llama, c, 5, 1).has_value());
  EXPECT_TRUE(fault_not_applicable(Fault::token_id_bookkeeping, llama, c, 5, 0).has_value());
  EXPECT_FALSE(fault_not_applicable(Fault::token_id_bookkeeping, llama, c, 5, 1).has_value());
  EXPECT_TRUE(fault_not_applicable(Fault::kv_layer_shared, llama, c, 5, 1).has_value());
  EXPECT_TRUE(fault_not_applicable(Fault::attn_keys_off_by_one, llama, c, 1, 4).has_value());
  EXPECT_TRUE(fault_not_applicable(Fault::softmax_sum_all_keys, llama, c, 1, 4).has_value());
  EXPECT_TRUE(fault_not_applicable(Fault::lm_head_stale_row, llama, c, 1, 4).has_value());
  EXPECT_TRUE(fault_not_applicable(Fault::lm_head_stale_row, llama, c, 5, 1).has_value());
  EXPECT_TRUE(fault_not_applicable(Fault::dequant_q8_unsigned, llama, c, 5, 4).has_value());
  EXPECT_FALSE(fault_not_applicable(Fault::dequant_q8_unsigned, q8, c, 5, 4).has_value());
  EXPECT_FALSE(fault_not_applicable(Fault::embed_scaled, llama, c, 1, 0).has_value());
  EXPECT_TRUE(fault_not_applicable(Fault::kv_decode_write_late, llama, c, 5, 1).has_value());
  EXPECT_TRUE(fault_not_applicable(Fault::dequant_q8_block_stride, llama, c, 5, 4).has_value());
  EXPECT_FALSE(fault_not_applicable(Fault::dequant_q8_block_stride, q8, c, 5, 4).has_value());
  EXPECT_TRUE(fault_not_applicable(Fault::rope_freq_n_embd, llama, c, 1, 1).has_value());
  EXPECT_FALSE(fault_not_applicable(Fault::resid_attn_doubled, llama, c, 1, 0).has_value());
}

// ffn-dim-wrong reads the first n_embd rows of the FFN weights: refused when n_ff <= n_embd,
// where that read would leave the buffers (or change nothing).
TEST(FaultInjection, FfnDimWrongRefusedUnlessNffExceedsNembd) {
  FixtureSpec narrow = llama_spec();
  narrow.n_ff = narrow.n_embd;
  const GgufFile model = fixture_file(narrow);
  const ModelConfig c = load_model_config(model);
  const auto why = fault_not_applicable(Fault::ffn_dim_wrong, model, c, 5, 4);
  ASSERT_TRUE(why.has_value());
  EXPECT_NE(why->find("n_ff 64 is not larger than n_embd 64"), std::string::npos) << *why;
  EngineOptions o;
  o.fault = "ffn-dim-wrong";
  EXPECT_THROW(generate(model, {1, 2, 3}, o, nullptr), std::invalid_argument);
}

// The faulty run records its FFN taps n_embd wide: the shape the diff reports.
TEST(FaultInjection, FfnDimWrongRecordsNembdWideFfnTaps) {
  const GgufFile model = fixture_file(llama_spec());
  EngineOptions o;
  o.n_predict = 2;
  o.fault = "ffn-dim-wrong";
  const TempTrace trace("ffn_dim_wrong");
  run_engine(model, {1, 2, 3}, o, trace.path);
  const TraceReader r(trace.path);
  for (const char* tap : {"ffn_gate", "ffn_up", "ffn.act"})
    EXPECT_EQ(r.tap(tap, 0).row_shape, std::vector<std::int64_t>{64}) << tap;  // n_ff is 128
  EXPECT_EQ(r.tap("ffn_down", 1).row_shape, std::vector<std::int64_t>{64});
}

}  // namespace
}  // namespace tapdiff::engine
