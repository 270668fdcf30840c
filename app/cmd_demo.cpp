// `tapdiff demo`: the whole story on generated fixtures. A clean engine run passes; the same
// engine with a KV-cache bug diverges, and the diff says where and why; reports are written.
#include <filesystem>
#include <fmt/format.h>

#include "app/commands.hpp"
#include "app/exit_codes.hpp"
#include "app/harness.hpp"
#include "app/report_output.hpp"
#include "diff/compare.hpp"
#include "fixtures/tiny_model.hpp"

namespace tapdiff {
namespace {

void banner(const std::string& text) { fmt::print("\n── {} {}\n\n", text, std::string(std::max<std::size_t>(3, 76 - text.size()), '-')); }

}  // namespace

void add_demo_command(CLI::App& app, SetExit set_exit) {
  auto* cmd = app.add_subcommand("demo", "The end-to-end story on a generated model: PASS, then a bug found and diagnosed");
  auto out = std::make_shared<std::string>("build/demo");
  auto fault = std::make_shared<std::string>("kv-stuck-length");
  cmd->add_option("--out", *out, "Directory for the model, traces and reports")->capture_default_str();
  cmd->add_option("--inject", *fault, "The engine bug to demonstrate")->capture_default_str();
  cmd->callback([out, fault, set_exit] {
    namespace fs = std::filesystem;
    fs::create_directories(*out);
    const std::string model = *out + "/tiny-qwen2.gguf";
    FixtureSpec spec;
    spec.arch = Arch::qwen2;
    spec.n_layer = 4;
    spec.weight_type = GgmlType::Q8_0;
    spec.seed = 7;
    write_fixture(spec, model);
    fmt::print("model: {} (generated: qwen2, {} layers, n_embd {}, GQA {}/{}, Q8_0 weights)\n", model, spec.n_layer,
               spec.n_embd, spec.n_head, spec.n_head_kv);

    RunSpec reference;
    reference.model = model;
    reference.prompt = {1, 70, 200, 33, 5, 90, 12, 140};
    reference.n_predict = 16;
    reference.trace = *out + "/reference.h5";
    run_model(reference);

    banner("1. the engine as it should be: tapdiff check");
    RunSpec engine = reference;
    engine.backend = "host";
    engine.trace = *out + "/engine-clean.h5";
    run_model(engine);
    ReportOutput quiet;
    const auto clean = diff::diff_traces(reference.trace, engine.trace);
    write_reports(clean, quiet);

    banner(fmt::format("2. the same engine with a bug: --inject {}", *fault));
    engine.fault = *fault;
    engine.trace = *out + "/engine-" + *fault + ".h5";
    run_model(engine);
    ReportOutput files;
    files.files = {*out + "/report.html", *out + "/report.md"};
    const auto buggy = diff::diff_traces(reference.trace, engine.trace);
    write_reports(buggy, files);
    fmt::print("\nOpen {}/report.html in a browser for the heatmaps and the logits side by side.\n", *out);
    set_exit(clean.verdict == diff::Verdict::pass && buggy.verdict == diff::Verdict::diverged ? kExitPass
                                                                                               : kExitDiverged);
  });
}

}  // namespace tapdiff
