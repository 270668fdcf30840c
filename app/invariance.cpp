#include "app/invariance.hpp"

#include <algorithm>
#include <filesystem>
#include <fmt/format.h>
#include <stdexcept>

namespace tapdiff {

std::vector<int> cutting_chunks(const std::vector<int>& requested, int n_prompt) {
  std::vector<int> chunks;
  for (int c : requested)
    if (c >= 1 && c < n_prompt && std::find(chunks.begin(), chunks.end(), c) == chunks.end()) chunks.push_back(c);
  if (chunks.empty())
    throw std::invalid_argument(fmt::format(
        "--chunks: none of the chunk sizes cuts the {}-token prompt (each must be 1 .. {}); a longer prompt "
        "or smaller chunks",
        n_prompt, n_prompt - 1));
  return chunks;
}

InvarianceResult run_invariance(const RunSpec& engine, const std::vector<int>& chunks,
                                const diff::DiffOptions& options, const std::string& dir) {
  namespace fs = std::filesystem;
  InvarianceResult out;
  RunSpec run = engine;
  run.logits_all = true;  // a chunk's logits are the prefill's too
  run.prefill_chunk = 0;
  run.trace = (fs::path(dir) / "one-batch.h5").string();
  run_model(run);
  out.one_batch_trace = run.trace;
  for (int chunk : cutting_chunks(chunks, static_cast<int>(engine.prompt.size()))) {
    run.prefill_chunk = chunk;
    run.trace = (fs::path(dir) / fmt::format("chunk-{}.h5", chunk)).string();
    run_model(run);
    out.runs.push_back({chunk, run.trace, diff::diff_traces(out.one_batch_trace, run.trace, options)});
  }
  return out;
}

std::string invariance_table(const InvarianceResult& result) {
  std::string out = "prefill            verdict    first finding (against the one-batch prefill)\n";
  for (const InvarianceRun& r : result.runs) {
    const diff::DiffResult& d = r.result;
    const auto [at, why] = diff::leading_finding(d);
    const std::string chunking = r.chunk == 1 ? "token by token" : fmt::format("chunks of {}", r.chunk);
    std::string finding =
        at ? fmt::format("{} @ {}{}", at->tap, at->position, why ? fmt::format(" · {}", why->bug_class) : "") : "-";
    if (why && why->in_expected) finding += " (in the one-batch run: its own inputs do not give it)";
    out += fmt::format("{:<18} {:<10} {}\n", chunking, diff::verdict_text(d.verdict), finding);
  }
  return out;
}

int write_invariance_reports(const InvarianceResult& result, const ReportOutput& out) {
  fmt::print(out.format == "text" ? stdout : stderr, "{}\n", invariance_table(result));
  const auto shown = std::find_if(result.runs.begin(), result.runs.end(),
                                  [](const InvarianceRun& r) { return r.result.verdict != diff::Verdict::pass; });
  const InvarianceRun& run = shown != result.runs.end() ? *shown : result.runs.back();
  write_reports(run.result, out);
  return exit_code_for(run.result);
}

}  // namespace tapdiff
