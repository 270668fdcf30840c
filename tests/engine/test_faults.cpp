// The fault catalogue: its table, and for every fault, injected on a fixture where it
// applies, the first divergence from the clean run of the same engine at the layer, tap and
// position docs/faults.md states (the rule: fault_cases.hpp).
#include <gtest/gtest.h>
#include <set>

#include "fault_cases.hpp"

namespace tapdiff::engine {
namespace {

using namespace test;

TEST(FaultCatalogue, SixteenFaultsInDesignOrderWithEveryField) {
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
                                          "norm-weight-dropped"};
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
}

}  // namespace
}  // namespace tapdiff::engine
