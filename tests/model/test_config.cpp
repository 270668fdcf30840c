// ModelConfig from GGUF metadata: both architectures, defaults, and errors that name the key.
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <gtest/gtest.h>

#include "fixtures/tiny_model.hpp"
#include "model/config.hpp"
#include "model/error.hpp"
#include "model/quantize.hpp"

namespace tapdiff {
namespace {

GgufFile parse(const GgufWriter& w) { return GgufFile::from_bytes("cfg.gguf", w.to_bytes()); }

std::string config_error(const GgufWriter& w) {
  try {
    load_model_config(parse(w));
  } catch (const InputError& e) {
    return e.what();
  }
  return "accepted";
}

TEST(ModelConfig, LlamaFixture) {
  FixtureSpec spec;
  spec.n_layer = 3;
  spec.n_embd = 64;
  spec.n_head = 8;
  spec.n_head_kv = 2;
  spec.n_ff = 96;
  spec.n_vocab = 300;
  const ModelConfig c = load_model_config(parse(build_fixture(spec)));
  EXPECT_EQ(c.arch, Arch::llama);
  EXPECT_EQ(c.n_layer, 3);
  EXPECT_EQ(c.n_embd, 64);
  EXPECT_EQ(c.n_head, 8);
  EXPECT_EQ(c.n_head_kv, 2);
  EXPECT_EQ(c.head_dim, 8);
  EXPECT_EQ(c.gqa_group(), 4);
  EXPECT_EQ(c.kv_dim(), 16);
  EXPECT_EQ(c.n_ff, 96);
  EXPECT_EQ(c.n_vocab, 300);
  EXPECT_EQ(c.n_rot, 8);
  EXPECT_EQ(c.rope_pairing, RopePairing::norm);
  EXPECT_FLOAT_EQ(c.rope_freq_base, 10000.0f);
  EXPECT_FLOAT_EQ(c.rms_eps, 1e-5f);
  EXPECT_FALSE(c.tied_output);
  EXPECT_FALSE(c.qkv_bias);
}

TEST(ModelConfig, Qwen2FixtureUsesNeoxAndBiases) {
  FixtureSpec spec;
  spec.arch = Arch::qwen2;
  spec.tied_output = true;
  const ModelConfig c = load_model_config(parse(build_fixture(spec)));
  EXPECT_EQ(c.arch, Arch::qwen2);
  EXPECT_EQ(c.rope_pairing, RopePairing::neox);
  EXPECT_TRUE(c.qkv_bias);
  EXPECT_TRUE(c.tied_output);
  EXPECT_FLOAT_EQ(c.rope_freq_base, 1e6f);
  EXPECT_FLOAT_EQ(c.rms_eps, 1e-6f);
}

// SmolLM3: llama's keys and tensors, and no RoPE in layers 3, 7, 11, ... (llama.cpp's
// n_no_rope_layer_step, fixed by the architecture: no key says so). Whole heads rotate, as llama's.
TEST(ModelConfig, SmolLM3LeavesEveryFourthLayerUnrotated) {
  FixtureSpec spec;
  spec.arch = Arch::smollm3;
  spec.n_layer = 8;
  const ModelConfig c = load_model_config(parse(build_fixture(spec)));
  EXPECT_EQ(c.arch, Arch::smollm3);
  EXPECT_EQ(c.rope_pairing, RopePairing::norm);
  EXPECT_EQ(c.nope_period, 4);
  for (int l = 0; l < 8; ++l) EXPECT_EQ(c.rotates(l), l != 3 && l != 7) << "layer " << l;
  FixtureSpec llama;
  llama.n_layer = 8;
  const ModelConfig every = load_model_config(parse(build_fixture(llama)));
  for (int l = 0; l < 8; ++l) EXPECT_TRUE(every.rotates(l)) << "layer " << l;

  GgufWriter partial = build_fixture(spec);
  partial.set("smollm3.rope.dimension_count", GgufValue::u32(8));
  EXPECT_EQ(config_error(partial), "cfg.gguf: smollm3.rope.dimension_count: expected head_dim 16 (smollm3 rotates whole "
                                   "heads; llama.cpp refuses any other count), got 8");
}

// A copy of `base` without the metadata keys in `drop`.
GgufWriter without_keys(const GgufFile& base, const std::vector<std::string>& drop) {
  GgufWriter w;
  for (const auto& [k, v] : base.metadata())
    if (std::find(drop.begin(), drop.end(), k) == drop.end()) w.set(k, v);
  for (const auto& t : base.tensors())
    w.add_tensor(t.name, t.type, t.ne, std::vector<std::uint8_t>(t.data, t.data + t.n_bytes));
  return w;
}

TEST(ModelConfig, OptionalKeysTakeLlamaCppDefaults) {
  const GgufFile base = parse(build_fixture(FixtureSpec{}));
  const ModelConfig c = load_model_config(
      parse(without_keys(base, {"llama.rope.freq_base", "llama.rope.dimension_count"})));
  EXPECT_FLOAT_EQ(c.rope_freq_base, 10000.0f);
  EXPECT_EQ(c.n_rot, c.head_dim);
}

TEST(ModelConfig, HeadCountKvDefaultsToHeadCount) {
  // Without head_count_kv the model is plain multi-head, so k/v weights must be n_embd wide:
  // the fixture's GQA weights are then reported with both shapes.
  const GgufFile base = parse(build_fixture(FixtureSpec{}));
  EXPECT_EQ(config_error(without_keys(base, {"llama.attention.head_count_kv"})),
            "cfg.gguf: tensor \"blk.0.attn_k.weight\": expected shape [64, 64], got [64, 32]");
}

struct BadConfigCase {
  const char* what;
  const char* key;
  GgufValue value;  // the key's value, added or replacing the fixture's
  bool remove;
  const char* expected;
};

// Each case: the fixture of `spec` with the key replaced (or removed) fails with the expected message.
template <std::size_t N>
void check_bad_metadata(const BadConfigCase (&cases)[N], const FixtureSpec& spec) {
  const GgufFile base = parse(build_fixture(spec));
  for (const auto& c : cases) {
    GgufWriter w;
    for (const auto& [k, v] : base.metadata())
      if (k != c.key) w.set(k, v);
    if (!c.remove) w.set(c.key, c.value);
    for (const auto& t : base.tensors())
      w.add_tensor(t.name, t.type, t.ne, std::vector<std::uint8_t>(t.data, t.data + t.n_bytes));
    const std::string message = config_error(w);
    EXPECT_NE(message.find(c.expected), std::string::npos)
        << c.what << "\n  expected: " << c.expected << "\n  got:      " << message;
  }
}

// Gemma 2 and 3 27B scale scores by 1/sqrt(n_embd / n_head), no key saying so: llama.cpp knows
// them by their layer counts (46, 62). Every other model, by 1/sqrt(head_dim).
TEST(ModelConfig, Gemma27BAttentionScaleByLayerCount) {
  struct Case {
    Arch arch;
    int n_layer;
    int scale_dim;
  };
  for (const Case& k : {Case{Arch::gemma2, 46, 16}, Case{Arch::gemma3, 62, 16}, Case{Arch::gemma2, 42, 32},
                        Case{Arch::gemma3, 48, 32}, Case{Arch::gemma3, 46, 32}, Case{Arch::qwen3, 62, 32}}) {
    FixtureSpec spec;
    spec.arch = k.arch;
    spec.n_layer = k.n_layer;
    spec.head_dim = 32;  // n_embd 64 / 4 heads = 16
    const ModelConfig c = load_model_config(parse(build_fixture(spec)));
    EXPECT_EQ(c.attn_scale_dim, k.scale_dim) << arch_name(k.arch) << " " << k.n_layer;
    EXPECT_FLOAT_EQ(c.attn_scale(), 1.0f / std::sqrt(float(k.scale_dim)));
  }
}

TEST(ModelConfig, BadMetadataNamesTheKey) {
  const BadConfigCase cases[] = {
      {"unknown architecture", "general.architecture", GgufValue::string("mamba"), false,
       "cfg.gguf: general.architecture: expected one of llama, qwen2, qwen3, gemma2, gemma3, phi3, qwen3moe, "
       "smollm3, mistral3, granite, granitemoe, got \"mamba\""},
      {"architecture missing", "general.architecture", {}, true,
       "cfg.gguf: general.architecture: required metadata key is missing"},
      {"block_count missing", "llama.block_count", {}, true,
       "cfg.gguf: llama.block_count: required metadata key is missing"},
      {"block_count a string", "llama.block_count", GgufValue::string("2"), false,
       "cfg.gguf: llama.block_count: expected a non-negative integer, got string \"2\""},
      {"block_count beyond the tensors", "llama.block_count", GgufValue::u32(2147483647), false,
       "cfg.gguf: llama.block_count: expected at most 3 blocks (the file holds 21 tensors; each "
       "block has at least 6 and the embedding and output norm 2 more), got 2147483647"},
      {"q width overflows", "llama.attention.key_length", GgufValue::u32(1u << 30), false,
       "cfg.gguf: llama.attention.key_length: expected head_count × key_length to fit in 32 "
       "bits, got 4 × 1073741824"},
      {"zero heads", "llama.attention.head_count", GgufValue::u32(0), false,
       "cfg.gguf: llama.attention.head_count: expected a positive 32-bit count, got 0"},
      {"kv heads do not divide heads", "llama.attention.head_count_kv", GgufValue::u32(3), false,
       "cfg.gguf: llama.attention.head_count_kv: expected a divisor of head_count 4, got 3"},
      {"eps missing", "llama.attention.layer_norm_rms_epsilon", {}, true,
       "cfg.gguf: llama.attention.layer_norm_rms_epsilon: required metadata key is missing"},
      {"eps a string", "llama.attention.layer_norm_rms_epsilon", GgufValue::string("1e-5"), false,
       "cfg.gguf: llama.attention.layer_norm_rms_epsilon: expected a number, got string"},
      {"rope dims odd", "llama.rope.dimension_count", GgufValue::u32(7), false,
       "cfg.gguf: llama.rope.dimension_count: expected an even count <= head_dim 16, got 7"},
      {"llama rotating part of each head", "llama.rope.dimension_count", GgufValue::u32(8), false,
       "cfg.gguf: llama.rope.dimension_count: expected head_dim 16 (llama rotates whole heads; llama.cpp refuses "
       "any other count), got 8"},
      {"vocab size disagrees", "tokenizer.ggml.tokens", GgufValue::strings({"a", "b"}), false,
       "cfg.gguf: tokenizer.ggml.tokens: expected 320 tokens (token_embd.weight rows), got 2"},
  };
  check_bad_metadata(cases, FixtureSpec{});
}

// Gemma 2's keys: soft-caps and the sliding window.
TEST(ModelConfig, BadGemma2MetadataNamesTheKey) {
  const BadConfigCase cases[] = {
      {"negative attention soft-cap", "gemma2.attn_logit_softcapping", GgufValue::f32(-50.0f), false,
       "cfg.gguf: gemma2.attn_logit_softcapping: expected a finite cap >= 0 (0: none), got -50"},
      {"final soft-cap not a number", "gemma2.final_logit_softcapping", GgufValue::string("30"), false,
       "cfg.gguf: gemma2.final_logit_softcapping: expected a number, got string"},
      {"window beyond the context", "gemma2.attention.sliding_window", GgufValue::u32(4096), false,
       "cfg.gguf: gemma2.attention.sliding_window: expected a window within the context length 512, got 4096"},
      {"zero window", "gemma2.attention.sliding_window", GgufValue::u32(0), false,
       "cfg.gguf: gemma2.attention.sliding_window: expected a positive 32-bit count, got 0"},
      {"sliding layers' base below 1", "gemma2.rope.freq_base_swa", GgufValue::f32(0.5f), false,
       "cfg.gguf: gemma2.rope.freq_base_swa: expected a finite base > 1, got 0.5"},
      {"zero pattern (every layer sliding)", "gemma2.attention.sliding_window_pattern", GgufValue::u32(0), false,
       "cfg.gguf: gemma2.attention.sliding_window_pattern: expected a positive 32-bit count, got 0"},
      {"pattern of another length", "gemma2.attention.sliding_window_pattern",
       GgufValue::array(GgufValueType::BOOL, {GgufValue::boolean(true)}), false,
       "cfg.gguf: gemma2.attention.sliding_window_pattern: expected 2 bools, one per layer, got array<bool>[1]"},
      {"pattern of no period", "gemma2.attention.sliding_window_pattern",
       GgufValue::array(GgufValueType::BOOL, {GgufValue::boolean(true), GgufValue::boolean(true)}), false,
       "cfg.gguf: gemma2.attention.sliding_window_pattern: expected a periodic pattern (layer l sliding when "
       "l % n < n - 1 for some n); tapdiff runs no other, got one that is not"},
  };
  FixtureSpec gemma2;
  gemma2.arch = Arch::gemma2;
  check_bad_metadata(cases, gemma2);
}

// The keys llama.cpp reads for the Gemmas' sliding layers: their own RoPE base (the converter writes
// it from HF's rope_parameters) and which layers slide (a period, or one bool per layer).
TEST(ModelConfig, GemmaSlidingLayersFromTheirKeys) {
  FixtureSpec spec;
  spec.arch = Arch::gemma3;
  spec.n_layer = 6;
  const ModelConfig plain = load_model_config(parse(build_fixture(spec)));
  EXPECT_FLOAT_EQ(plain.rope_base(0), 10000.0f);
  EXPECT_FLOAT_EQ(plain.rope_base(5), 1e6f);
  spec.rope_freq_base_swa = 20000.0f;
  const GgufFile base = parse(build_fixture(spec));
  const ModelConfig own = load_model_config(base);
  EXPECT_FLOAT_EQ(own.rope_base(0), 20000.0f);
  EXPECT_FLOAT_EQ(own.rope_base(5), 1e6f);

  auto with_pattern = [&](const GgufValue& pattern) {
    GgufWriter w = without_keys(base, {});
    w.set("gemma3.attention.sliding_window_pattern", pattern);
    return load_model_config(parse(w));
  };
  const ModelConfig by_three = with_pattern(GgufValue::u32(3));
  EXPECT_EQ(by_three.swa_period, 3);
  EXPECT_TRUE(by_three.sliding(0) && by_three.sliding(1) && !by_three.sliding(2) && by_three.sliding(3));
  std::vector<GgufValue> every_other;
  for (int l = 0; l < 6; ++l) every_other.push_back(GgufValue::boolean(l % 2 == 0));
  EXPECT_EQ(with_pattern(GgufValue::array(GgufValueType::BOOL, every_other)).swa_period, 2);
  const ModelConfig none = with_pattern(GgufValue::u32(1));
  for (int l = 0; l < 6; ++l) EXPECT_FALSE(none.sliding(l)) << l;
}

// RoPE scaling as llama.cpp reads it: the type defaults to linear and the factor to 1 (none), the
// older rope.scale_linear stands for the factor, "none" never scales; YaRN's original context
// defaults to the context length. Gemma 3 scales its global layers only.
TEST(ModelConfig, RopeScalingLinearAndYarn) {
  FixtureSpec yarn;
  yarn.arch = Arch::qwen3;
  yarn.rope_scaling = RopeScalingType::yarn;
  const ModelConfig y = load_model_config(parse(build_fixture(yarn)));
  EXPECT_EQ(y.rope_scaling.type, RopeScalingType::yarn);
  EXPECT_FLOAT_EQ(y.rope_scaling.factor, 4.0f);
  EXPECT_EQ(y.rope_scaling.n_ctx_orig, 128);
  EXPECT_FLOAT_EQ(y.rope_scaling.beta_fast, 32.0f);
  EXPECT_FLOAT_EQ(y.rope_scaling.beta_slow, 1.0f);
  EXPECT_TRUE(y.rope_scaling_of(0).scales() && y.rope_scaling_of(1).scales());

  FixtureSpec gemma3;
  gemma3.arch = Arch::gemma3;
  gemma3.n_layer = 6;
  gemma3.rope_scaling = RopeScalingType::linear;
  const ModelConfig g = load_model_config(parse(build_fixture(gemma3)));
  EXPECT_EQ(g.rope_scaling.type, RopeScalingType::linear);
  EXPECT_FLOAT_EQ(g.rope_scaling.factor, 8.0f);
  for (int l = 0; l < 6; ++l) EXPECT_EQ(g.rope_scaling_of(l).scales(), l == 5) << "layer " << l;

  const auto with = [](const FixtureSpec& spec, std::vector<std::pair<std::string, GgufValue>> keys) {
    GgufWriter w = build_fixture(spec);
    for (auto& [k, v] : keys) w.set(k, v);
    return load_model_config(parse(w)).rope_scaling;
  };
  const FixtureSpec plain;
  EXPECT_EQ(with(plain, {{"llama.rope.scale_linear", GgufValue::f32(2.0f)}}).type, RopeScalingType::linear);
  EXPECT_FLOAT_EQ(with(plain, {{"llama.rope.scale_linear", GgufValue::f32(2.0f)}}).factor, 2.0f);
  EXPECT_FALSE(with(plain, {{"llama.rope.scaling.type", GgufValue::string("none")},
                            {"llama.rope.scaling.factor", GgufValue::f32(4.0f)}}).scales());
  EXPECT_FALSE(with(plain, {{"llama.rope.scaling.type", GgufValue::string("yarn")},
                            {"llama.rope.scaling.factor", GgufValue::f32(1.0f)}}).scales());
  GgufWriter linear_attn_factor = build_fixture(plain);
  linear_attn_factor.set("llama.rope.scaling.factor", GgufValue::f32(2.0f));
  linear_attn_factor.set("llama.rope.scaling.attn_factor", GgufValue::f32(0.5f));
  EXPECT_EQ(config_error(linear_attn_factor),
            "cfg.gguf: llama.rope.scaling.attn_factor: expected 1 without YaRN scaling (llama.cpp and transformers "
            "disagree on any other), got 0.5");
  linear_attn_factor.set("llama.rope.scaling.factor", GgufValue::f32(1.0f));
  EXPECT_NE(config_error(linear_attn_factor).find("attn_factor: expected 1 without YaRN"), std::string::npos);
  const RopeScaling betas = with(plain, {{"llama.rope.scaling.type", GgufValue::string("yarn")},
                                         {"llama.rope.scaling.factor", GgufValue::f32(4.0f)},
                                         {"llama.rope.scaling.yarn_beta_fast", GgufValue::f32(16.0f)},
                                         {"llama.rope.scaling.yarn_beta_slow", GgufValue::f32(2.0f)}});
  EXPECT_EQ(betas.n_ctx_orig, 512);
  EXPECT_FLOAT_EQ(betas.beta_fast, 16.0f);
  EXPECT_FLOAT_EQ(betas.beta_slow, 2.0f);
}

// Phi-3.5's LongRoPE: factor tensors, the short ones for a run within the original context and
// the long ones past it (llama.cpp's choice, by the run's context), and an attention factor.
TEST(ModelConfig, LongRopeFactorsFollowTheRunsContext) {
  FixtureSpec phi3;
  phi3.arch = Arch::phi3;
  phi3.rope_scaling = RopeScalingType::longrope;
  const GgufFile f = parse(build_fixture(phi3));
  const ModelConfig c = load_model_config(f);
  EXPECT_EQ(c.rope_scaling.type, RopeScalingType::longrope);
  EXPECT_EQ(c.rope_scaling.n_ctx_orig, 16);
  EXPECT_FLOAT_EQ(c.rope_scaling.attn_factor, 1.5f);  // sqrt(1 + ln 32 / ln 16)
  EXPECT_STREQ(c.rope_factors_tensor(16), "rope_factors_short.weight");
  EXPECT_STREQ(c.rope_factors_tensor(17), "rope_factors_long.weight");
  EXPECT_EQ(c.rope_factors_tensors().size(), 2u);

  GgufWriter zero;
  for (const auto& [k, v] : f.metadata()) zero.set(k, v);
  for (const auto& t : f.tensors())
    if (t.name == "rope_factors_long.weight")
      zero.add_tensor(t.name, GgmlType::F32, t.ne, quantize(GgmlType::F32, std::vector<float>(8, 0.0f)));
    else
      zero.add_tensor(t.name, t.type, t.ne, std::vector<std::uint8_t>(t.data, t.data + t.n_bytes));
  EXPECT_EQ(config_error(zero),
            "cfg.gguf: tensor \"rope_factors_long.weight\": expected finite frequency factors > 0 (each divides a "
            "RoPE angle), got 0 at index 0");

  GgufWriter llama = build_fixture(FixtureSpec{});
  llama.add_tensor("rope_factors_long.weight", GgmlType::F32, {8}, quantize(GgmlType::F32, std::vector<float>(8, 1)));
  EXPECT_EQ(config_error(llama),
            "cfg.gguf: tensor \"rope_factors_long.weight\": expected LongRoPE factors in a phi3 model only (llama.cpp "
            "reads them for phi3), got llama");
}

TEST(ModelConfig, BadRopeScalingNamesTheKey) {
  const BadConfigCase cases[] = {
      {"LongRoPE", "qwen3.rope.scaling.type", GgufValue::string("longrope"), false,
       "cfg.gguf: qwen3.rope.scaling.type: expected \"none\", \"linear\" or \"yarn\" (the RoPE scalings tapdiff "
       "implements), got \"longrope\""},
      {"factor below 1", "qwen3.rope.scaling.factor", GgufValue::f32(0.5f), false,
       "cfg.gguf: qwen3.rope.scaling.factor: expected a finite factor > 1 (the context's extension), got 0.5"},
      {"original context zero", "qwen3.rope.scaling.original_context_length", GgufValue::u32(0), false,
       "cfg.gguf: qwen3.rope.scaling.original_context_length: expected a positive 32-bit count, got 0"},
      {"beta_slow past beta_fast", "qwen3.rope.scaling.yarn_beta_slow", GgufValue::f32(64.0f), false,
       "cfg.gguf: qwen3.rope.scaling.yarn_beta_fast: expected beta_fast > beta_slow 64, got 32"},
      {"negative log multiplier", "qwen3.rope.scaling.yarn_log_multiplier", GgufValue::f32(-1.0f), false,
       "cfg.gguf: qwen3.rope.scaling.yarn_log_multiplier: expected a finite value >= 0, got -1"},
      {"an extrapolation factor", "qwen3.rope.scaling.yarn_ext_factor", GgufValue::f32(0.5f), false,
       "cfg.gguf: qwen3.rope.scaling.yarn_ext_factor: expected no such key (tapdiff implements YaRN with an "
       "extrapolation factor of 1 and attn_factor only)"},
      {"a temperature outside mistral3", "qwen3.attention.temperature_scale", GgufValue::f32(0.1f), false,
       "cfg.gguf: qwen3.attention.temperature_scale: expected no attention temperature in a qwen3 model (llama.cpp "
       "reads it for mistral3)"},
  };
  FixtureSpec yarn;
  yarn.arch = Arch::qwen3;
  yarn.rope_scaling = RopeScalingType::yarn;
  check_bad_metadata(cases, yarn);
}

// Mistral 3 (Ministral 3): YaRN whose magnitude its log multiplier (HF's mscale_all_dim) sets, as
// llama.cpp computes it: get_mscale(f, 1) / get_mscale(f, m), 1 at m = 1; and Llama 4's attention
// temperature, ln(floor(p / original context) + 1) · beta + 1.
TEST(ModelConfig, Mistral3YarnMagnitudeAndTemperature) {
  FixtureSpec spec;
  spec.arch = Arch::mistral3;
  spec.n_ctx_train = 64;  // YaRN x16 over an original context of 4
  GgufWriter w = build_fixture(spec);
  const ModelConfig c = load_model_config(parse(w));
  EXPECT_EQ(c.rope_scaling.type, RopeScalingType::yarn);
  EXPECT_FLOAT_EQ(c.rope_scaling.factor, 16.0f);
  const auto magnitude = [](const RopeScaling& s) { return s.attn_factor * (0.1 * std::log(double(s.factor)) + 1); };
  EXPECT_NEAR(magnitude(c.rope_scaling), 1.0, 1e-6);
  EXPECT_FALSE(c.rope_scaling.scales_magnitude());
  EXPECT_EQ(c.attn_temp_floor, 4);
  EXPECT_FLOAT_EQ(c.attn_temp_scale, 0.1f);
  for (int p : {0, 3}) EXPECT_FLOAT_EQ(c.attn_temperature(p), 1.0f) << p;
  EXPECT_FLOAT_EQ(c.attn_temperature(4), float(0.1 * std::log(2.0) + 1));
  EXPECT_FLOAT_EQ(c.attn_temperature(13), float(0.1 * std::log(4.0) + 1));

  w.set("mistral3.rope.scaling.yarn_log_multiplier", GgufValue::f32(0.5f));
  const double f = 16, expected = (1 + 0.1 * std::log(f)) / (1 + 0.05 * std::log(f));
  EXPECT_NEAR(magnitude(load_model_config(parse(w)).rope_scaling), expected, 1e-6);
}

// Granite: its four multipliers as llama.cpp reads them, for granite alone; logit_scale required.
TEST(ModelConfig, GraniteMultipliers) {
  FixtureSpec spec;
  spec.arch = Arch::granite;
  GgufWriter w = build_fixture(spec);
  const ModelConfig c = load_model_config(parse(w));
  EXPECT_FLOAT_EQ(c.embedding_factor(), 12.0f);
  EXPECT_FLOAT_EQ(c.residual_factor(), 0.22f);
  EXPECT_FLOAT_EQ(c.attn_scale(), 1.0f / 16);  // Granite 3's 1/head_dim, not 1/sqrt(head_dim)
  EXPECT_FLOAT_EQ(c.logit_factor(), 1.0f / 8);

  // 0 means none, as in llama.cpp: the model's defaults return.
  w.set("granite.residual_scale", GgufValue::f32(0.0f));
  w.set("granite.attention.scale", GgufValue::f32(0.0f));
  const ModelConfig d = load_model_config(parse(w));
  EXPECT_FLOAT_EQ(d.residual_factor(), 1.0f);
  EXPECT_FLOAT_EQ(d.attn_scale(), 0.25f);

  // The same keys in a llama model are not llama's: llama.cpp ignores them, and so does tapdiff.
  GgufWriter l = build_fixture(FixtureSpec{});
  l.set("llama.logit_scale", GgufValue::f32(8.0f));
  l.set("llama.embedding_scale", GgufValue::f32(12.0f));
  const ModelConfig e = load_model_config(parse(l));
  EXPECT_FLOAT_EQ(e.logit_factor(), 1.0f);
  EXPECT_FLOAT_EQ(e.embedding_factor(), 1.0f);

  FixtureSpec granite;
  granite.arch = Arch::granite;
  const BadConfigCase cases[] = {
      {"logit scale missing", "granite.logit_scale", {}, true,
       "cfg.gguf: granite.logit_scale: required metadata key is missing"},
      {"logit scale 0", "granite.logit_scale", GgufValue::f32(0.0f), false,
       "cfg.gguf: granite.logit_scale: expected a finite divisor > 0 of the logits, got 0"},
      {"negative residual multiplier", "granite.residual_scale", GgufValue::f32(-0.22f), false,
       "cfg.gguf: granite.residual_scale: expected a finite multiplier >= 0 (0: none), got -0.2199999988079071"},
      {"embedding multiplier not a number", "granite.embedding_scale", GgufValue::string("12"), false,
       "cfg.gguf: granite.embedding_scale: expected a number, got string"},
  };
  check_bad_metadata(cases, granite);
}

// A mixture of experts: its counts, each expert's width, and the stacked tensors' shapes.
TEST(ModelConfig, Qwen3MoeFixtureRoutesToExperts) {
  FixtureSpec spec;
  spec.arch = Arch::qwen3moe;
  spec.n_ff = 48;
  const ModelConfig c = load_model_config(parse(build_fixture(spec)));
  EXPECT_EQ(c.arch, Arch::qwen3moe);
  EXPECT_TRUE(c.qk_norm);
  EXPECT_EQ(c.n_expert, 8);
  EXPECT_EQ(c.n_expert_used, 2);
  EXPECT_EQ(c.n_ff, 48);
  FixtureSpec mixtral;
  mixtral.n_expert = 4;
  mixtral.n_expert_used = 1;
  const ModelConfig m = load_model_config(parse(build_fixture(mixtral)));
  EXPECT_EQ(m.arch, Arch::llama);
  EXPECT_TRUE(m.moe());
  EXPECT_EQ(m.n_expert_used, 1);
  EXPECT_FALSE(load_model_config(parse(build_fixture(FixtureSpec{}))).moe());
}

TEST(ModelConfig, BadExpertMetadataNamesTheKey) {
  const BadConfigCase cases[] = {
      {"more used than there are", "qwen3moe.expert_used_count", GgufValue::u32(9), false,
       "cfg.gguf: qwen3moe.expert_used_count: expected at most expert_count 8, got 9"},
      {"used count missing", "qwen3moe.expert_used_count", {}, true,
       "cfg.gguf: qwen3moe.expert_used_count: required metadata key is missing"},
      {"no experts", "qwen3moe.expert_count", {}, true,
       "cfg.gguf: qwen3moe.expert_count: expected a positive expert count (a qwen3moe model routes every layer "
       "to experts)"},
      {"more experts than the tensors stack", "qwen3moe.expert_count", GgufValue::u32(16), false,
       "cfg.gguf: tensor \"blk.0.ffn_gate_inp.weight\": expected shape [64, 16], got [64, 8]"},
      {"a shared expert", "qwen3moe.expert_shared_feed_forward_length", GgufValue::u32(64), false,
       "cfg.gguf: qwen3moe.expert_shared_feed_forward_length: expected none: tapdiff runs routed experts only, "
       "without a shared expert (Granite MoE shared, Qwen2-MoE and DeepSeek's are not supported)"},
  };
  FixtureSpec spec;
  spec.arch = Arch::qwen3moe;
  check_bad_metadata(cases, spec);

  FixtureSpec granitemoe;
  granitemoe.arch = Arch::granitemoe;
  const BadConfigCase granite_cases[] = {
      {"no experts", "granitemoe.expert_count", {}, true,
       "cfg.gguf: granitemoe.expert_count: expected a positive expert count (a granitemoe model routes every layer "
       "to experts)"},
      {"logit scale missing", "granitemoe.logit_scale", {}, true,
       "cfg.gguf: granitemoe.logit_scale: required metadata key is missing"},
  };
  check_bad_metadata(granite_cases, granitemoe);
}

// The tensors qwen3 and Llama 3.1 add are checked like every other: shape, and for the RoPE
// frequency factors, values that can divide an angle.
TEST(ModelConfig, NewArchitectureTensorsAreChecked) {
  FixtureSpec qwen3;
  qwen3.arch = Arch::qwen3;
  qwen3.head_dim = 32;
  const ModelConfig q = load_model_config(parse(build_fixture(qwen3)));
  EXPECT_TRUE(q.qk_norm);
  EXPECT_EQ(q.head_dim, 32);
  EXPECT_EQ(q.q_dim(), 128);
  EXPECT_EQ(q.rope_pairing, RopePairing::neox);
  FixtureSpec llama3;
  llama3.llama3 = true;
  const ModelConfig l = load_model_config(parse(build_fixture(llama3)));
  EXPECT_TRUE(l.rope_freq_factors);
  EXPECT_FLOAT_EQ(l.rope_freq_base, 500000.0f);

  const auto replaced = [](const GgufFile& base, const std::string& name, std::vector<std::int64_t> ne,
                           std::vector<float> values) {
    GgufWriter w;
    for (const auto& [k, v] : base.metadata()) w.set(k, v);
    for (const auto& t : base.tensors())
      if (t.name == name)
        w.add_tensor(name, GgmlType::F32, ne, quantize(GgmlType::F32, values));
      else
        w.add_tensor(t.name, t.type, t.ne, std::vector<std::uint8_t>(t.data, t.data + t.n_bytes));
    return w;
  };
  FixtureSpec gemma2;
  gemma2.arch = Arch::gemma2;
  const ModelConfig g = load_model_config(parse(build_fixture(gemma2)));
  EXPECT_TRUE(g.post_norms && g.embed_scale && g.tied_output);
  EXPECT_EQ(g.activation, Activation::gelu);
  EXPECT_FLOAT_EQ(g.attn_softcap, 1.0f);
  EXPECT_FLOAT_EQ(g.final_softcap, 2.0f);
  EXPECT_EQ(g.sliding_window, 4);
  EXPECT_TRUE(g.sliding(0) && !g.sliding(1) && g.sliding(2));
  const GgufFile q3 = parse(build_fixture(qwen3)), l3 = parse(build_fixture(llama3));
  EXPECT_EQ(config_error(replaced(q3, "blk.1.attn_k_norm.weight", {16}, std::vector<float>(16, 1.0f))),
            "cfg.gguf: tensor \"blk.1.attn_k_norm.weight\": expected shape [32], got [16]");
  EXPECT_EQ(config_error(replaced(l3, "rope_freqs.weight", {4}, std::vector<float>(4, 1.0f))),
            "cfg.gguf: tensor \"rope_freqs.weight\": expected shape [8], got [4]");
  FixtureSpec phi3;
  phi3.arch = Arch::phi3;
  const GgufFile p3 = parse(build_fixture(phi3));
  const ModelConfig p = load_model_config(p3);
  EXPECT_TRUE(p.fused_qkv && p.fused_gate_up);
  EXPECT_EQ(config_error(replaced(p3, "blk.0.attn_qkv.weight", {64, 64}, std::vector<float>(64 * 64, 0.0f))),
            "cfg.gguf: tensor \"blk.0.attn_qkv.weight\": expected shape [64, 128], got [64, 64]");
  GgufWriter longrope = replaced(p3, "", {}, {});
  longrope.add_tensor("rope_factors_long.weight", GgmlType::F32, {8}, quantize(GgmlType::F32, std::vector<float>(8, 1)));
  // LongRoPE's two sets of factors come together.
  EXPECT_EQ(config_error(longrope),
            "cfg.gguf: tensor \"rope_factors_short.weight\": required tensor is missing (expected shape [8])");
  std::vector<float> zero(8, 1.0f);
  zero[5] = 0.0f;
  EXPECT_EQ(config_error(replaced(l3, "rope_freqs.weight", {8}, zero)),
            "cfg.gguf: tensor \"rope_freqs.weight\": expected finite frequency factors > 0 (each divides a RoPE "
            "angle), got 0 at index 5");
}

TEST(ModelConfig, MissingWeightNamesTheTensorAndShape) {
  const GgufFile base = parse(build_fixture(FixtureSpec{}));
  GgufWriter w;
  for (const auto& [k, v] : base.metadata()) w.set(k, v);
  for (const auto& t : base.tensors())
    if (t.name != "blk.1.ffn_up.weight")
      w.add_tensor(t.name, t.type, t.ne, std::vector<std::uint8_t>(t.data, t.data + t.n_bytes));
  EXPECT_EQ(config_error(w),
            "cfg.gguf: tensor \"blk.1.ffn_up.weight\": required tensor is missing (expected "
            "shape [64, 128])");
}

// A tensor the forward pass would not read (a bias llama.cpp adds, another architecture's norm) is
// refused: a run without it would silently be another model's.
TEST(ModelConfig, UnreadTensorNamesTheTensor) {
  GgufWriter w = build_fixture(FixtureSpec{});
  w.add_tensor("blk.1.attn_output.bias", GgmlType::F32, {64}, quantize(GgmlType::F32, std::vector<float>(64, 0.5f)));
  EXPECT_EQ(config_error(w),
            "cfg.gguf: tensor \"blk.1.attn_output.bias\": expected no such tensor (tapdiff's llama forward pass would "
            "not read it, and a run would silently compute another model)");
}

// The real model in ../shared, when present: its metadata as SOURCES.md describes it.
TEST(ModelConfig, Stories260K) {
  const std::filesystem::path model =
      std::filesystem::path(TAPDIFF_SOURCE_DIR) / ".." / "shared" / "models" / "stories260K.gguf";
  if (!std::filesystem::exists(model)) GTEST_SKIP() << "no " << model << " (shared models absent)";
  const GgufFile f = GgufFile::open(model.string());
  EXPECT_EQ(f.version(), 3u);
  EXPECT_EQ(f.tensors().size(), 48u);
  const ModelConfig c = load_model_config(f);
  EXPECT_EQ(c.arch, Arch::llama);
  EXPECT_EQ(c.n_layer, 5);
  EXPECT_EQ(c.n_embd, 64);
  EXPECT_EQ(c.n_head, 8);
  EXPECT_EQ(c.n_head_kv, 4);
  EXPECT_EQ(c.head_dim, 8);
  EXPECT_EQ(c.n_ff, 172);
  EXPECT_EQ(c.n_vocab, 512);
  EXPECT_EQ(c.n_ctx_train, 2048);
  EXPECT_EQ(c.n_rot, 8);
  EXPECT_FLOAT_EQ(c.rope_freq_base, 10000.0f);
  EXPECT_EQ(c.rope_pairing, RopePairing::norm);
  EXPECT_FLOAT_EQ(c.rms_eps, 9.999999747378752e-06f);
  EXPECT_FALSE(c.tied_output);
  EXPECT_FALSE(c.qkv_bias);
}

}  // namespace
}  // namespace tapdiff
