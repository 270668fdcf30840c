// Batch and chunk invariance: the engine on the same tokens with its prompt prefilled in one
// batch, token by token and in chunks of a few sizes. A correct engine computes the same numbers
// (to its precision's noise) however the prompt is cut; a difference is a finding at the first
// tap where it shows, with the chunking that exposes it (a KV cache offset that only a second
// chunk uses, a mask built for one batch, a batched GEMM whose rows interfere).
#pragma once

#include <string>
#include <vector>

#include "app/harness.hpp"
#include "app/report_output.hpp"
#include "diff/compare.hpp"
#include "diff/result.hpp"

namespace tapdiff {

inline const std::vector<int> kInvarianceChunks = {1, 2, 3, 7};

struct InvarianceRun {
  int chunk = 0;  // prompt tokens per prefill step
  std::string trace;
  // The one-batch run (expected) against this one (actual). A bug of the one-batch path is
  // diagnosed in the expected trace (Diagnosis::in_expected).
  diff::DiffResult result;
};

struct InvarianceResult {
  std::string one_batch_trace;
  std::vector<InvarianceRun> runs;  // in the order of the chunk sizes
};

// The chunk sizes that cut a prompt of n_prompt tokens (1 .. n_prompt - 1), in order, once
// each; throws std::invalid_argument when none does.
std::vector<int> cutting_chunks(const std::vector<int>& requested, int n_prompt);

// Runs `engine` (its trace path unused) into dir/one-batch.h5 and dir/chunk-<c>.h5, every
// prompt position's logits recorded, and diffs each chunked run against the one-batch run.
InvarianceResult run_invariance(const RunSpec& engine, const std::vector<int>& chunks,
                                const diff::DiffOptions& options, const std::string& dir);

// One line per chunking: its verdict and first finding.
std::string invariance_table(const InvarianceResult& result);

// The table (on stdout with the text report, else on stderr), then the reports of the first
// chunking that differs (of the last when all agree); returns the exit code.
int write_invariance_reports(const InvarianceResult& result, const ReportOutput& out);

}  // namespace tapdiff
