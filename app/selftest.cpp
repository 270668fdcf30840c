#include "app/selftest.hpp"

#include <filesystem>
#include <fmt/format.h>

#include "app/harness.hpp"
#include "diff/compare.hpp"
#include "diff/repeats.hpp"
#include "engine/faults.hpp"
#include "fixtures/fault_expectations.hpp"
#include "model/fused_weights.hpp"
#include "model/config.hpp"
#include "tapdiff/weight_taps.hpp"

namespace tapdiff {
namespace {

const std::vector<int> kPrompt = {1, 20, 40, 60, 80};  // P = 5
constexpr int kPredict = 4;

std::string finding_text(const std::string& tap, std::int64_t position, const std::string& cls) {
  return fmt::format("{} @ {} · {}", tap, position, cls);
}

std::string tap_full_name(std::string_view tap, int layer) {
  return layer >= 0 ? fmt::format("blk.{}.{}", layer, tap) : std::string(tap);
}

}  // namespace

std::vector<SelftestRow> run_selftest(const SelftestOptions& o) {
  namespace fs = std::filesystem;
  fs::create_directories(o.work_dir);
  std::vector<std::string> models = o.models;
  if (models.empty())
    for (const auto& m : selftest_models()) models.push_back(write_selftest_model(m, o.work_dir));
  std::vector<std::string> faults = o.faults;
  if (faults.empty())
    for (const auto& f : engine::fault_catalogue()) faults.emplace_back(f.name);

  // Plan first so progress knows the total: (model, precision, fault) triples that apply.
  struct Job {
    std::string model, precision, fault;
  };
  std::vector<Job> jobs;
  for (const auto& model : models) {
    const GgufFile file = GgufFile::open(model);
    const ModelConfig config = load_model_config(file);
    for (const auto& precision : o.precisions) {
      jobs.push_back({model, precision, ""});
      for (const auto& f : faults)
        if (!engine::fault_not_applicable(engine::parse_fault(f), file, config, int(kPrompt.size()), kPredict))
          jobs.push_back({model, precision, f});
    }
  }

  const TapFilter filter = TapFilter::parse(o.taps);
  std::vector<SelftestRow> rows;
  std::string reference_for;
  const std::string ref_trace = o.work_dir + "/reference.h5";
  for (std::size_t i = 0; i < jobs.size(); ++i) {
    const Job& job = jobs[i];
    if (reference_for != job.model) {
      RunSpec ref;
      ref.model = job.model;
      ref.prompt = kPrompt;
      ref.n_predict = kPredict;
      ref.trace = ref_trace;
      ref.taps.names = o.taps;
      ref.weights = "auto";  // weights first: a loader fault shows in its weight tap
      ref.progress = false;
      run_model(ref);
      reference_for = job.model;
    }
    const FaultExpectation* expectation = job.fault.empty() ? nullptr : find_fault_expectation(job.fault);
    RunSpec eng;
    eng.backend = o.backend;
    eng.model = job.model;
    eng.prompt = kPrompt;
    eng.n_predict = kPredict;
    eng.precision = job.precision;
    eng.fault = job.fault;
    eng.prefill_chunk = expectation ? expectation->prefill_chunk : 0;
    eng.trace = o.work_dir + "/engine.h5";
    eng.taps.names = o.taps;
    eng.weights = "auto";
    eng.progress = false;
    run_model(eng);
    diff::DiffResult d = diff::diff_traces(ref_trace, eng.trace);
    // A fault expected to be nondeterministic is checked as `check --repeat 2` would.
    if (expectation && expectation->bug_class == "nondeterministic")
      if (const auto differ = repeat_engine(eng, 2)) diff::put_nondeterminism_first(differ->first, differ->second, d);

    SelftestRow row;
    row.fault = job.fault.empty() ? "none" : job.fault;
    row.model = fs::path(job.model).filename().string();
    row.precision = job.precision;
    const auto [at, diagnosis] = diff::leading_finding(d);
    const std::string cls = diagnosis ? diagnosis->bug_class : "";
    row.found = at ? finding_text(at->tap, at->position, cls) : "PASS";
    row.variant = diagnosis ? diagnosis->variant : "";
    row.evidence = diagnosis ? diff::evidence_text(diagnosis->evidence) : "";
    if (job.fault.empty()) {
      row.expected = "PASS";
      row.ok = d.verdict == diff::Verdict::pass;
    } else {
      const FaultExpectation* e = expectation;
      if (!e) {
        row.expected = "(no expectation in fixtures/fault_expectations.cpp)";
      } else {
        const GgufFile file = GgufFile::open(job.model);
        const auto weight = weight_tap_tensor(e->tap);
        const ModelConfig config = load_model_config(file);
        auto position = resolve_position(e->position, std::int64_t(kPrompt.size()),
                                         weight ? file.find_tensor(*weight) : nullptr,
                                         config.rope_scaling.scales_magnitude());
        const int layer = resolve_layer(e->layer, config);
        const bool summary_only = e->tap == "attn.probs" && !filter.tap_enabled("attn.probs", layer) &&
                                  filter.tap_enabled("attn.probs.summary", layer);
        std::string tap = tap_full_name(summary_only ? "attn.probs.summary" : e->tap, layer);
        // A weight the model stores fused (phi3) is recorded as the fused tensor: its rows there.
        if (const auto part = weight ? fused_part(config, *weight) : std::nullopt) {
          tap = "weight." + part->fused;
          position += part->first_row;
        }
        row.expected = finding_text(tap, position, std::string(e->bug_class));
        row.class_withheld = at && cls == "unexplained" && finding_text(at->tap, at->position, "") ==
                                                               finding_text(tap, position, "");
        row.ok = row.found == row.expected || row.class_withheld;
      }
    }
    rows.push_back(std::move(row));
    if (o.on_progress) o.on_progress(int(i + 1), int(jobs.size()));
  }
  return rows;
}

std::string selftest_table(const std::vector<SelftestRow>& rows) {
  std::string out = "| fault | model | precision | expected | found | evidence | diagnosis variant | verdict |\n"
                    "|---|---|---|---|---|---|---|---|\n";
  int passed = 0, diagnosed = 0, reproduced = 0, withheld = 0;
  for (const auto& r : rows) {
    out += fmt::format("| {} | {} | {} | {} | {} | {} | {} | {} |\n", r.fault, r.model, r.precision, r.expected,
                       r.found, r.evidence, r.variant, !r.ok ? "MISS" : r.class_withheld ? "ok (class withheld)" : "ok");
    passed += r.ok;
    diagnosed += !r.evidence.empty();
    reproduced += r.evidence == "reproduced";
    withheld += r.class_withheld;
  }
  out += fmt::format("\nselftest: {} passed, {} failed\n", passed, int(rows.size()) - passed);
  out += fmt::format("evidence: {} of {} diagnosed findings reproduced by a named variant, {} classes withheld "
                     "as unexplained\n",
                     reproduced, diagnosed, withheld);
  return out;
}

}  // namespace tapdiff
