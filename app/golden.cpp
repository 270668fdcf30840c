#include "app/golden.hpp"

#include <filesystem>
#include <fmt/format.h>
#include <map>

#include "model/error.hpp"
#include "model/sha256.hpp"
#include "tapdiff/trace_reader.hpp"

namespace tapdiff {
namespace fs = std::filesystem;

std::string golden_model_path(const std::string& golden, const TraceMetadata& metadata,
                              const std::string& model_override, const std::string& model_dir) {
  if (!model_override.empty()) return model_override;
  if (metadata.model_path.empty())
    throw InputError(golden, "model_path", "empty: pass the model with --model");
  const fs::path recorded(metadata.model_path);
  std::vector<fs::path> tried{recorded};
  if (recorded.is_relative()) tried.push_back(fs::path(golden).parent_path() / recorded);
  if (!model_dir.empty()) tried.push_back(fs::path(model_dir) / recorded.filename());
  std::string listed;
  for (const auto& path : tried) {
    if (fs::is_regular_file(path)) return path.string();
    listed += (listed.empty() ? "" : ", ") + path.string();
  }
  throw InputError(golden, "model_path",
                   fmt::format("the recorded model {} was not found (tried {}); pass the model with --model "
                               "(its sha256 must be {})",
                               metadata.model_path, listed, metadata.model_sha256));
}

void verify_golden_model(const std::string& golden, const TraceMetadata& metadata, const std::string& model) {
  if (metadata.model_sha256.empty()) return;  // an external producer may not know the hash
  const std::string actual = sha256_file(model);
  if (actual != metadata.model_sha256)
    throw InputError(golden, "model_sha256",
                     fmt::format("the golden was recorded with {} (sha256 {}), but {} has sha256 {}: "
                                 "regenerate that exact model, or record a new golden",
                                 metadata.model_path, metadata.model_sha256, model, actual));
}

Golden read_golden(const std::string& golden, const std::string& model_override, const std::string& model_dir) {
  const TraceReader trace(golden);
  Golden g{trace.metadata(), trace.filter(), ""};
  const TraceMetadata& m = g.metadata;
  if (m.prompt_length < 1 || m.prompt_length > std::int64_t(m.tokens.size()))
    throw InputError(golden, "prompt_length",
                     fmt::format("expected 1..{} (the number of tokens), got {}", m.tokens.size(), m.prompt_length));
  g.model = golden_model_path(golden, m, model_override, model_dir);
  verify_golden_model(golden, m, g.model);
  return g;
}

RunSpec golden_inputs(const Golden& g) {
  RunSpec spec;
  spec.model = g.model;
  spec.prompt.assign(g.metadata.tokens.begin(), g.metadata.tokens.begin() + g.metadata.prompt_length);
  spec.n_predict = int(std::int64_t(g.metadata.tokens.size()) - g.metadata.prompt_length);
  spec.precision = g.metadata.precision;
  spec.taps = g.taps;
  return spec;
}

RunSpec golden_rerun_spec(const std::string& path, const Golden& g) {
  RunSpec spec = golden_inputs(g);
  switch (g.metadata.producer) {
    case Producer::reference: spec.backend = "reference"; break;
    case Producer::engine_host: spec.backend = "host"; break;
    case Producer::engine_cuda: spec.backend = "cuda"; break;
    case Producer::external:
    case Producer::llama_cpp:
    case Producer::transformers:
      throw InputError(path, "producer",
                       fmt::format("recorded by {}: tapdiff re-runs only goldens of its own reference or engine; "
                                   "re-record this one with that engine",
                                   g.metadata.producer == Producer::external
                                       ? std::string("an external engine")
                                       : std::string(producer_name(g.metadata.producer))));
  }
  spec.fault = g.metadata.fault == "none" ? "" : g.metadata.fault;
  return spec;
}

GoldenChanges golden_changes(const diff::DiffResult& old_vs_new) {
  GoldenChanges c;
  c.old_tokens = old_vs_new.expected.metadata.tokens;
  c.new_tokens = old_vs_new.actual.metadata.tokens;
  std::map<std::string, std::string> structural;  // tap → what changed in its shape or presence
  for (const auto& f : old_vs_new.findings)
    if (f.kind == "shape" || f.kind == "missing-in-actual" || f.kind == "missing-in-expected")
      structural[f.tap] = f.kind == "shape" ? f.detail
                          : f.kind == "missing-in-actual" ? "no longer recorded"
                                                          : "newly recorded";
  for (const auto& tap : old_vs_new.taps) {
    ++c.taps_compared;
    TapChange change{tap.full_name, 0, 0, ""};
    bool differs = false;
    for (const auto& row : tap.rows) {
      change.max_nmse = std::max(change.max_nmse, row.nmse);
      change.max_abs = std::max(change.max_abs, row.max_abs);
      differs = differs || row.max_abs > 0 || row.nonfinite != row.nonfinite_expected;
    }
    if (differs) c.changed.push_back(change);
  }
  for (const auto& [tap, what] : structural) c.changed.push_back({tap, 0, 0, what});
  return c;
}

}  // namespace tapdiff
