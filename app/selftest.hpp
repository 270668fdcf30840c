// The self-test: every catalogue fault on every self-test model where it applies, in f32 and
// f16; the engine with the fault against the reference, diffed, and the finding checked
// against fixtures/fault_expectations: the exact tap and first position, and the class right
// or withheld as unexplained, never wrong. Clean runs must pass (no false positive).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace tapdiff {

struct SelftestOptions {
  std::string work_dir;                 // models and traces go here
  std::vector<std::string> models;      // GGUF paths; empty: the generated self-test models
  std::vector<std::string> precisions = {"f32", "f16"};
  std::vector<std::string> faults;      // empty: the whole catalogue
  std::string backend = "host";
  // Tap names both runs record (a filter as `run --taps` takes it; empty: every tap). A fault
  // expected at attn.probs is expected at attn.probs.summary where the filter keeps only that.
  std::string taps;
  std::function<void(int done, int total)> on_progress;
};

struct SelftestRow {
  std::string fault;  // "none" for the clean run
  std::string model;
  std::string precision;
  std::string expected;  // "blk.0.attn.probs @ P=5 · kv-cache"
  std::string found;     // same form, or "PASS"
  std::string variant;   // the diagnosis variant
  std::string evidence;  // "reproduced", "tied", "indicated", "unexplained"; "" without a diagnosis
  // ok: the finding is where the expectation says and its class is right, or withheld
  // ("unexplained": no evidence named one). A wrong class is a miss: a false lead.
  bool ok = false;
  bool class_withheld = false;
};

std::vector<SelftestRow> run_selftest(const SelftestOptions& options);
// A Markdown table of the rows and a closing "N passed, M failed" line.
std::string selftest_table(const std::vector<SelftestRow>& rows);

}  // namespace tapdiff
