// Golden traces: recorded runs that later runs are checked against (`check --golden`) and
// that are regenerated deliberately (`golden update`). A golden trace is its own recipe: its
// metadata names the producer, model (path and sha256), tokens, precision and fault, and its
// tap filter which taps it holds.
#pragma once

#include <string>
#include <vector>

#include "app/harness.hpp"
#include "diff/result.hpp"
#include "tapdiff/trace_metadata.hpp"

namespace tapdiff {

// The model a golden was recorded with: `model_override` when given, else the recorded
// model_path as is, else relative to the golden's folder, else a file of that name in
// `model_dir` (when given). Throws InputError naming the golden and the paths tried.
std::string golden_model_path(const std::string& golden, const TraceMetadata& metadata,
                              const std::string& model_override, const std::string& model_dir = "");

// Throws InputError when `model`'s sha256 is not the one the golden was recorded with.
void verify_golden_model(const std::string& golden, const TraceMetadata& metadata, const std::string& model);

// A golden as a recipe: its metadata, its tap filter and the model, resolved as above and
// verified by sha256.
struct Golden {
  TraceMetadata metadata;
  TapFilterSpec taps;
  std::string model;
};
Golden read_golden(const std::string& golden, const std::string& model_override, const std::string& model_dir = "");

// The golden's model, prompt, n_predict, tap filter and precision: what a run compared with
// it must use.
RunSpec golden_inputs(const Golden& golden);

// The run that re-creates the golden: golden_inputs plus its producer (engine-cuda → `cuda`,
// which falls back to host without a device) and fault. Throws InputError for a golden
// tapdiff cannot re-run (an external producer).
RunSpec golden_rerun_spec(const std::string& path, const Golden& golden);

// What changed from an old golden to its regenerated trace, tap by tap, bit-exact.
struct TapChange {
  std::string tap;        // full name
  double max_nmse = 0;    // over the common positions
  double max_abs = 0;
  std::string structural; // shape or presence change, "" when the values were compared
};
struct GoldenChanges {
  // Value changes in execution order (the first is where the change starts), then shape and
  // presence changes.
  std::vector<TapChange> changed;
  std::size_t taps_compared = 0;
  std::vector<std::int32_t> old_tokens, new_tokens;
  bool tokens_changed() const { return old_tokens != new_tokens; }
  bool any() const { return tokens_changed() || !changed.empty(); }
};
GoldenChanges golden_changes(const diff::DiffResult& old_vs_new);

}  // namespace tapdiff
