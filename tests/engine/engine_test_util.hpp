// Shared helpers of the engine tests: fixtures in memory, engine and reference runs traced to
// temporary files, and tap-by-tap trace comparison.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <string>
#include <unistd.h>
#include <vector>

#include <gtest/gtest.h>

#include "engine/generate.hpp"
#include "app/trace_metadata_for.hpp"
#include "engine/faults.hpp"
#include "fixtures/tiny_model.hpp"
#include "model/gguf.hpp"
#include "reference/generate.hpp"
#include "reference/weights.hpp"
#include "tapdiff/trace_reader.hpp"
#include "tapdiff/trace_writer.hpp"

namespace tapdiff::engine::test {

inline GgufFile fixture_file(const FixtureSpec& spec) {
  return GgufFile::from_bytes("fixture.gguf", build_fixture(spec).to_bytes());
}

inline FixtureSpec llama_spec(GgmlType type = GgmlType::F32) {
  FixtureSpec s;
  s.weight_type = type;
  return s;
}

inline FixtureSpec qwen2_spec(GgmlType type = GgmlType::F32) {
  FixtureSpec s;
  s.arch = Arch::qwen2;
  s.tied_output = true;
  s.weight_type = type;
  return s;
}

// Qwen3's shape: q/k norm per head, heads wider than n_embd / n_head (q_dim 128 at n_embd 64).
inline FixtureSpec qwen3_spec(GgmlType type = GgmlType::F32) {
  FixtureSpec s;
  s.arch = Arch::qwen3;
  s.head_dim = 32;
  s.tied_output = true;
  s.weight_type = type;
  return s;
}

// Qwen3-MoE's shape: qwen3's attention, 8 experts a layer, 2 per token.
inline FixtureSpec qwen3moe_spec(GgmlType type = GgmlType::F32) {
  FixtureSpec s = qwen3_spec(type);
  s.arch = Arch::qwen3moe;
  return s;
}

// Mixtral's shape: a llama GGUF with 4 experts a layer, 2 per token.
inline FixtureSpec mixtral_spec(GgmlType type = GgmlType::F32) {
  FixtureSpec s;
  s.n_expert = 4;
  s.n_expert_used = 2;
  s.weight_type = type;
  return s;
}

// Llama 3.1's shape: a llama GGUF with rope_freqs.weight and base 5e5.
inline FixtureSpec llama3_spec(GgmlType type = GgmlType::F32) {
  FixtureSpec s;
  s.llama3 = true;
  s.weight_type = type;
  return s;
}

// Gemma 2's shape: GeGLU, scaled embeddings, post-norms, soft-caps, even layers sliding (window 4).
inline FixtureSpec gemma2_spec(GgmlType type = GgmlType::F32) {
  FixtureSpec s;
  s.arch = Arch::gemma2;
  s.weight_type = type;
  return s;
}

// Gemma 3's shape: gemma2 without soft-caps, with q/k norm; six layers, the sixth global, the
// sliding ones rotated at base 10000.
inline FixtureSpec gemma3_spec(GgmlType type = GgmlType::F32) {
  FixtureSpec s;
  s.arch = Arch::gemma3;
  s.n_layer = 6;
  s.weight_type = type;
  return s;
}

// Phi-3's shape: q/k/v fused in attn_qkv, gate/up fused in ffn_up.
inline FixtureSpec phi3_spec(GgmlType type = GgmlType::F32) {
  FixtureSpec s;
  s.arch = Arch::phi3;
  s.weight_type = type;
  return s;
}

// SmolLM3's shape: llama with no RoPE in every fourth layer; four layers, the last without RoPE,
// a tied head, base 5e6.
inline FixtureSpec smollm3_spec(GgmlType type = GgmlType::F32) {
  FixtureSpec s;
  s.arch = Arch::smollm3;
  s.n_layer = 4;
  s.tied_output = true;
  s.weight_type = type;
  return s;
}

// Ministral 3's shape: llama with YaRN x16 of magnitude 1 and Llama 4's attention temperature,
// which acts from YaRN's original context on: 8 here (n_ctx 128 / 16).
inline FixtureSpec mistral3_spec(GgmlType type = GgmlType::F32) {
  FixtureSpec s;
  s.arch = Arch::mistral3;
  s.n_ctx_train = 128;
  s.weight_type = type;
  return s;
}

// Granite 3's shape: llama with its four multipliers (embedding 12, residual 0.22, attention
// 1/head_dim, logits divided by 8).
inline FixtureSpec granite_spec(GgmlType type = GgmlType::F32) {
  FixtureSpec s;
  s.arch = Arch::granite;
  s.weight_type = type;
  return s;
}

// Granite 3 MoE's: Granite's multipliers, 8 experts, 2 a token.
inline FixtureSpec granitemoe_spec(GgmlType type = GgmlType::F32) {
  FixtureSpec s = granite_spec(type);
  s.arch = Arch::granitemoe;
  return s;
}

// k-quants need rows that are multiples of 256.
// The spec with RoPE scaling as the real models declare it (linear 8; yarn 4 from n_ctx / 4).
inline FixtureSpec rope_scaled(FixtureSpec s, RopeScalingType type) {
  s.rope_scaling = type;
  return s;
}

inline FixtureSpec wide(FixtureSpec s) {
  s.n_embd = 256;
  s.n_ff = 512;
  if (s.head_dim > 0) s.head_dim = 64;  // attn_output's rows are n_head * head_dim wide
  return s;
}

inline std::string temp_path(const std::string& name) {
  return ::testing::TempDir() + "tapdiff_engine_" + std::to_string(getpid()) + "_" + name + ".h5";
}

// A trace file removed when the test ends.
struct TempTrace {
  explicit TempTrace(const std::string& name) : path(temp_path(name)) {}
  ~TempTrace() { std::remove(path.c_str()); }
  TempTrace(const TempTrace&) = delete;
  TempTrace& operator=(const TempTrace&) = delete;
  std::string path;
};

// The metadata an engine run declares (the CLI's one builder, app/trace_metadata_for).
inline TraceMetadata engine_metadata(const GgufFile& model, const std::vector<int>& prompt, const EngineOptions& o) {
  const Fault fault = parse_fault(o.fault);
  return trace_metadata_for(model, o.backend == Backend::cuda ? Producer::engine_cuda : Producer::engine_host,
                            std::string(precision_name(o.precision)),
                            fault == Fault::none ? "none" : std::string(fault_spec(fault).name), prompt, o.n_predict);
}

inline std::vector<int> run_engine(const GgufFile& model, const std::vector<int>& prompt,
                                   const EngineOptions& o, const std::string& path,
                                   std::vector<std::vector<float>>* logits = nullptr,
                                   WriterOptions writer = {}) {
  TraceWriter trace(path, engine_metadata(model, prompt, o), std::move(writer));
  std::vector<int> tokens = generate(model, prompt, o, &trace, logits);
  trace.close();
  return tokens;
}

inline std::vector<int> run_reference(const GgufFile& model, const std::vector<int>& prompt,
                                      int n_predict, const std::string& path) {
  const ref::Weights w = ref::load_weights(model);
  EngineOptions o;
  o.n_predict = n_predict;
  TraceMetadata m = engine_metadata(model, prompt, o);
  m.producer = Producer::reference;
  TraceWriter trace(path, m);
  ref::GenerateOptions ro;
  ro.n_predict = n_predict;
  std::vector<int> tokens = ref::generate(w, prompt, ro, &trace);
  trace.close();
  return tokens;
}

struct TapError {
  std::string tap;     // full name
  double max_abs = 0;  // max |engine - reference| over the tap's common positions
  double max_ref = 0;  // max |reference| there
  double ratio() const { return max_ref > 0 ? max_abs / max_ref : max_abs; }
};

// Every reference tap against the engine's at the positions both recorded; a tap the engine
// lacks, or a position set that differs, is a failure.
inline std::vector<TapError> compare_traces(const std::string& engine_path,
                                            const std::string& reference_path) {
  const TraceReader e(engine_path), r(reference_path);
  std::vector<TapError> errors;
  for (const TapInfo& rt : r.taps()) {
    const TapInfo* et = e.find(rt.name, rt.layer);
    if (et == nullptr) {
      ADD_FAILURE() << "engine trace lacks " << rt.full_name;
      continue;
    }
    EXPECT_EQ(et->positions(), rt.positions()) << rt.full_name;
    EXPECT_EQ(et->row_shape, rt.row_shape) << rt.full_name;
    const TapRows er = e.read(*et), rr = r.read(rt);
    if (er.values.size() != rr.values.size()) continue;
    TapError err{rt.full_name};
    for (std::size_t i = 0; i < rr.values.size(); ++i) {
      err.max_abs = std::max(err.max_abs, std::abs(double(er.values[i]) - double(rr.values[i])));
      err.max_ref = std::max(err.max_ref, std::abs(double(rr.values[i])));
    }
    errors.push_back(err);
  }
  return errors;
}

inline std::string scientific(double v) {
  char text[32];
  std::snprintf(text, sizeof text, "%.2e", v);
  return text;
}

inline TapError worst(const std::vector<TapError>& errors) {
  TapError w;
  for (const TapError& e : errors)
    if (e.ratio() >= w.ratio()) w = e;
  return w;
}

}  // namespace tapdiff::engine::test
