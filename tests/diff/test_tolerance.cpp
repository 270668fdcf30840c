// Tolerance profiles: built-ins, JSON overrides, and errors that name the file and the key.
#include <gtest/gtest.h>

#include "diff/tolerance.hpp"
#include "model/error.hpp"

namespace tapdiff::diff {
namespace {

std::string parse_error(const std::string& json) {
  try {
    parse_profile(json, "p.json");
  } catch (const InputError& e) {
    return e.what();
  }
  return "accepted";
}

TEST(DiffTolerance, BuiltinsGrowWithRounding) {
  const auto f32 = builtin_profile("f32"), f16 = builtin_profile("f16"), bf16 = builtin_profile("bf16");
  EXPECT_LT(f32.threshold("projection"), f16.threshold("projection"));
  EXPECT_LT(f16.threshold("projection"), bf16.threshold("projection"));
  EXPECT_EQ(profile_for_precision("f16").name, "f16");
  EXPECT_EQ(profile_for_precision("f64").name, "f32");
  EXPECT_THROW(builtin_profile("fp8"), std::invalid_argument);
  const auto q8 = builtin_profile("q8");
  EXPECT_LT(bf16.threshold("projection"), q8.threshold("projection"));
}

TEST(DiffTolerance, TwoTracesAreJudgedByTheLooserPrecision) {
  // The reference (f32) against llama.cpp on quantized weights (q8), on either side.
  EXPECT_EQ(profile_for_precisions("f32", "q8").name, "q8");
  EXPECT_EQ(profile_for_precisions("q8", "f32").name, "q8");
  EXPECT_EQ(profile_for_precisions("f16", "bf16").name, "bf16");
  EXPECT_EQ(profile_for_precisions("f64", "f32").name, "f32");
  EXPECT_EQ(profile_for_precisions("f32", "fp4-mystery").name, "f32");
  // q8's default threshold is bf16's; its GEMMs' are coarser: q8 is the looser either way.
  EXPECT_EQ(profile_for_precisions("q8", "bf16").name, "q8");
  EXPECT_EQ(profile_for_precisions("bf16", "q8").name, "q8");
}

TEST(DiffTolerance, Q8IsCoarseForGemmsAndReplaysTheRest) {
  const auto q8 = builtin_profile("q8");
  EXPECT_EQ(q8.threshold("projection"), 3e-2);
  EXPECT_EQ(q8.threshold("logits"), 3e-2);
  for (const char* cls : {"attention", "norm", "rope", "activation", "residual", "cache", "embedding"})
    EXPECT_EQ(q8.threshold(cls), 3e-3) << cls;
  EXPECT_EQ(q8.replay_band_nmse, 3e-2);
  EXPECT_EQ(builtin_profile("bf16").replay_band_nmse, 0);
}

TEST(DiffTolerance, JsonOverridesOnTopOfABase) {
  const auto p = parse_profile(R"({"base": "f16", "jump_factor": 4, "nmse": {"rope": 1e-6}})", "p.json");
  EXPECT_EQ(p.jump_factor, 4);
  EXPECT_EQ(p.threshold("rope"), 1e-6);
  EXPECT_EQ(p.threshold("projection"), builtin_profile("f16").threshold("projection"));
  // A q8 base keeps the classes it lists; 0 turns its replay band off.
  const auto q = parse_profile(R"({"base": "q8", "default_nmse": 1e-3, "replay_band_nmse": 0})", "q.json");
  EXPECT_EQ(q.threshold("norm"), 1e-3);
  EXPECT_EQ(q.threshold("projection"), 3e-2);
  EXPECT_EQ(q.replay_band_nmse, 0);
  // Only f32 has suspects under its threshold; 0 turns them off.
  EXPECT_GT(builtin_profile("f32").own_error_floor_nmse, 0);
  EXPECT_LT(builtin_profile("f32").own_error_floor_nmse, builtin_profile("f32").default_nmse);
  EXPECT_EQ(builtin_profile("f16").own_error_floor_nmse, 0);
  EXPECT_EQ(parse_profile(R"({"base": "f32", "own_error_floor_nmse": 0})", "f.json").own_error_floor_nmse, 0);
}

TEST(DiffTolerance, BadProfilesNameTheKey) {
  EXPECT_NE(parse_error("{").find("p.json: profile: expected JSON"), std::string::npos);
  // Found by fuzz_tolerance: a number beyond double range escaped as nlohmann's out_of_range.
  EXPECT_NE(parse_error(R"({"base": "f32", "jump_factor": 1e400})")
                .find("p.json: profile: expected JSON: [json.exception.out_of_range.406] number "
                      "overflow parsing '1e400'"),
            std::string::npos);
  EXPECT_EQ(parse_error("[1]"), "p.json: profile: expected a JSON object");
  EXPECT_EQ(parse_error("{}"), "p.json: base: expected a string naming the profile to start from: f32, f16, bf16 or q8");
  EXPECT_EQ(parse_error(R"({"base": "fp8"})"), "p.json: base: expected f32, f16, bf16 or q8, got \"fp8\"");
  EXPECT_EQ(parse_error(R"({"base": "q8", "replay_band_nmse": -1})"),
            "p.json: replay_band_nmse: expected a positive number, got -1");
  EXPECT_EQ(parse_error(R"({"base": "f32", "jump_factor": "x"})"), "p.json: jump_factor: expected a number, got \"x\"");
  EXPECT_EQ(parse_error(R"({"base": "f32", "jump_factor": -1})"), "p.json: jump_factor: expected a positive number, got -1");
  EXPECT_EQ(parse_error(R"({"base": "f32", "nmse": {"ropes": 1}})").rfind("p.json: nmse.ropes: unknown tap class", 0), 0u);
  EXPECT_EQ(parse_error(R"({"base": "f32", "colour": 1})"),
            "p.json: colour: unknown key (expected base, jump_factor, default_nmse, nmse, replay_band_nmse, own_error_floor_nmse)");
}

}  // namespace
}  // namespace tapdiff::diff
